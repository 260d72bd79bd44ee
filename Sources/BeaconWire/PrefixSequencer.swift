import BeaconProtocol

/// The subscriber rules of proto/PROTOCOL.md §6 for one prefix, as a state machine without I/O.
///
/// Feed it every publication whose topic falls under the prefix (and every commit marker and
/// heartbeat); it answers with what to do: nothing yet, apply a completed revision, repair from
/// a delta, or resync from a snapshot. The caller performs repairs and resyncs and reports
/// their results with ``reset(epoch:through:)`` and ``advance(through:)``.
public struct PrefixSequencer: Sendable {
    /// What the caller must do after a publication.
    public enum Decision: Sendable {
        /// Nothing to apply yet (collecting, already applied, or not ours).
        case none
        /// One whole revision under the prefix, complete and in order: apply it as one batch.
        case completed([Beacon_V1_Event])
        /// A whole revision of one change under the prefix (the common case, without an array).
        case completedOne(Beacon_V1_Event)
        /// Something under the prefix was missed: fetch a `Delta` from ``through``.
        case repair
        /// The journal was replaced (new epoch): discard state and take a snapshot.
        case resync
    }

    /// The prefix followed.
    public let prefix: String
    /// Every change under the prefix up to this revision has been handed out.
    public private(set) var through: UInt64
    /// The journal epoch ``through`` belongs to; 0 before the first snapshot.
    public private(set) var epoch: UInt64

    private var pendingRevision: UInt64 = 0
    private var pendingParts: UInt32 = 0
    private var pending: [Beacon_V1_Event] = []

    /// A sequencer that has seen nothing; call ``reset(epoch:through:)`` after the first snapshot
    /// (or with the revision to resume after).
    public init(prefix: String, epoch: UInt64 = 0, through: UInt64 = 0) {
        self.prefix = prefix
        self.epoch = epoch
        self.through = through
    }

    /// Whether part of a revision has been collected and more parts are expected.
    public var isCollecting: Bool { pendingRevision != 0 }

    /// Starts over at a snapshot (or a resume point): complete through `through` in `epoch`.
    public mutating func reset(epoch: UInt64, through: UInt64) {
        self.epoch = epoch
        self.through = through
        clearPending()
    }

    /// Records that a delta made the mirror complete through `revision`; drops a partial revision.
    public mutating func advance(through revision: UInt64) {
        through = max(through, revision)
        clearPending()
    }

    /// Applies the rules to one diff.
    public mutating func accept(_ diff: Beacon_V1_Diff) -> Decision {
        if diff.epoch != epoch { return .resync }
        let event = diff.event  // once: each read of a message field copies it
        guard event.change.key.isUnder(prefix) else { return .none }
        let revision = event.revision
        if revision <= through { return .none }  // already applied (snapshot or repair)
        guard let mark = diff.marks.first(where: { $0.prefix == prefix }) else {
            return .repair  // the daemon does not sequence the prefix yet: a delta registers it
        }
        if pendingRevision != 0 && pendingRevision != revision { return .repair }  // parts lost
        if pendingRevision == 0 {
            if mark.previousRevision > through { return .repair }  // a whole revision was missed
            if mark.parts <= 1 {  // the revision's one change under the prefix: the common case
                through = revision
                return .completedOne(event)
            }
            pendingRevision = revision
            pendingParts = mark.parts
        }
        pending.append(event)
        guard pending.count >= Int(pendingParts) else { return .none }
        let completed = pending
        through = pendingRevision
        pendingRevision = 0
        pendingParts = 0
        pending = []  // its storage goes with `completed`
        return .completed(completed)
    }

    /// Applies the rules to one commit marker.
    public mutating func accept(_ marker: Beacon_V1_CommitMarker) -> Decision {
        if marker.epoch != epoch { return .resync }
        if pendingRevision != 0 && marker.revision >= pendingRevision { return .repair }  // parts missing
        if marker.revision > through, marker.marks.contains(where: { $0.prefix == prefix }) {
            return .repair  // the revision touched the prefix but none of its diffs arrived
        }
        return .none
    }

    /// Applies the rules to one heartbeat; a heartbeat that proves nothing changed is a bookmark.
    public mutating func accept(_ heartbeat: Beacon_V1_Heartbeat) -> Decision {
        if heartbeat.epoch != epoch { return .resync }
        if pendingRevision != 0 { return .repair }
        guard let head = heartbeat.prefixes.first(where: { $0.prefix == prefix }) else { return .repair }
        if head.revision > through { return .repair }
        through = max(through, heartbeat.headRevision)
        return .none
    }

    /// Splits events ordered by (revision, part) into one array per revision.
    public static func revisions(in events: [Beacon_V1_Event]) -> [[Beacon_V1_Event]] {
        var groups: [[Beacon_V1_Event]] = []
        for event in events {
            if let last = groups.last?.last, last.revision == event.revision {
                groups[groups.count - 1].append(event)
            } else {
                groups.append([event])
            }
        }
        return groups
    }

    private mutating func clearPending() {
        pendingRevision = 0
        pendingParts = 0
        pending.removeAll(keepingCapacity: true)
    }
}
