import BeaconJournal
import Testing
import BeaconTestSupport

/// A history of puts, deletes and two-key transactions over a few keys, with what a journal
/// holding it must answer before and after compaction.
private struct History {
    var changes: [JournalChange] = []
    var head: UInt64 = 0
    private var versions: [String: UInt64] = [:]
    private var random: UInt64 = 0x9E37_79B9_7F4A_7C15

    private mutating func next(_ bound: Int) -> Int {
        random = random &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Int((random >> 33) % UInt64(bound))
    }

    /// Appends `count` revisions: mostly single puts, some deletes, some two-key transactions.
    mutating func extend(by count: Int) -> [[JournalChange]] {
        var revisions: [[JournalChange]] = []
        for _ in 0..<count {
            head += 1
            let roll = next(10)
            var keys = ["k\(next(7))"]
            if roll == 0 {
                let other = "k\(next(7))"
                if other != keys[0] { keys.append(other) }
            }
            var revision: [JournalChange] = []
            for (part, key) in keys.enumerated() {
                let parts = UInt32(keys.count)
                if roll == 9, let version = versions[key], version > 0 {
                    versions[key] = 0
                    revision.append(JournalChange(revision: head, part: UInt32(part), parts: parts, kind: .delete, key: key,
                                                  version: 0, createRevision: 0, timestampMilliseconds: 1000))
                } else {
                    let version = (versions[key] ?? 0) + 1
                    versions[key] = version
                    revision.append(put(head, key, "\(head)", version: version, part: UInt32(part), parts: parts))
                }
            }
            changes += revision
            revisions.append(revision)
        }
        return revisions
    }

    /// The live keys at `revision` as "key@version".
    func snapshot(at revision: UInt64) -> [String] {
        var latest: [String: JournalChange] = [:]
        for change in changes where change.revision <= revision { latest[change.key] = change }
        return latest.values.filter { $0.kind == .put }.map { "\($0.key)@\($0.version)" }.sorted()
    }

    /// What the log holds once compacted through `revision`: the latest change of each key at or
    /// below it if that is a put, then everything after it, as "revision.part".
    func retained(compactedThrough revision: UInt64) -> [String] {
        var latest: [String: JournalChange] = [:]
        for change in changes where change.revision <= revision { latest[change.key] = change }
        let kept = changes.filter { change in
            change.revision > revision
                || (change.kind == .put && latest[change.key]?.revision == change.revision && latest[change.key]?.part == change.part)
        }
        return kept.map { "\($0.revision).\($0.part)" }
    }
}

private func snapshot(_ journal: Journal, at revision: UInt64) throws -> [String] {
    try journal.snapshot(prefix: "", at: revision).map { "\($0.key)@\($0.version)" }
}

private func log(_ journal: Journal) throws -> [String] {
    try journal.changes(prefix: "", from: 0, to: journal.headRevision, limit: 100_000).changes.map { "\($0.revision).\($0.part)" }
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct CompactionStepsTests {
    @Test func everyStepLeavesSnapshotsAndNewerHistoryIntactAndTheEndMatchesOneShotCompaction() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        var history = History()
        for revision in history.extend(by: 200) { try journal.append(revision) }
        let newer = try journal.changes(prefix: "", from: 151, to: 200, limit: 100_000).changes

        #expect(try journal.beginCompaction(through: 150))
        #expect(journal.compactedRevision == 150)
        #expect(journal.isCompacting)
        var steps = 0
        var appended = 0
        while let progress = try journal.continueCompaction(rows: 3) {
            steps += 1
            #expect(try snapshot(journal, at: 150) == history.snapshot(at: 150), "step \(steps)")
            #expect(try snapshot(journal, at: 180) == history.snapshot(at: 180), "step \(steps)")
            #expect(try journal.changes(prefix: "", from: 151, to: 200, limit: 100_000).changes == newer, "step \(steps)")
            if steps % 20 == 0 {
                // Writes go on between steps; they lie above the target and stay untouched.
                for revision in history.extend(by: 3) { try journal.append(revision) }
                appended += 3
            }
            if progress.isFinished {
                #expect(progress.target == 150)
                let keptAtOrBelow = history.retained(compactedThrough: 150).count { Int($0.split(separator: ".")[0])! <= 150 }
                #expect(progress.removed == history.changes.count { $0.revision <= 150 } - keptAtOrBelow)
                break
            }
        }
        #expect(steps > 100)  // both phases, a few rows at a time
        #expect(appended > 0)
        #expect(!journal.isCompacting)
        #expect(try journal.continueCompaction(rows: 3) == nil)
        #expect(try log(journal) == history.retained(compactedThrough: 150))
        #expect(try snapshot(journal, at: journal.headRevision) == history.snapshot(at: journal.headRevision))
        // A later compaction also removes what the first one kept and a later write superseded.
        let removed = try journal.compact(through: journal.headRevision - 10)
        #expect(removed > 0)
        #expect(try log(journal) == history.retained(compactedThrough: journal.headRevision - 10))
    }

    @Test func aCompactionCutShortByClosingResumesAtTheNextOpen() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        var history = History()
        var journal: Journal? = try Journal(path: path)
        for revision in history.extend(by: 120) { try journal!.append(revision) }
        try journal!.beginCompaction(through: 100)
        // Through the collection and into the pruning, then stop.
        var progress = try #require(try journal!.continueCompaction(rows: 4))
        while progress.removed == 0 { progress = try #require(try journal!.continueCompaction(rows: 4)) }
        #expect(!progress.isFinished)
        #expect(journal!.isCompacting)
        journal!.close()
        journal = nil

        let reopened = try Journal(path: path)
        #expect(reopened.compactedRevision == 100)
        #expect(reopened.isCompacting)
        #expect(try snapshot(reopened, at: 100) == history.snapshot(at: 100))
        var last: CompactionProgress?
        while let progress = try reopened.continueCompaction(rows: 4) { last = progress }
        #expect(last?.isFinished == true)
        #expect(try log(reopened) == history.retained(compactedThrough: 100))
        reopened.close()
        #expect(try Journal(path: path).isCompacting == false)
    }

    @Test func aHigherTargetReplacesTheCompactionUnderWay() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        var history = History()
        for revision in history.extend(by: 100) { try journal.append(revision) }
        try journal.beginCompaction(through: 40)
        for _ in 0..<15 { try journal.continueCompaction(rows: 5) }
        #expect(try journal.beginCompaction(through: 30) == false)  // below what is announced
        #expect(try journal.beginCompaction(through: 80))
        #expect(journal.compactedRevision == 80)
        while let progress = try journal.continueCompaction(rows: 5), !progress.isFinished {}
        #expect(try log(journal) == history.retained(compactedThrough: 80))
        #expect(try snapshot(journal, at: 80) == history.snapshot(at: 80))
    }
}
