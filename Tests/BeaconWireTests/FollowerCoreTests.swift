import BeaconProtocol
import BeaconWire
import Testing
import BeaconTestSupport

/// The follower core fed publication and reply sequences by hand: drops, duplicates, stale
/// heartbeats, epoch changes, compaction. What it releases must be whole revisions in order, and
/// a snapshot only as part of a consistent cut.
@Suite(.offThePool, .timeLimit(.minutes(3))) struct FollowerCoreTests {
    // MARK: Builders

    /// A put of `key` = `value` at `revision`, part `part` of `parts`.
    static func event(_ key: String, _ value: Int64, revision: UInt64, part: UInt32 = 0, parts: UInt32 = 1) -> Beacon_V1_Event {
        .with {
            $0.revision = revision
            $0.part = part
            $0.parts = parts
            $0.change = .with { $0.key = key; $0.value = .with { $0.intValue = value }; $0.version = 1; $0.createRevision = revision }
        }
    }

    static func diff(_ event: Beacon_V1_Event, epoch: UInt64 = 1, marks: [(String, UInt64, UInt32)]) -> Beacon_V1_Diff {
        .with {
            $0.epoch = epoch
            $0.event = event
            $0.marks = marks.map { mark in .with { $0.prefix = mark.0; $0.previousRevision = mark.1; $0.parts = mark.2 } }
        }
    }

    static func marker(revision: UInt64, parts: UInt32, epoch: UInt64 = 1, marks: [(String, UInt64, UInt32)]) -> Beacon_V1_CommitMarker {
        .with {
            $0.epoch = epoch
            $0.revision = revision
            $0.parts = parts
            $0.marks = marks.map { mark in .with { $0.prefix = mark.0; $0.previousRevision = mark.1; $0.parts = mark.2 } }
        }
    }

    static func heartbeat(head: UInt64, epoch: UInt64 = 1, prefixes: [(String, UInt64)]) -> Beacon_V1_Heartbeat {
        .with {
            $0.epoch = epoch
            $0.headRevision = head
            $0.intervalMs = 1000
            $0.prefixes = prefixes.map { head in .with { $0.prefix = head.0; $0.revision = head.1 } }
        }
    }

    static func snapshot(_ kvs: [(String, Int64)], revision: UInt64, epoch: UInt64 = 1) -> Beacon_V1_Reply {
        .with {
            $0.result = .snapshot(.with {
                $0.epoch = epoch
                $0.revision = revision
                $0.kvs = kvs.map { kv in .with { $0.key = kv.0; $0.value = .with { $0.intValue = kv.1 }; $0.modRevision = revision } }
            })
        }
    }

    static func page(_ events: [Beacon_V1_Event], through revision: UInt64, epoch: UInt64 = 1, more: Bool = false) -> Beacon_V1_Reply {
        .with { $0.result = .events(.with { $0.epoch = epoch; $0.revision = revision; $0.events = events; $0.more = more }) }
    }

    static func refusal(_ code: Beacon_V1_Error.Code) -> Beacon_V1_Reply {
        .with { $0.result = .error(.with { $0.code = code; $0.message = "\(code)" }) }
    }

    /// What a release holds, flattened: "rev key=value" for changes, "snap prefix@rev" for snapshots.
    static func describe(_ release: FollowerCore.Release?) -> [String] {
        guard let release else { return [] }
        return release.steps.flatMap { step -> [String] in
            switch step {
            case .revisions(_, let events): return events.map { "\($0.revision) \($0.change.key)=\($0.change.value.intValue)" }
            case .snapshot(let prefix, _, let revision, _): return ["snap \(prefix)@\(revision)"]
            case .resumed(let prefix): return ["resumed \(prefix)"]
            }
        }
    }

    /// Two one-key mirrors, `a.x` and `a.y`, synced at revision 10.
    static func twoMirrors() -> FollowerCore {
        var core = FollowerCore(mode: .mirror)
        core.follow("a.x")
        core.follow("a.y")
        for _ in 0..<2 {
            let fetch = core.nextFetch()!
            #expect(fetch.kind == .snapshot)
            core.complete(fetch, with: snapshot([(fetch.prefix, 0)], revision: 10))
        }
        #expect(core.nextFetch() == nil)
        #expect(describe(core.takeRelease()).sorted() == ["snap a.x@10", "snap a.y@10"])
        return core
    }

    /// Transaction `revision` writing `value` to both keys: its two diffs and its commit marker.
    static func transaction(_ revision: UInt64, _ value: Int64, previous: UInt64) -> (Beacon_V1_Diff, Beacon_V1_Diff, Beacon_V1_CommitMarker) {
        (diff(event("a.x", value, revision: revision, part: 0, parts: 2), marks: [("a.x", previous, 1)]),
         diff(event("a.y", value, revision: revision, part: 1, parts: 2), marks: [("a.y", previous, 1)]),
         marker(revision: revision, parts: 2, marks: [("a.x", previous, 1), ("a.y", previous, 1)]))
    }

    // MARK: Live

    @Test func aTransactionAcrossTwoMirrorsLeavesWhole() {
        var core = Self.twoMirrors()
        let (x, y, commit) = Self.transaction(11, 1, previous: 10)
        core.receive(x)
        #expect(core.takeRelease() == nil, "half of revision 11 left")
        core.receive(y)
        // Both mirrors are complete through 11: it need not wait for its commit marker.
        #expect(Self.describe(core.takeRelease()) == ["11 a.x=1", "11 a.y=1"])
        core.receive(commit)
        #expect(core.takeRelease() == nil)
        #expect(core.nextFetch() == nil)
    }

    @Test func aDuplicateDiffIsReleasedOnce() {
        var core = Self.twoMirrors()
        let single = Self.diff(Self.event("a.x", 5, revision: 11), marks: [("a.x", 10, 1)])
        core.receive(single)
        #expect(Self.describe(core.takeRelease()) == ["11 a.x=5"])
        core.receive(single)
        #expect(core.takeRelease() == nil)
        #expect(core.nextFetch() == nil)
    }

    // MARK: Drops

    /// The reported defect: one mirror's repair answered with a snapshot at the head must not
    /// leave ahead of the other mirror's older revisions.
    @Test func aRepairSnapshotLeavesOnlyWithEveryMirrorAtItsRevision() {
        var core = Self.twoMirrors()
        // Revision 11: a.x's diff is dropped, a.y's arrives, the marker arrives.
        let (_, y11, commit11) = Self.transaction(11, 1, previous: 10)
        core.receive(y11)
        core.receive(commit11)
        #expect(core.takeRelease() == nil, "a.y's half of revision 11 left")
        let repair = core.nextFetch()
        #expect(repair == FollowerCore.Fetch(prefix: "a.x", kind: .delta(since: 10, snapshotIfSmaller: true)))
        // The daemon, by now at revision 13, answers with a.x's state.
        core.complete(repair!, with: Self.snapshot([("a.x", 3)], revision: 13))
        #expect(core.takeRelease() == nil, "a.x@13 left while a.y is at 11")
        // a.y is behind the snapshot: one delta catches it up.
        let catchUp = core.nextFetch()
        #expect(catchUp == FollowerCore.Fetch(prefix: "a.y", kind: .delta(since: 11, snapshotIfSmaller: false)))
        core.complete(catchUp!, with: Self.page([Self.event("a.y", 2, revision: 12, part: 1, parts: 2),
                                                  Self.event("a.y", 3, revision: 13, part: 1, parts: 2)], through: 13))
        #expect(Self.describe(core.takeRelease()) == ["11 a.y=1", "12 a.y=2", "13 a.y=3", "snap a.x@13"])
        #expect(core.nextFetch() == nil)
        // The live diffs of 12 and 13 arrive late: already applied.
        for revision: UInt64 in [12, 13] {
            let (x, y, commit) = Self.transaction(revision, Int64(revision - 10), previous: revision - 1)
            core.receive(x); core.receive(y); core.receive(commit)
        }
        #expect(core.takeRelease() == nil)
        #expect(core.nextFetch() == nil)
        #expect(core.statistics.repairs == 1)
    }

    @Test func aRevisionWhoseMarkerWasLostIsRepairedWhenTheStreamMovesOn() {
        var core = Self.twoMirrors()
        let (x11, _, _) = Self.transaction(11, 1, previous: 10)
        core.receive(x11)  // a.y's diff and the marker of 11 are dropped
        #expect(core.takeRelease() == nil)
        core.receive(Self.diff(Self.event("a.x", 2, revision: 12), marks: [("a.x", 11, 1)]))
        // Both mirrors repair; each delta answers what it has.
        var fetched: [String] = []
        while let fetch = core.nextFetch() {
            fetched.append(fetch.prefix)
            let events = fetch.prefix == "a.x"
                ? [Self.event("a.x", 1, revision: 11, part: 0, parts: 2), Self.event("a.x", 2, revision: 12)]
                : [Self.event("a.y", 1, revision: 11, part: 1, parts: 2)]
            core.complete(fetch, with: Self.page(events, through: 12))
        }
        #expect(fetched.sorted() == ["a.x", "a.y"])
        #expect(Self.describe(core.takeRelease()) == ["11 a.x=1", "11 a.y=1", "12 a.x=2"])
    }

    @Test func aCommitMarkerAheadOfAnIncompleteRevisionRepairs() {
        var core = FollowerCore(mode: .mirror)
        core.follow("a.")
        core.complete(core.nextFetch()!, with: Self.snapshot([], revision: 10))
        _ = core.takeRelease()
        // Revision 11 has two parts under a.; the second is dropped; the marker of 12 arrives.
        core.receive(Self.diff(Self.event("a.x", 1, revision: 11, part: 0, parts: 2), marks: [("a.", 10, 2)]))
        core.receive(Self.marker(revision: 12, parts: 2, marks: [("a.", 11, 2)]))
        #expect(core.takeRelease() == nil)
        #expect(core.nextFetch() == FollowerCore.Fetch(prefix: "a.", kind: .delta(since: 10, snapshotIfSmaller: true)))
    }

    @Test func aSingleChangeOfALiveMirrorLeavesWhileAnotherRepairs() {
        var core = Self.twoMirrors()
        // a.y misses revision 11 (its heartbeat says so), a.x goes on.
        core.receive(Self.heartbeat(head: 11, prefixes: [("a.x", 10), ("a.y", 11)]))
        #expect(core.nextFetch()?.prefix == "a.y")
        core.receive(Self.diff(Self.event("a.x", 7, revision: 12), marks: [("a.x", 10, 1)]))
        #expect(Self.describe(core.takeRelease()) == ["12 a.x=7"])
        // The repair of 11 then arrives as a late fill.
        core.complete(core.nextFetch()!, with: Self.page([Self.event("a.y", 4, revision: 11)], through: 12))
        #expect(Self.describe(core.takeRelease()) == ["11 a.y=4"])
        #expect(core.settled == 12)
    }

    // MARK: Heartbeats

    @Test func aStaleHeartbeatNeverMovesTheBookmarkBack() {
        var core = Self.twoMirrors()
        core.receive(Self.heartbeat(head: 20, prefixes: [("a.x", 10), ("a.y", 10)]))
        #expect(core.through("a.x") == 20)
        // A heartbeat queued earlier arrives later.
        core.receive(Self.heartbeat(head: 15, prefixes: [("a.x", 10), ("a.y", 10)]))
        #expect(core.through("a.x") == 20)
        core.receive(Self.diff(Self.event("a.x", 1, revision: 21), marks: [("a.x", 10, 1)]))
        #expect(Self.describe(core.takeRelease()) == ["21 a.x=1"])
        #expect(core.nextFetch() == nil, "a literal T = head_revision would re-apply from 15")
    }

    // MARK: Epochs and compaction

    @Test func aNewEpochResyncsEveryMirrorAndReleasesThemTogether() {
        var core = Self.twoMirrors()
        core.receive(Self.heartbeat(head: 3, epoch: 2, prefixes: [("a.x", 2), ("a.y", 3)]))
        let first = core.nextFetch()!
        #expect(first.kind == .snapshot)
        core.complete(first, with: Self.snapshot([(first.prefix, 9)], revision: 3, epoch: 2))
        #expect(core.takeRelease() == nil, "one mirror of the new journal left beside the old")
        let second = core.nextFetch()!
        #expect(second.kind == .snapshot && second.prefix != first.prefix)
        core.complete(second, with: Self.snapshot([(second.prefix, 9)], revision: 3, epoch: 2))
        #expect(Self.describe(core.takeRelease()).sorted() == ["snap a.x@3", "snap a.y@3"])
        #expect(core.epoch == 2)
        #expect(core.statistics.resyncs == 2)
    }

    /// A journal replaced at revision 0: the first mirror's snapshot must not leave alone (its
    /// revision, 0, is one every other mirror is trivially "complete through").
    @Test func aNewJournalAtRevisionZeroStillWaitsForEveryMirror() {
        var core = Self.twoMirrors()
        core.receive(Self.heartbeat(head: 0, epoch: 2, prefixes: []))
        let first = core.nextFetch()!
        core.complete(first, with: Self.snapshot([], revision: 0, epoch: 2))
        #expect(core.takeRelease() == nil, "one mirror of the new journal left beside the old")
        let second = core.nextFetch()!
        core.complete(second, with: Self.snapshot([], revision: 0, epoch: 2))
        #expect(Self.describe(core.takeRelease()).sorted() == ["snap a.x@0", "snap a.y@0"])
    }

    @Test func aCompactedStreamResyncsInOrder() {
        var core = FollowerCore(mode: .stream)
        core.follow("a.", resumingAfter: 0)
        let start = core.nextFetch()!
        #expect(start == FollowerCore.Fetch(prefix: "a.", kind: .delta(since: 0, snapshotIfSmaller: false)))
        core.complete(start, with: Self.refusal(.compacted))
        let resync = core.nextFetch()!
        #expect(resync.kind == .snapshot)
        core.complete(resync, with: Self.snapshot([("a.x", 5)], revision: 40))
        core.receive(Self.diff(Self.event("a.x", 6, revision: 41), marks: [("a.", 40, 1)]))
        #expect(Self.describe(core.takeRelease()) == ["snap a.@40", "41 a.x=6"])
    }

    @Test func aResumedMirrorCatchesUpByDeltaAndIsConfirmed() {
        var core = FollowerCore(mode: .mirror, epoch: 1)
        core.follow("a.", resumingAfter: 10, epoch: 1)
        let resume = core.nextFetch()!
        #expect(resume == FollowerCore.Fetch(prefix: "a.", kind: .delta(since: 10, snapshotIfSmaller: true)))
        core.complete(resume, with: Self.page([Self.event("a.x", 1, revision: 11)], through: 12, more: true))
        let next = core.nextFetch()!
        #expect(next == FollowerCore.Fetch(prefix: "a.", kind: .delta(since: 12, snapshotIfSmaller: true)))
        core.complete(next, with: Self.page([Self.event("a.y", 2, revision: 13)], through: 13))
        #expect(Self.describe(core.takeRelease()) == ["11 a.x=1", "13 a.y=2", "resumed a."])
        #expect(core.bookmarks() == ["a.": 13])
        #expect(core.statistics.resumes == 1)
    }

    @Test func aResumeFromAnotherEpochBecomesASnapshot() {
        var core = FollowerCore(mode: .mirror, epoch: 1)
        core.follow("a.", resumingAfter: 10, epoch: 1)
        core.complete(core.nextFetch()!, with: Self.page([], through: 4, epoch: 2))
        let resync = core.nextFetch()!
        #expect(resync.kind == .snapshot)
        core.complete(resync, with: Self.snapshot([("a.x", 1)], revision: 4, epoch: 2))
        #expect(Self.describe(core.takeRelease()) == ["snap a.@4"])
        #expect(core.epoch == 2)
    }

    @Test func aRefusedPrefixIsLeftAloneUntilAskedAgain() {
        var core = FollowerCore(mode: .mirror)
        core.follow("secret.")
        core.complete(core.nextFetch()!, with: Self.refusal(.permissionDenied))
        #expect(core.nextFetch() == nil)
        #expect(!core.hasDueFetch)
        core.retryRefused()
        #expect(core.nextFetch()?.kind == .snapshot)
    }

    /// A history stream's page leaves as it came: whole revisions (one of two changes here), in
    /// order, counted once each.
    @Test func aStreamsPageLeavesWholeAndInOrder() {
        var core = FollowerCore(mode: .stream)
        core.follow("a.", resumingAfter: 10, epoch: 1)
        let fetch = core.nextFetch()!
        core.complete(fetch, with: Self.page([Self.event("a.x", 1, revision: 11, part: 0, parts: 2),
                                              Self.event("a.y", 2, revision: 11, part: 1, parts: 2),
                                              Self.event("a.z", 3, revision: 12)], through: 12, epoch: 1, more: true))
        #expect(Self.describe(core.takeRelease()) == ["11 a.x=1", "11 a.y=2", "12 a.z=3"])
        #expect(core.statistics.revisions == 2)
        let next = core.nextFetch()!
        #expect(next.kind == .delta(since: 12, snapshotIfSmaller: false))
        core.complete(next, with: Self.page([Self.event("a.x", 4, revision: 14)], through: 14, epoch: 1))
        #expect(Self.describe(core.takeRelease()) == ["14 a.x=4", "resumed a."])
        // The live diffs of what the pages brought are not released again.
        core.receive(Self.diff(Self.event("a.z", 3, revision: 12), epoch: 1, marks: [("a.", 11, 1)]))
        #expect(core.takeRelease() == nil)
    }

    // MARK: Ordered (a relay's)

    /// Two prefixes followed in order, `a.` and `b.`, synced at revision 10.
    static func orderedPair() -> FollowerCore {
        var core = FollowerCore(mode: .ordered)
        core.follow("a.")
        core.follow("b.")
        let first = core.nextFetch()!
        core.complete(first, with: Self.snapshot([(first.prefix + "k", 1)], revision: 10))
        #expect(core.takeRelease() == nil, "one prefix's state left before the other had any")
        let second = core.nextFetch()!
        core.complete(second, with: Self.snapshot([(second.prefix + "k", 1)], revision: 10))
        #expect(Self.describe(core.takeRelease()).sorted() == ["snap a.@10", "snap b.@10"])
        #expect(core.nextFetch() == nil)
        return core
    }

    /// A revision of one prefix waits until the other is known to be complete through it: the
    /// other's change at an earlier revision may have been dropped, and a relay cannot apply it
    /// late.
    @Test func orderedReleasesNothingAheadOfAnUnconfirmedPrefix() {
        var core = Self.orderedPair()
        // a.k@11 is dropped; b.k@12 arrives.
        core.receive(Self.diff(Self.event("b.k", 12, revision: 12), marks: [("b.", 10, 1)]))
        #expect(core.takeRelease() == nil, "b.k@12 left before a. confirmed 11")
        // a. is caught up with a delta rather than waiting for its next diff or a heartbeat.
        let catchUp = core.nextFetch()
        #expect(catchUp == FollowerCore.Fetch(prefix: "a.", kind: .delta(since: 10, snapshotIfSmaller: false)))
        core.complete(catchUp!, with: Self.page([Self.event("a.k", 11, revision: 11)], through: 12))
        #expect(Self.describe(core.takeRelease()) == ["11 a.k=11", "12 b.k=12"])
        // a.'s live diff of 11 arrives late: already released.
        core.receive(Self.diff(Self.event("a.k", 11, revision: 11), marks: [("a.", 10, 1)]))
        #expect(core.takeRelease() == nil)
        #expect(core.nextFetch() == nil)
    }

    /// With traffic in every prefix, their own diffs confirm each other: no fetch.
    @Test func orderedReleasesInOrderWhenEveryPrefixConfirms() {
        var core = Self.orderedPair()
        core.receive(Self.diff(Self.event("a.k", 11, revision: 11), marks: [("a.", 10, 1)]))
        #expect(core.takeRelease() == nil, "b. has not confirmed 11")
        core.receive(Self.diff(Self.event("b.k", 12, revision: 12), marks: [("b.", 10, 1)]))
        #expect(Self.describe(core.takeRelease()) == ["11 a.k=11"])
        core.receive(Self.heartbeat(head: 12, prefixes: [("a.", 11), ("b.", 12)]))
        #expect(Self.describe(core.takeRelease()) == ["12 b.k=12"])
    }

    /// A transaction across both prefixes leaves as one revision with all of its parts.
    @Test func orderedReleasesATransactionAcrossPrefixesWhole() {
        var core = Self.orderedPair()
        let a = Self.event("a.k", 11, revision: 11, part: 0, parts: 2)
        let b = Self.event("b.k", 11, revision: 11, part: 1, parts: 2)
        core.receive(Self.diff(a, marks: [("a.", 10, 1)]))
        #expect(core.takeRelease() == nil)
        core.receive(Self.diff(b, marks: [("b.", 10, 1)]))
        core.receive(Self.marker(revision: 11, parts: 2, marks: [("a.", 10, 1), ("b.", 10, 1)]))
        let release = core.takeRelease()
        #expect(Self.describe(release) == ["11 a.k=11", "11 b.k=11"])
        #expect(release?.steps.count == 1)
    }
}
