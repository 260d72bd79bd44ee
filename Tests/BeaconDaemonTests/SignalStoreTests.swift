import BeaconJournal
import BeaconTestSupport
@testable import BeaconDaemon
import Testing

/// The store against a plain dictionary model: puts, deletes, undo of whole batches, tombstone
/// drops and prefix scans, in a seeded random order that exercises the hash index's growth and
/// backward-shift deletion and the reuse of record numbers.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct SignalStoreTests {
    /// What the store should hold for a key.
    struct Expected: Equatable {
        var value: [UInt8]
        var version: UInt64
        var modRevision: UInt64
        var isDeleted: Bool
    }

    static func change(_ key: String, revision: UInt64, value: [UInt8]?, version: UInt64) -> JournalChange {
        JournalChange(revision: revision, kind: value == nil ? .delete : .put, key: key, value: value ?? [],
                      version: value == nil ? 0 : version, createRevision: value == nil ? 0 : revision,
                      timestampMilliseconds: 0)
    }

    static func check(_ store: inout SignalStore, against model: [String: Expected], prefixes: [String]) {
        #expect(store.count == model.count)
        #expect(store.liveCount == model.values.count { !$0.isDeleted })
        for (key, expected) in model {
            let live = store.live(key)
            #expect(live.map { Expected(value: $0.value, version: $0.version, modRevision: $0.modRevision, isDeleted: false) }
                    == (expected.isDeleted ? nil : expected), "key \(key)")
            #expect(store.liveVersions(key)?.version == (expected.isDeleted ? nil : expected.version))
        }
        for prefix in prefixes {
            var scanned: [String] = []
            store.forEach(prefix: prefix) { key, entry in
                scanned.append(key)
                #expect(model[key] == Expected(value: entry.value, version: entry.version, modRevision: entry.modRevision,
                                               isDeleted: entry.isDeleted))
                return true
            }
            #expect(scanned == model.keys.filter { $0.hasPrefix(prefix) }.sorted(), "prefix '\(prefix)'")
            #expect(store.keyCount(prefix: prefix) == scanned.count)
        }
    }

    @Test func randomWritesUndoesAndCompactionsMatchAModel() {
        var random = SplitMix64(seed: 42)
        var store = SignalStore()
        var model: [String: Expected] = [:]
        let keys = (0..<600).map { "k.\($0 % 7).\($0)" }
        let prefixes = ["", "k.", "k.3.", "k.3.3", "k.6.594", "none."]
        var revision: UInt64 = 0
        for round in 0..<400 {
            revision += 1
            var changes: [JournalChange] = []
            var next = model
            for part in 0..<(1 + random.next(8)) {
                let key = keys[random.next(keys.count)]
                guard !changes.contains(where: { $0.key == key }) else { continue }
                let current = next[key]
                if current.map({ !$0.isDeleted }) == true && random.next(3) == 0 {
                    changes.append(Self.change(key, revision: revision, value: nil, version: 0))
                    next[key] = Expected(value: [], version: 0, modRevision: revision, isDeleted: true)
                } else {
                    let version = (current.map { $0.isDeleted ? 0 : $0.version } ?? 0) + 1
                    let value = [UInt8](repeating: UInt8(truncatingIfNeeded: round), count: 1 + random.next(100) + part)
                    changes.append(Self.change(key, revision: revision, value: value, version: version))
                    next[key] = Expected(value: value, version: version, modRevision: revision, isDeleted: false)
                }
            }
            let undo = store.apply(changes)
            #expect(store.headRevision == revision)
            if random.next(5) == 0 {
                store.undo(undo)
                revision -= 1
                #expect(store.headRevision == revision)
            } else {
                model = next
            }
            if random.next(40) == 0 {
                store.dropTombstones(through: revision)
                model = model.filter { !$0.value.isDeleted }
            }
            if round % 50 == 0 { Self.check(&store, against: model, prefixes: prefixes) }
        }
        Self.check(&store, against: model, prefixes: prefixes)
    }

    @Test func anUndoneBatchOfNewKeysLeavesNothingBehind() {
        var store = SignalStore()
        store.apply([Self.change("a", revision: 1, value: [1], version: 1)])
        let undo = store.apply((0..<100).map { Self.change("b.\($0)", revision: 2, value: [2], version: 1) })
        #expect(store.count == 101)
        store.undo(undo)
        #expect(store.count == 1 && store.headRevision == 1 && store.live("b.5") == nil)
        var scanned: [String] = []
        store.forEach(prefix: "") { key, _ in scanned.append(key); return true }
        #expect(scanned == ["a"])
        // The freed record numbers are reused without disturbing the order.
        store.apply([Self.change("0", revision: 2, value: [3], version: 1), Self.change("b", revision: 2, value: [4], version: 1)])
        scanned = []
        store.forEach(prefix: "", after: "0") { key, _ in scanned.append(key); return true }
        #expect(scanned == ["a", "b"])
    }

    @Test func loadingKeepsTheJournalsStateAndOrder() {
        var store = SignalStore()
        for (index, key) in ["a", "b.1", "b.2", "c"].enumerated() {
            store.load(JournalEntry(key: key, value: [UInt8(index)], version: 1, createRevision: UInt64(index + 1),
                                    modRevision: UInt64(index + 1), expiresAtMilliseconds: key == "c" ? 99 : 0,
                                    isDeleted: key == "b.2", session: key == "a" ? [7] : []))
        }
        store.load(JournalEntry(key: "0", value: [9], version: 1, createRevision: 5, modRevision: 5,
                                expiresAtMilliseconds: 0, isDeleted: false, session: []))  // out of order
        store.loaded(headRevision: 5)
        #expect(store.liveCount == 4 && store.tombstoneCount == 1 && store.headRevision == 5)
        var scanned: [String] = []
        store.forEach(prefix: "") { key, _ in scanned.append(key); return true }
        #expect(scanned == ["0", "a", "b.1", "b.2", "c"])
        var special: [String] = []
        store.forEachExpiringOrBound { key, _ in special.append(key) }
        #expect(special.sorted() == ["a", "c"])
        #expect(store.live("a")?.session == [7] && store.live("b.2") == nil && store.lastRevision(prefix: "b.") == 3)
    }
}
