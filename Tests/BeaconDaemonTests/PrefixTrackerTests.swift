@testable import BeaconDaemon
import BeaconProtocol
import Testing
import BeaconTestSupport

@Suite("Prefix tracker: marks and leases", .offThePool, .timeLimit(.minutes(3)))
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

    @Test("A revision of one change gets the marks the general path gives: prefixes, previous revisions, parts")
    func oneChangeRevisionsMarkLikeTheGeneralPath() {
        var few = PrefixTracker(), many = PrefixTracker()
        for prefix in ["", "a", "app.", "app.x", "é", "b."] {
            few.subscribe(prefix) { 3 }
            many.subscribe(prefix) { 3 }
        }
        // Past the scan limit the general path looks prefixes up by length.
        for index in 0..<40 { _ = many.lease("z\(index).", until: 1_000, initial: { 0 }) }
        func withoutLeased(_ marks: [Beacon_V1_PrefixMark]) -> [Beacon_V1_PrefixMark] {
            marks.filter { !$0.prefix.hasPrefix("z") }.sorted { $0.prefix < $1.prefix }
        }
        let keys = ["app.x", "b.c", "apple", "app.y", "éa", "app.x", "c", "b.c"]
        for (offset, key) in keys.enumerated() {
            let revision = UInt64(offset + 4)
            let one = few.record(revision: revision, keys: [key])
            let general = many.record(revision: revision, keys: [key])
            #expect(one.perChange.count == 1 && general.perChange.count == 1)
            #expect(one.perChange[0].sorted { $0.prefix < $1.prefix } == withoutLeased(general.perChange[0]), "\(key)")
            #expect(one.touched == withoutLeased(general.touched), "\(key)")
            #expect(one.perChange[0].allSatisfy { $0.parts == 1 && $0.previousRevision < revision })
        }
        #expect(few.heads == many.heads.filter { !$0.prefix.hasPrefix("z") })
        #expect(few.heads.first { $0.prefix == "b." }?.revision == 11)
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
