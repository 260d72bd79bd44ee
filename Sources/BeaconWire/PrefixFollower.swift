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
    public var prefix: String { sequencer.prefix }
    /// The live keys under the prefix as of ``through``.
    public private(set) var state: [String: Beacon_V1_KeyValue] = [:]
    /// The mirror is complete through this revision.
    public var through: UInt64 { sequencer.through }
    /// The journal epoch the mirror belongs to.
    public var epoch: UInt64 { sequencer.epoch }
    /// How many gaps were repaired from deltas.
    public private(set) var repairs = 0
    /// How many times state was replaced by a snapshot after the first.
    public private(set) var resyncs = 0

    private let client: WireClient
    private let requestTimeout: Int
    private var sequencer: PrefixSequencer
    private var queued: [Update] = []

    /// Subscribes to `prefix` and takes the first snapshot (subscribe first: no update between
    /// the two can be lost).
    /// - Parameter requestTimeoutMilliseconds: how long a snapshot or delta request may take.
    public init(client: WireClient, prefix: String, receiveHighWaterMark: Int32 = 100_000,
                requestTimeoutMilliseconds: Int = 30_000) throws(WireError) {
        self.client = client
        self.requestTimeout = requestTimeoutMilliseconds
        sequencer = PrefixSequencer(prefix: prefix)
        try client.subscribe(prefix, receiveHighWaterMark: receiveHighWaterMark)
        try resync(counting: false)
    }

    /// Processes publications for up to `timeoutMilliseconds`; returns as soon as something was
    /// applied, or `nil` on timeout.
    public func next(timeoutMilliseconds: Int) throws(WireError) -> Update? {
        if !queued.isEmpty { return queued.removeFirst() }
        guard let publication = try client.receivePublication(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        let decision: PrefixSequencer.Decision
        switch publication {
        case .diff(let diff): decision = sequencer.accept(diff)
        case .commit(let marker): decision = sequencer.accept(marker)
        case .heartbeat(let heartbeat): decision = sequencer.accept(heartbeat)
        }
        switch decision {
        case .none: break
        case .completed(let events):
            apply(events)
            queued.append(.revision(events))
        case .repair: try repair()
        case .resync: try resync(counting: true)
        }
        return queued.isEmpty ? nil : queued.removeFirst()
    }

    /// Fetches every change after ``through`` and applies it, revision by revision.
    private func repair() throws(WireError) {
        repairs += 1
        while true {
            let page: Beacon_V1_EventsReply
            do {
                page = try client.delta(prefix: prefix, since: through, timeoutMilliseconds: requestTimeout)
            } catch where error.reply?.code == .compacted {
                return try resync(counting: true)
            }
            if page.epoch != epoch { return try resync(counting: true) }
            for revision in PrefixSequencer.revisions(in: page.events) {
                apply(revision)
                queued.append(.revision(revision))
            }
            sequencer.advance(through: page.revision)
            if !page.more { return }
        }
    }

    private func resync(counting: Bool) throws(WireError) {
        let snapshot = try client.snapshot(prefix: prefix, timeoutMilliseconds: requestTimeout)
        state = Dictionary(uniqueKeysWithValues: snapshot.kvs.map { ($0.key, $0) })
        sequencer.reset(epoch: snapshot.epoch, through: snapshot.revision)
        if counting { resyncs += 1 }
        queued.append(.resynced(revision: snapshot.revision))
    }

    private func apply(_ events: [Beacon_V1_Event]) {
        for event in events {
            state[event.change.key] = Self.keyValue(after: event)
        }
    }

    /// The key's entry once `event` is applied: its new value, or `nil` when it was deleted or
    /// expired.
    public static func keyValue(after event: Beacon_V1_Event) -> Beacon_V1_KeyValue? {
        let change = event.change
        guard change.kind == .put else { return nil }
        return .with {
            $0.key = change.key
            $0.value = change.value
            $0.version = change.version
            $0.createRevision = change.createRevision
            $0.modRevision = event.revision
            $0.expiresAtMs = change.expiresAtMs
        }
    }
}
