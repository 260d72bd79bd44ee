import BeaconJournal

/// The daemon's authoritative in-memory state: every key's current entry (tombstones too, until
/// compaction), the head revision and the keys in order for prefix scans.
///
/// Writes are applied with an undo record so that a batch whose journal commit fails can be
/// rolled back exactly.
struct SignalStore {
    /// One key's current state. `value` is an encoded `beacon.v1.Value`.
    struct Entry: Equatable {
        var value: [UInt8]
        var version: UInt64
        var createRevision: UInt64
        var modRevision: UInt64
        var expiresAtMilliseconds: UInt64
        var isDeleted: Bool
        /// The writer's session the key is bound to (empty: none).
        var session: [UInt8] = []
    }

    /// What ``apply(_:)`` replaced, to put back with ``undo(_:)``.
    struct Undo {
        var previousHead: UInt64
        var replaced: [(key: String, entry: Entry?)]
    }

    private(set) var entries: [String: Entry] = [:]
    private(set) var headRevision: UInt64 = 0
    private(set) var liveCount = 0
    /// Keys in order; may hold keys since removed (skipped when scanning).
    private var orderedKeys: [String] = []
    /// Keys added since `orderedKeys` was last sorted.
    private var newKeys: [String] = []

    init() {}

    /// Loads the journal's state (in key order) and head revision.
    init(loading journalEntries: [JournalEntry], headRevision: UInt64) {
        entries.reserveCapacity(journalEntries.count)
        orderedKeys.reserveCapacity(journalEntries.count)
        for item in journalEntries {
            entries[item.key] = Entry(value: item.value, version: item.version, createRevision: item.createRevision,
                                      modRevision: item.modRevision, expiresAtMilliseconds: item.expiresAtMilliseconds,
                                      isDeleted: item.isDeleted, session: item.session)
            orderedKeys.append(item.key)
            if !item.isDeleted { liveCount += 1 }
        }
        self.headRevision = headRevision
    }

    var tombstoneCount: Int { entries.count - liveCount }

    /// The live entry for `key`, or `nil` when absent or deleted.
    func live(_ key: String) -> Entry? {
        guard let entry = entries[key], !entry.isDeleted else { return nil }
        return entry
    }

    /// Applies one committed revision's changes and advances the head.
    @discardableResult
    mutating func apply(_ changes: [JournalChange]) -> Undo {
        var undo = Undo(previousHead: headRevision, replaced: [])
        undo.replaced.reserveCapacity(changes.count)
        for change in changes {
            let previous = entries[change.key]
            undo.replaced.append((change.key, previous))
            let entry = Entry(value: change.value, version: change.version, createRevision: change.createRevision,
                              modRevision: change.revision, expiresAtMilliseconds: change.expiresAtMilliseconds,
                              isDeleted: change.kind != .put, session: change.session)
            set(change.key, entry, previous: previous)
            headRevision = max(headRevision, change.revision)
        }
        return undo
    }

    /// Puts back what ``apply(_:)`` replaced.
    mutating func undo(_ undo: Undo) {
        for (key, entry) in undo.replaced.reversed() {
            let current = entries[key]
            if let entry {
                set(key, entry, previous: current)
            } else {
                if let current, !current.isDeleted { liveCount -= 1 }
                entries[key] = nil
            }
        }
        headRevision = undo.previousHead
    }

    private mutating func set(_ key: String, _ entry: Entry, previous: Entry?) {
        if previous == nil { newKeys.append(key) }
        let wasLive = previous.map { !$0.isDeleted } ?? false
        if wasLive != !entry.isDeleted { liveCount += entry.isDeleted ? -1 : 1 }
        entries[key] = entry
    }

    /// Drops tombstones at or below `revision` (after journal compaction).
    mutating func dropTombstones(through revision: UInt64) {
        let dead = entries.filter { $0.value.isDeleted && $0.value.modRevision <= revision }.map(\.key)
        for key in dead { entries[key] = nil }
    }

    private mutating func sortKeysIfNeeded() {
        guard !newKeys.isEmpty else { return }
        newKeys.sort()
        var merged: [String] = []
        merged.reserveCapacity(orderedKeys.count + newKeys.count)
        var i = 0, j = 0
        while i < orderedKeys.count || j < newKeys.count {
            let next: String
            if j >= newKeys.count || (i < orderedKeys.count && orderedKeys[i] < newKeys[j]) {
                next = orderedKeys[i]; i += 1
            } else {
                next = newKeys[j]; j += 1
            }
            if merged.last != next && entries[next] != nil { merged.append(next) }
        }
        orderedKeys = merged
        newKeys.removeAll(keepingCapacity: true)
    }

    /// Calls `body` for each key under `prefix` after `startAfter`, in order, tombstones
    /// included, until it returns `false`.
    mutating func forEach(prefix: String, after startAfter: String = "", _ body: (String, Entry) -> Bool) {
        sortKeysIfNeeded()
        let lower = max(prefix, startAfter)
        var index = lowerBound(lower)
        while index < orderedKeys.count {
            let key = orderedKeys[index]
            index += 1
            guard key.hasPrefix(prefix) else { break }
            if key == startAfter { continue }
            guard let entry = entries[key] else { continue }
            if !body(key, entry) { return }
        }
    }

    /// Keys under `prefix`, tombstones included.
    mutating func keyCount(prefix: String) -> Int {
        if prefix.isEmpty { return entries.count }
        var count = 0
        forEach(prefix: prefix) { _, _ in
            count += 1
            return true
        }
        return count
    }

    private func lowerBound(_ key: String) -> Int {
        var low = 0, high = orderedKeys.count
        while low < high {
            let mid = (low + high) / 2
            if orderedKeys[mid] < key { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// The last revision that changed a key under `prefix`, tombstones included (0 if none).
    mutating func lastRevision(prefix: String) -> UInt64 {
        if prefix.isEmpty { return headRevision }
        var last: UInt64 = 0
        forEach(prefix: prefix) { _, entry in
            last = max(last, entry.modRevision)
            return true
        }
        return last
    }
}
