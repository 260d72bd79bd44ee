#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconJournal
import Foundation

/// Turns what an etcd watch reports under a front's prefix into Beacon's revisions, the same at
/// every front: one Beacon revision per etcd revision that changed a Beacon key, with etcd's
/// revision, versions and create revisions, the commit time and kind from the commit clock.
struct EtcdChangeReader {
    let layout: EtcdLayout
    /// The commit time of the last revision that wrote the clock.
    private(set) var lastCommitMilliseconds: UInt64

    init(layout: EtcdLayout, lastCommitMilliseconds: UInt64) {
        self.layout = layout
        self.lastCommitMilliseconds = lastCommitMilliseconds
    }

    /// The Beacon revisions in `events` (whole etcd revisions, in order), each a list of
    /// changes numbered by part; etcd revisions that changed no Beacon key are left out.
    mutating func revisions(from events: [Etcdserverpb_Event]) -> [[JournalChange]] {
        var result: [[JournalChange]] = []
        var start = events.startIndex
        while start < events.endIndex {
            let revision = events[start].kv.modRevision
            let end = events[start...].firstIndex { $0.kv.modRevision != revision } ?? events.endIndex
            if let changes = changes(of: events[start..<end]) { result.append(changes) }
            start = end
        }
        return result
    }

    /// The Beacon changes of one etcd revision; nil when it changed no Beacon key.
    private mutating func changes(of events: ArraySlice<Etcdserverpb_Event>) -> [JournalChange]? {
        var isExpiry = false
        for event in events where event.type == .put && layout.isClock(event.kv.key) {
            if let clock = EtcdLayout.parseClockValue(event.kv.value) {
                lastCommitMilliseconds = clock.milliseconds
                isExpiry = clock.isExpiry
            }
        }
        let wroteClock = events.contains { layout.isClock($0.kv.key) }
        var changes: [JournalChange] = []
        for event in events {
            guard let key = layout.beaconKey(event.kv.key) else { continue }
            let revision = UInt64(max(event.kv.modRevision, 0))
            switch event.type {
            case .put:
                let stored = EtcdLayout.parseStoredValue(event.kv.value)
                changes.append(JournalChange(
                    revision: revision, kind: .put, key: key, value: stored?.encodedValue ?? [],
                    version: UInt64(max(event.kv.version, 0)), createRevision: UInt64(max(event.kv.createRevision, 0)),
                    expiresAtMilliseconds: stored?.expiresAtMilliseconds ?? 0, timestampMilliseconds: lastCommitMilliseconds))
            default:
                // A front's expiry says so on the clock; a lease that ran out (a session) writes no clock.
                let expired = isExpiry || (!wroteClock && event.prevKv.lease != 0)
                changes.append(JournalChange(revision: revision, kind: expired ? .expire : .delete, key: key, version: 0,
                                             createRevision: 0, timestampMilliseconds: lastCommitMilliseconds))
            }
        }
        guard !changes.isEmpty else { return nil }
        for index in changes.indices {
            changes[index].part = UInt32(index)
            changes[index].parts = UInt32(changes.count)
        }
        return changes
    }

    /// A key's state from a range read; nil for bookkeeping (the clock is taken in passing).
    mutating func entry(_ kv: Etcdserverpb_KeyValue) -> JournalEntry? {
        if layout.isClock(kv.key) {
            if let clock = EtcdLayout.parseClockValue(kv.value) { lastCommitMilliseconds = clock.milliseconds }
            return nil
        }
        guard let key = layout.beaconKey(kv.key) else { return nil }
        let stored = EtcdLayout.parseStoredValue(kv.value)
        return JournalEntry(key: key, value: stored?.encodedValue ?? [], version: UInt64(max(kv.version, 0)),
                            createRevision: UInt64(max(kv.createRevision, 0)), modRevision: UInt64(max(kv.modRevision, 0)),
                            expiresAtMilliseconds: stored?.expiresAtMilliseconds ?? 0, isDeleted: false,
                            modTimeMilliseconds: stored?.modTimeMilliseconds ?? 0)
    }
}
#endif
