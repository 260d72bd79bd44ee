import BeaconProtocol

/// Mirrors every key under one prefix by the protocol's subscriber rules (proto/PROTOCOL.md,
/// "Following a prefix"): subscribe, snapshot, apply diffs newer than the snapshot whose
/// sequencing marks chain, and repair any gap — a dropped diff, a missing part of a
/// transaction, a silent tail — from a delta, or resync from a snapshot when history is gone.
///
/// Owns no thread: call ``next(timeoutMilliseconds:)`` in a loop on the client's thread.
public final class PrefixFollower {
    /// What the follower did with one publication or repair.
    public enum Update {
        /// One whole revision applied, in order.
        case revision([Beacon_V1_Event])
        /// State replaced by a snapshot (first sync, new epoch, or compacted history).
        case resynced(revision: UInt64)
    }

    /// The prefix followed.
    public let prefix: String
    /// The live keys under the prefix as of ``through``.
    public private(set) var state: [String: Beacon_V1_KeyValue] = [:]
    /// The mirror is complete through this revision.
    public private(set) var through: UInt64 = 0
    /// The journal epoch the mirror belongs to.
    public private(set) var epoch: UInt64 = 0
    /// How many gaps were repaired from deltas.
    public private(set) var repairs = 0
    /// How many times state was replaced by a snapshot after the first.
    public private(set) var resyncs = 0

    private let client: WireClient
    private var pendingRevision: UInt64 = 0
    private var pendingParts: UInt32 = 0
    private var pending: [Beacon_V1_Event] = []
    private var queued: [Update] = []

    /// Subscribes to `prefix` and takes the first snapshot (subscribe first: no update between
    /// the two can be lost).
    public init(client: WireClient, prefix: String, receiveHighWaterMark: Int32 = 100_000) throws(WireError) {
        self.client = client
        self.prefix = prefix
        try client.subscribe(prefix, receiveHighWaterMark: receiveHighWaterMark)
        try resync(counting: false)
    }

    /// Processes publications for up to `timeoutMilliseconds`; returns as soon as something was
    /// applied, or `nil` on timeout.
    public func next(timeoutMilliseconds: Int) throws(WireError) -> Update? {
        if !queued.isEmpty { return queued.removeFirst() }
        guard let publication = try client.receivePublication(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        switch publication {
        case .diff(let diff): try accept(diff)
        case .commit(let marker): try accept(marker)
        case .heartbeat(let heartbeat): try accept(heartbeat)
        }
        return queued.isEmpty ? nil : queued.removeFirst()
    }

    private func accept(_ diff: Beacon_V1_Diff) throws(WireError) {
        if diff.epoch != epoch { return try resync(counting: true) }
        let event = diff.event
        guard event.change.key.hasPrefix(prefix) else { return }
        if event.revision <= through { return }  // already applied (snapshot or repair)
        guard let mark = diff.marks.first(where: { $0.prefix == prefix }) else {
            return try repair()  // the daemon does not sequence our prefix yet: ask, which registers it
        }
        if pendingRevision != 0 && pendingRevision != event.revision { return try repair() }
        if pendingRevision == 0 {
            if mark.previousRevision > through { return try repair() }
            pendingRevision = event.revision
            pendingParts = mark.parts
        }
        pending.append(event)
        if pending.count == Int(pendingParts) {
            apply(pending)
            through = pendingRevision
            queued.append(.revision(pending))
            clearPending()
        }
    }

    private func accept(_ marker: Beacon_V1_CommitMarker) throws(WireError) {
        if marker.epoch != epoch { return try resync(counting: true) }
        if pendingRevision != 0 && marker.revision == pendingRevision { return try repair() }  // parts missing
        if pendingRevision == 0, marker.revision > through, marker.marks.contains(where: { $0.prefix == prefix }) {
            return try repair()  // the revision touched our prefix but none of its diffs arrived
        }
    }

    private func accept(_ heartbeat: Beacon_V1_Heartbeat) throws(WireError) {
        if heartbeat.epoch != epoch { return try resync(counting: true) }
        if pendingRevision != 0 { return try repair() }
        guard let head = heartbeat.prefixes.first(where: { $0.prefix == prefix }) else { return try repair() }
        if head.revision > through { return try repair() }
        through = max(through, heartbeat.headRevision)
    }

    /// Fetches every change after ``through`` and applies it, revision by revision.
    private func repair() throws(WireError) {
        clearPending()
        repairs += 1
        while true {
            let page: Beacon_V1_EventsReply
            do {
                page = try client.delta(prefix: prefix, since: through)
            } catch where error.reply?.code == .compacted {
                return try resync(counting: true)
            }
            if page.epoch != epoch { return try resync(counting: true) }
            var group: [Beacon_V1_Event] = []
            for event in page.events {
                if let last = group.last, last.revision != event.revision {
                    apply(group)
                    queued.append(.revision(group))
                    group = []
                }
                group.append(event)
            }
            if !group.isEmpty {
                apply(group)
                queued.append(.revision(group))
            }
            through = max(through, page.revision)
            if !page.more { return }
        }
    }

    private func resync(counting: Bool) throws(WireError) {
        clearPending()
        let snapshot = try client.snapshot(prefix: prefix)
        state = Dictionary(uniqueKeysWithValues: snapshot.kvs.map { ($0.key, $0) })
        through = snapshot.revision
        epoch = snapshot.epoch
        if counting { resyncs += 1 }
        queued.append(.resynced(revision: snapshot.revision))
    }

    private func apply(_ events: [Beacon_V1_Event]) {
        for event in events {
            let change = event.change
            switch change.kind {
            case .put:
                state[change.key] = .with {
                    $0.key = change.key
                    $0.value = change.value
                    $0.version = change.version
                    $0.createRevision = change.createRevision
                    $0.modRevision = event.revision
                    $0.expiresAtMs = change.expiresAtMs
                }
            default:
                state[change.key] = nil
            }
        }
    }

    private func clearPending() {
        pendingRevision = 0
        pendingParts = 0
        pending.removeAll()
    }
}
