import BeaconJournal
import Foundation

/// The daemon's authoritative in-memory state: every key's current entry (tombstones too, until
/// compaction), the head revision and the keys in order for prefix scans.
///
/// Writes are applied with an undo record so that a batch whose journal commit fails can be
/// rolled back exactly.
///
/// Memory: each key is one ``EntryRecord`` (metadata, key, value and session in one allocation),
/// found through an open-addressed hash index of 32-bit record numbers and kept in key order by
/// a sorted array of the same numbers (what that costs per key: `beacon-bench scale --only
/// memory`, in BENCHMARKS.md).
struct SignalStore {
    /// One key's state, copied out of the store. `value` is an encoded `beacon.v1.Value`.
    struct Entry: Equatable {
        var value: [UInt8]
        var version: UInt64
        var createRevision: UInt64
        var modRevision: UInt64
        var expiresAtMilliseconds: UInt64
        var isDeleted: Bool
        /// The writer's session the key is bound to (empty: none).
        var session: [UInt8] = []
        /// Commit time (Unix ms) of `modRevision`; 0 when not known.
        var modTimeMilliseconds: UInt64 = 0
    }

    /// What a write's preconditions look at in a live entry.
    struct Versions {
        var version: UInt64
        var createRevision: UInt64
    }

    /// What ``apply(_:)`` replaced, to put back with ``undo(_:)``.
    struct Undo {
        fileprivate var previousHead: UInt64
        /// The first changed record number with the record it had before (`nil`: the key was
        /// new). Held apart from the rest: most writes change one key, and need no array.
        fileprivate var first: (id: UInt32, previous: EntryRecord?)?
        /// The other changed record numbers with their previous records, in order.
        fileprivate var rest: [(id: UInt32, previous: EntryRecord?)] = []
    }

    private(set) var headRevision: UInt64 = 0
    private(set) var liveCount = 0
    /// Records by number; `nil` for a number not in use.
    private var records: [EntryRecord?] = []
    /// Numbers whose records were removed, reusable once `ordered` no longer holds them.
    private var removedIDs: [UInt32] = []
    private var freeIDs: [UInt32] = []
    private var index = KeyIndex()
    /// The key ``liveVersions(_:)`` last hashed, and its hash (hashing a key costs about 200
    /// instructions; a write hashes its key to look it up, then again to apply it).
    private var hashedKey = ""
    private var hashedKeyHash: UInt32 = 0
    /// Record numbers in key order; may hold numbers since removed until the next merge.
    private var ordered: [UInt32] = []
    /// Record numbers added since `ordered` was last merged.
    private var unordered: [UInt32] = []

    init() {}

    /// Keys held, tombstones included.
    var count: Int { index.count }

    var tombstoneCount: Int { count - liveCount }

    /// Adds one entry of the journal's state while loading it (in key order: faster, not needed).
    mutating func load(_ item: JournalEntry) {
        withUTF8Bytes(item.key) { key in
            let record = EntryRecord.make(
                key: key, keyHash: KeyIndex.hash(key), value: item.value, session: item.session, version: item.version,
                createRevision: item.createRevision, modRevision: item.modRevision,
                expiresAtMilliseconds: item.expiresAtMilliseconds, modTimeMilliseconds: item.modTimeMilliseconds,
                isDeleted: item.isDeleted)
            let (id, previous) = put(record, key: key)
            if previous == nil {
                let inOrder = ordered.last.map { last in records[Int(last)]!.withKey { keyOrder($0, key) < 0 } } ?? true
                if inOrder && unordered.isEmpty { ordered.append(id) } else { unordered.append(id) }
            }
        }
    }

    /// Sets the head revision after loading.
    mutating func loaded(headRevision: UInt64) {
        self.headRevision = headRevision
    }

    /// The live entry for `key`, or `nil` when absent or deleted.
    func live(_ key: String) -> Entry? {
        liveRecord(key).map(Entry.init)
    }

    /// The version and create revision of the live entry for `key`, without copying its value.
    ///
    /// `mutating` though it changes nothing: called on a class's property, a non-mutating method
    /// whose body calls out (the key's bytes are read through a closure) gets a copy of the
    /// whole store, six arrays retained and released per call; a mutating one gets its address.
    @inline(__always)
    mutating func liveVersions(_ key: String) -> Versions? {
        withUTF8Bytes(key) { bytes in
            let hash = KeyIndex.hash(bytes)
            hashedKey = key
            hashedKeyHash = hash
            return liveRecord(bytes, hash: hash).map { Versions(version: $0.fields.version, createRevision: $0.fields.createRevision) }
        }
    }

    /// The hash of a key's `bytes`: the one ``liveVersions(_:)`` last computed when it was for
    /// the same bytes, as it is when a write looks its key up and then applies it.
    @inline(__always)
    private func hash(of bytes: UnsafeRawBufferPointer) -> UInt32 {
        let same = hashedKey.utf8.withContiguousStorageIfAvailable { memo in
            memo.count == bytes.count && (bytes.isEmpty || memcmp(memo.baseAddress!, bytes.baseAddress!, bytes.count) == 0)
        }
        return same == true ? hashedKeyHash : KeyIndex.hash(bytes)
    }

    @inline(__always)
    private func liveRecord(_ key: String) -> EntryRecord? {
        withUTF8Bytes(key) { liveRecord($0, hash: KeyIndex.hash($0)) }
    }

    @inline(__always)
    private func liveRecord(_ key: UnsafeRawBufferPointer, hash: UInt32) -> EntryRecord? {
        guard let id = index.find(key, hash: hash, in: records),
              let record = records[Int(id)], !record.fields.isDeleted else { return nil }
        return record
    }

    /// Applies one committed revision's changes and advances the head.
    @discardableResult
    mutating func apply(_ changes: [JournalChange]) -> Undo {
        var undo = Undo(previousHead: headRevision)
        if changes.count > 1 { undo.rest.reserveCapacity(changes.count - 1) }
        // By index: a for-in loop would copy each change, retaining its key and value.
        for index in changes.indices {
            withUTF8Bytes(changes[index].key) { key in
                let record = EntryRecord.make(
                    key: key, keyHash: hash(of: key), value: changes[index].value, session: changes[index].session,
                    version: changes[index].version, createRevision: changes[index].createRevision,
                    modRevision: changes[index].revision, expiresAtMilliseconds: changes[index].expiresAtMilliseconds,
                    modTimeMilliseconds: changes[index].timestampMilliseconds, isDeleted: changes[index].kind != .put)
                let (id, previous) = put(record, key: key)
                if previous == nil { unordered.append(id) }
                if undo.first == nil { undo.first = (id, previous) } else { undo.rest.append((id, previous)) }
            }
            headRevision = max(headRevision, changes[index].revision)
        }
        return undo
    }

    /// Puts back what ``apply(_:)`` replaced.
    mutating func undo(_ undo: Undo) {
        for (id, previous) in undo.rest.reversed() { restore(id, to: previous) }
        if let (id, previous) = undo.first { restore(id, to: previous) }
        headRevision = undo.previousHead
    }

    /// Puts back the record that number `id` had before a change (`nil`: the key was new).
    private mutating func restore(_ id: UInt32, to previous: EntryRecord?) {
        guard let current = records[Int(id)] else { return }
        if !current.fields.isDeleted { liveCount -= 1 }
        if let previous {
            records[Int(id)] = previous
            if !previous.fields.isDeleted { liveCount += 1 }
        } else {
            remove(id)
        }
    }

    /// Drops tombstones at or below `revision` (after journal compaction).
    mutating func dropTombstones(through revision: UInt64) {
        for id in records.indices {
            guard let record = records[id], record.fields.isDeleted, record.fields.modRevision <= revision else { continue }
            remove(UInt32(id))
        }
        mergeOrder()
    }

    /// Stores `record` under `key`: in place of the key's record, or as a new one.
    /// - Returns: the record number and the record replaced (`nil`: the key is new; its number
    ///   still has to be put in order).
    private mutating func put(_ record: EntryRecord, key: UnsafeRawBufferPointer) -> (id: UInt32, previous: EntryRecord?) {
        if !record.fields.isDeleted { liveCount += 1 }
        guard let id = index.find(key, hash: record.fields.keyHash, in: records) else { return (insert(record), nil) }
        let previous = records[Int(id)]
        if let previous, !previous.fields.isDeleted { liveCount -= 1 }
        records[Int(id)] = record
        return (id, previous)
    }

    /// Gives `record` a number and indexes it.
    private mutating func insert(_ record: EntryRecord) -> UInt32 {
        let id: UInt32
        if let free = freeIDs.popLast() {
            id = free
            records[Int(id)] = record
        } else {
            precondition(records.count < Int(UInt32.max), "more keys than record numbers")
            id = UInt32(records.count)
            records.append(record)
        }
        index.insert(id, hash: record.fields.keyHash, in: records)
        return id
    }

    /// Removes record `id` from the index; its number is reused after the next merge.
    private mutating func remove(_ id: UInt32) {
        guard let record = records[Int(id)] else { return }
        index.remove(id, hash: record.fields.keyHash, in: records)
        records[Int(id)] = nil
        removedIDs.append(id)
    }

    /// Merges the numbers added since the last merge into `ordered`, drops removed ones and
    /// frees their numbers for reuse.
    private mutating func mergeOrder() {
        guard !unordered.isEmpty || !removedIDs.isEmpty else { return }
        let records = self.records
        func precedes(_ left: UInt32, _ right: UInt32) -> Bool {
            records[Int(left)]!.withKey { left in records[Int(right)]!.withKey { keyOrder(left, $0) < 0 } }
        }
        var added = unordered.filter { records[Int($0)] != nil }
        added.sort(by: precedes)
        var merged: [UInt32] = []
        merged.reserveCapacity(ordered.count + added.count)
        var i = 0, j = 0
        while i < ordered.count || j < added.count {
            if i < ordered.count && records[Int(ordered[i])] == nil {
                i += 1  // removed
            } else if j >= added.count || (i < ordered.count && precedes(ordered[i], added[j])) {
                merged.append(ordered[i])
                i += 1
            } else {
                merged.append(added[j])
                j += 1
            }
        }
        ordered = merged
        unordered.removeAll(keepingCapacity: true)
        freeIDs.append(contentsOf: removedIDs)
        removedIDs.removeAll(keepingCapacity: true)
    }

    /// Calls `body` with each record whose key starts with `prefix` and comes after
    /// `startAfter`, in order, tombstones included, until it returns `false`.
    private mutating func scan(prefix: String, after startAfter: String, _ body: (EntryRecord) -> Bool) {
        mergeOrder()
        withUTF8Bytes(prefix) { prefix in
            withUTF8Bytes(startAfter) { startAfter in
                let lower = keyOrder(prefix, startAfter) >= 0 ? prefix : startAfter
                var position = lowerBound(lower)
                while position < ordered.count {
                    let record = records[Int(ordered[position])]!
                    position += 1
                    guard record.keyHasPrefix(prefix) else { break }
                    if record.hasKey(startAfter) { continue }
                    if !body(record) { return }
                }
            }
        }
    }

    /// The first position in `ordered` whose key is not below `key` (after ``mergeOrder()``,
    /// which leaves no removed records in `ordered`).
    private func lowerBound(_ key: UnsafeRawBufferPointer) -> Int {
        var low = 0, high = ordered.count
        while low < high {
            let mid = (low + high) / 2
            if records[Int(ordered[mid])]!.withKey({ keyOrder($0, key) < 0 }) { low = mid + 1 } else { high = mid }
        }
        return low
    }

    /// Calls `body` for each key under `prefix` after `startAfter`, in order, tombstones
    /// included, until it returns `false`.
    mutating func forEach(prefix: String, after startAfter: String = "", _ body: (String, Entry) -> Bool) {
        scan(prefix: prefix, after: startAfter) { body($0.key, Entry($0)) }
    }

    /// Calls `body` for each live key that expires or is bound to a session, in no order.
    func forEachExpiringOrBound(_ body: (String, Entry) -> Void) {
        for case let record? in records where !record.fields.isDeleted {
            if record.fields.expiresAtMilliseconds > 0 || record.fields.sessionCount > 0 { body(record.key, Entry(record)) }
        }
    }

    /// Keys under `prefix`, tombstones included.
    mutating func keyCount(prefix: String) -> Int {
        if prefix.isEmpty { return count }
        var count = 0
        scan(prefix: prefix, after: "") { _ in
            count += 1
            return true
        }
        return count
    }

    /// The last revision that changed a key under `prefix`, tombstones included (0 if none).
    mutating func lastRevision(prefix: String) -> UInt64 {
        if prefix.isEmpty { return headRevision }
        var last: UInt64 = 0
        scan(prefix: prefix, after: "") { record in
            last = max(last, record.fields.modRevision)
            return true
        }
        return last
    }
}

/// An open-addressed hash index (linear probing) from a key's bytes to its record number.
struct KeyIndex {
    /// 0 for an empty slot, otherwise a record number plus one.
    private var slots: [UInt32] = []
    private(set) var count = 0

    /// The hash of a key's bytes (seeded per process, so clients cannot choose colliding keys).
    @inline(__always)
    static func hash(_ key: UnsafeRawBufferPointer) -> UInt32 {
        var hasher = Hasher()
        hasher.combine(bytes: key)
        return UInt32(truncatingIfNeeded: hasher.finalize())
    }

    /// The record number of `key`, if indexed.
    func find(_ key: UnsafeRawBufferPointer, hash: UInt32, in records: [EntryRecord?]) -> UInt32? {
        guard !slots.isEmpty else { return nil }
        let mask = slots.count - 1
        var slot = Int(hash) & mask
        while true {
            let stored = slots[slot]
            if stored == 0 { return nil }
            let record = records[Int(stored - 1)]!
            if record.fields.keyHash == hash && record.hasKey(key) { return stored - 1 }
            slot = (slot + 1) & mask
        }
    }

    /// Indexes record `id` (already in `records`, not yet indexed) under `hash`; grows at three
    /// quarters full. Every other record in `records` must be indexed.
    mutating func insert(_ id: UInt32, hash: UInt32, in records: [EntryRecord?]) {
        if (count + 1) * 4 > slots.count * 3 {
            grow(records)  // places `id` too
        } else {
            place(id, hash: hash)
        }
        count += 1
    }

    private mutating func place(_ id: UInt32, hash: UInt32) {
        let mask = slots.count - 1
        var slot = Int(hash) & mask
        while slots[slot] != 0 { slot = (slot + 1) & mask }
        slots[slot] = id + 1
    }

    /// Doubles the table and places every record of `records` in it.
    private mutating func grow(_ records: [EntryRecord?]) {
        slots = [UInt32](repeating: 0, count: max(16, slots.count * 2))
        // In record order, which is mostly allocation order: the headers are read in sequence.
        for (id, record) in records.enumerated() {
            if let record { place(UInt32(id), hash: record.fields.keyHash) }
        }
    }

    /// Removes record `id`, indexed under `hash`, closing the gap so later probes still find
    /// their keys (backward-shift deletion).
    mutating func remove(_ id: UInt32, hash: UInt32, in records: [EntryRecord?]) {
        let mask = slots.count - 1
        var hole = Int(hash) & mask
        while slots[hole] != id + 1 { hole = (hole + 1) & mask }
        var next = hole
        while true {
            next = (next + 1) & mask
            let stored = slots[next]
            if stored == 0 { break }
            let home = Int(records[Int(stored - 1)]!.fields.keyHash) & mask
            // Move the entry back into the hole unless its home lies cyclically in (hole, next].
            let homeInRange = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next)
            if !homeInRange {
                slots[hole] = stored
                hole = next
            }
        }
        slots[hole] = 0
        count -= 1
    }
}

extension SignalStore.Entry {
    /// A copy of `record`'s state.
    fileprivate init(_ record: EntryRecord) {
        let header = record.fields
        self.init(value: record.value, version: header.version, createRevision: header.createRevision,
                  modRevision: header.modRevision, expiresAtMilliseconds: header.expiresAtMilliseconds,
                  isDeleted: header.isDeleted, session: record.session, modTimeMilliseconds: header.modTimeMilliseconds)
    }
}
