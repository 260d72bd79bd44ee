@testable import BeaconDaemon
import Testing

@Suite("Prefix tracker: marks and leases")
struct PrefixTrackerTests {
    /// The prefixes marked for each change of one revision.
    static func marks(_ tracker: inout PrefixTracker, revision: UInt64, keys: [String]) -> [[String]] {
        tracker.record(revision: revision, keys: keys).perChange.map { $0.map(\.prefix).sorted() }
    }

    @Test("With many prefixes tracked, each key gets exactly the marks of the tracked prefixes it starts with")
    func manyTrackedPrefixesMarkLikeAFewDo() {
        var few = PrefixTracker(), many = PrefixTracker()
        let followed = ["", "a", "app.", "app.x", "é", "éa", "b."]
        for prefix in followed {
            few.subscribe(prefix) { 0 }
            many.subscribe(prefix) { 0 }
        }
        for index in 0..<500 { _ = many.lease("z\(index).", until: 1_000, initial: { 0 }) }
        let keys = ["app.x", "app.y", "apple", "éab", "èa", "b.c", "b", "z3.k", "zz"]
        let fewMarks = Self.marks(&few, revision: 1, keys: keys)
        let manyMarks = Self.marks(&many, revision: 1, keys: keys)
        #expect(fewMarks == [["", "a", "app.", "app.x"], ["", "a", "app."], ["", "a"], ["", "é", "éa"], [""], ["", "b."], [""], [""], [""]])
        #expect(manyMarks == fewMarks.enumerated().map { index, marks in keys[index] == "z3.k" ? marks + ["z3."] : marks })
        #expect(Self.marks(&many, revision: 2, keys: ["z3.k"]) == [["", "z3."]])
    }

    @Test("A holder over its lease limit gets the revision without a lease; leases run out and make room")
    func leasesPerHolder() {
        var tracker = PrefixTracker()
        for index in 0..<3 {
            #expect(tracker.lease("p\(index).", until: 100, holder: "uid:5001", limit: 3) { 7 } == (7, true))
        }
        #expect(tracker.lease("p9.", until: 100, holder: "uid:5001", limit: 3) { 7 } == (7, false))
        #expect(!tracker.isTracked("p9."))
        #expect(tracker.lease("p1.", until: 200, holder: "uid:5001", limit: 3) { 7 } == (7, true), "a lease held is renewed")
        #expect(tracker.lease("p9.", until: 100, holder: "uid:5002", limit: 3) { 7 } == (7, true), "another holder has its own")
        tracker.expireLeases(nowMilliseconds: 150)
        #expect(tracker.leases(of: "uid:5001") == 1)
        #expect(tracker.lease("p8.", until: 300, holder: "uid:5001", limit: 3) { 7 }.leased)
        #expect(tracker.isTracked("p1.") && !tracker.isTracked("p0.") && !tracker.isTracked("p9."))
    }
}
