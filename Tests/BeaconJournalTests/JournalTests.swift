import BeaconJournal
import BeaconTestSupport
import Foundation
import Testing

/// A new directory under /tmp for one test's files.
func temporaryDirectory() throws -> String {
    try makeTestDirectory("bjrn")
}

func put(_ revision: UInt64, _ key: String, _ value: String, version: UInt64, created: UInt64? = nil,
         part: UInt32 = 0, parts: UInt32 = 1, at time: UInt64 = 1000) -> JournalChange {
    JournalChange(revision: revision, part: part, parts: parts, kind: .put, key: key, value: Array(value.utf8),
                  version: version, createRevision: created ?? revision, timestampMilliseconds: time)
}

func delete(_ revision: UInt64, _ key: String) -> JournalChange {
    JournalChange(revision: revision, kind: .delete, key: key, version: 0, createRevision: 0, timestampMilliseconds: 1000)
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct JournalTests {
    @Test func stateHeadAndEpochSurviveReopening() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        var journal: Journal? = try Journal(path: path)
        let epoch = journal!.epoch
        #expect(epoch != 0)
        try journal!.append([put(1, "a.x", "1", version: 1)])
        try journal!.append([put(2, "a.x", "2", version: 2, created: 1, at: 2000), put(2, "b", "3", version: 1, part: 1, parts: 2, at: 2000)])
        try journal!.append([delete(3, "b")])
        journal!.close()
        journal = nil
        let reopened = try Journal(path: path)
        #expect(reopened.epoch == epoch)
        #expect(reopened.headRevision == 3)
        let state = try reopened.loadState()
        #expect(state.map(\.key) == ["a.x", "b"])
        #expect(state[0] == JournalEntry(key: "a.x", value: Array("2".utf8), version: 2, createRevision: 1, modRevision: 2,
                                         expiresAtMilliseconds: 0, isDeleted: false, modTimeMilliseconds: 2000))
        #expect(state[1].isDeleted && state[1].modRevision == 3)
    }

    @Test func aSecondOpenerIsToldTheJournalIsLocked() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        let first = try Journal(path: path)
        let error = try #require(throws: JournalError.self) { try Journal(path: path) }
        #expect(error.code == .locked)
        first.close()
        _ = try Journal(path: path)
    }

    @Test func aFileThatIsNotAJournalIsRefused() throws {
        let dir = try temporaryDirectory()
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: dir + "/garbage.sqlite"))
        let error = try #require(throws: JournalError.self) { try Journal(path: dir + "/garbage.sqlite") }
        #expect(error.code == .corrupt)
    }

    @Test func changesFilterByPrefixKeyAndRangeAndNeverSplitARevision() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        try journal.append([put(1, "net.a", "1", version: 1)])
        try journal.append([put(2, "net.b", "1", version: 1, parts: 3), put(2, "net.c", "1", version: 1, part: 1, parts: 3),
                            put(2, "audio.x", "1", version: 1, part: 2, parts: 3)])
        try journal.append([put(3, "net.a", "2", version: 2, created: 1)])
        try journal.append([put(4, "network", "1", version: 1)])

        let all = try journal.changes(prefix: "net.", from: 1, to: 4, limit: 100)
        #expect(all.changes.map { "\($0.revision):\($0.key)" } == ["1:net.a", "2:net.b", "2:net.c", "3:net.a"])
        #expect(all.more == false)

        let page = try journal.changes(prefix: "net.", from: 1, to: 4, limit: 2)
        #expect(page.changes.map { "\($0.revision):\($0.key)" } == ["1:net.a", "2:net.b", "2:net.c"])
        #expect(page.more)

        let exact = try journal.changes(prefix: "net.a", exact: true, from: 2, to: 4, limit: 100)
        #expect(exact.changes.map(\.revision) == [3])
        #expect(try journal.lastRevision(prefix: "net.", atOrBelow: 4) == 3)
        #expect(try journal.lastRevision(prefix: "audio.", atOrBelow: 1) == 0)
    }

    @Test func snapshotAtAnOlderRevision() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        try journal.append([put(1, "k.a", "1", version: 1)])
        try journal.append([put(2, "k.b", "1", version: 1)])
        try journal.append([put(3, "k.a", "2", version: 2, created: 1)])
        try journal.append([delete(4, "k.b")])
        #expect(try journal.snapshot(prefix: "k.", at: 2).map { "\($0.key)=\(String(decoding: $0.value, as: UTF8.self))" } == ["k.a=1", "k.b=1"])
        #expect(try journal.snapshot(prefix: "k.", at: 3).map { "\($0.key)=\(String(decoding: $0.value, as: UTF8.self))" } == ["k.a=2", "k.b=1"])
        #expect(try journal.snapshot(prefix: "k.", at: 4).map(\.key) == ["k.a"])
        #expect(try journal.snapshot(prefix: "k.", at: 3, startAfter: "k.a").map(\.key) == ["k.b"])
    }

    @Test func compactionKeepsCurrentStateAndDropsSupersededHistory() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        var journal: Journal? = try Journal(path: path)
        for revision in UInt64(1)...10 {
            try journal!.append([put(revision, "k", "\(revision)", version: revision, created: 1)])
        }
        try journal!.append([put(11, "gone", "x", version: 1)])
        try journal!.append([delete(12, "gone")])
        try journal!.append([put(13, "k", "13", version: 13, created: 1)])
        let removed = try journal!.compact(through: 12)
        #expect(removed == 11)  // k@1...9, gone@11 and its tombstone @12
        #expect(journal!.compactedRevision == 12)
        #expect(try journal!.snapshot(prefix: "", at: 12).map { "\($0.key)@\($0.modRevision)" } == ["k@10"])
        #expect(try journal!.changes(prefix: "", from: 1, to: 13, limit: 100).changes.map(\.revision) == [10, 13])
        #expect(try journal!.loadState().map(\.key) == ["k"])
        journal!.close()
        journal = nil
        let reopened = try Journal(path: path)
        #expect(reopened.compactedRevision == 12)
        #expect(reopened.headRevision == 13)
    }

    @Test func headRevisionNeverGoesBackAfterEverythingIsCompacted() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        var journal: Journal? = try Journal(path: path)
        try journal!.append([put(1, "x", "1", version: 1)])
        try journal!.append([delete(2, "x")])
        try journal!.compact(through: 2)
        journal!.close()
        journal = nil
        let reopened = try Journal(path: path)
        #expect(try reopened.changes(prefix: "", from: 0, to: 10, limit: 10).changes.isEmpty)
        #expect(reopened.headRevision == 2)
    }

    @Test func retentionTargetsByCountAndAge() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        for revision in UInt64(1)...100 {
            try journal.append([put(revision, "k", "v", version: revision, created: 1, at: revision * 1000)])
        }
        #expect(try journal.compactionTarget(for: .init(revisions: 30, maxAgeMilliseconds: nil), nowMilliseconds: 100_000) == 70)
        #expect(try journal.compactionTarget(for: .init(revisions: nil, maxAgeMilliseconds: 10_000), nowMilliseconds: 100_500) == 90)
        #expect(try journal.compactionTarget(for: .init(revisions: 30, maxAgeMilliseconds: 10_000), nowMilliseconds: 100_500) == 90)
        #expect(try journal.compactionTarget(for: .init(revisions: nil, maxAgeMilliseconds: nil)) == 0)
    }

    @Test func theStateTableFollowsTheLogAtCheckpoints() throws {
        let path = try temporaryDirectory() + "/j.sqlite"
        var journal: Journal? = try Journal(path: path)
        journal!.stateCheckpointInterval = 4
        for revision in UInt64(1)...10 {
            try journal!.append([put(revision, "k\(revision % 3)", "\(revision)", version: 1)])
        }
        #expect(journal!.stateRevision == 8)  // checkpoints at 4 and 8
        journal!.stateCheckpointBytes = 64
        try journal!.append([put(11, "k0", String(repeating: "v", count: 64), version: 1)])
        #expect(journal!.stateRevision == 11)  // the value's bytes alone reach the limit
        journal!.stateCheckpointBytes = 16 << 20
        try journal!.append([delete(12, "k0")])
        let state = try journal!.loadState()  // catches up first
        #expect(journal!.stateRevision == 12)
        #expect(state.map { "\($0.key)=\(String(decoding: $0.value, as: UTF8.self))@\($0.modRevision)\($0.isDeleted ? "x" : "")" }
                == ["k0=@12x", "k1=10@10", "k2=8@8"])
        journal!.close()
        journal = nil
        #expect(try Journal(path: path).stateRevision == 12)
    }

    /// Whole revisions handed over as arrays split anywhere (a revision's parts in two arrays,
    /// empty arrays between) journal exactly what the same revisions appended one by one do:
    /// the same log, head and state, with checkpoints falling inside the split arrays.
    @Test func appendingRevisionsSplitAcrossArraysMatchesAppendingThemWhole() throws {
        let directory = try temporaryDirectory()
        let whole = try Journal(path: directory + "/whole.sqlite")
        let split = try Journal(path: directory + "/split.sqlite")
        for journal in [whole, split] { journal.stateCheckpointInterval = 5 }
        var random = SplitMix64(seed: 7)
        var revisions: [[JournalChange]] = []
        var versions: [String: UInt64] = [:]
        for revision in UInt64(1)...200 {
            let parts = Int(random.next() % 3) + 1
            var keys: [String] = []
            while keys.count < parts {
                let key = "k\(random.next() % 20)"
                if !keys.contains(key) { keys.append(key) }
            }
            revisions.append(keys.enumerated().map { part, key in
                if versions[key] != nil, random.next() % 4 == 0 {
                    versions[key] = nil
                    return JournalChange(revision: revision, part: UInt32(part), parts: UInt32(parts), kind: .delete, key: key,
                                         version: 0, createRevision: 0, timestampMilliseconds: 1000)
                }
                let version = (versions[key] ?? 0) + 1
                versions[key] = version
                return put(revision, key, "\(revision).\(part)", version: version, part: UInt32(part), parts: UInt32(parts))
            })
        }
        for changes in revisions { try whole.append(changes) }
        // Groups of up to 12 revisions, each group's changes cut into arrays at random points.
        var flat = revisions.flatMap { $0 }[...]
        while !flat.isEmpty {
            let group = flat.prefix(Int(random.next() % 30) + 1)
            let lastRevision = group.last!.revision
            var take = group.count
            while take < flat.count && flat[flat.startIndex + take].revision == lastRevision { take += 1 }
            var chunks: [[JournalChange]] = []
            var rest = flat.prefix(take)[...]
            while !rest.isEmpty {
                let cut = Int(random.next() % 4)
                chunks.append(Array(rest.prefix(cut)))
                rest = rest.dropFirst(cut)
            }
            try split.append(contentsOf: chunks)
            flat = flat.dropFirst(take)
        }
        try split.append(contentsOf: [[], []])  // nothing to append: no change, no error
        #expect(split.headRevision == 200 && whole.headRevision == 200)
        #expect(try split.changes(prefix: "", from: 1, to: 200, limit: 1000).changes
                == (try whole.changes(prefix: "", from: 1, to: 200, limit: 1000).changes))
        #expect(try split.loadState() == (try whole.loadState()))
        #expect(split.stateRevision == 200)
    }

    /// Checkpoints write the latest change per key from memory; a journal reopened from a crash
    /// image with a lagging state table reads the log instead. Both end at the model's state.
    @Test func checkpointsFromMemoryAndFromTheLogAgree() throws {
        let directory = try temporaryDirectory()
        let journal = try Journal(path: directory + "/j.sqlite")
        journal.stateCheckpointInterval = 7
        journal.stateCheckpointBytes = 100  // checkpoints by bytes too, between the revision ones
        var model: [String: JournalEntry] = [:]
        var random = SystemRandomNumberGenerator()
        var versions: [String: (version: UInt64, created: UInt64)] = [:]
        var modelAtCrash: [String: JournalEntry] = [:]
        var crashRevision: UInt64 = 0
        for revision in UInt64(1)...400 {
            let parts = Int.random(in: 1...3, using: &random)
            var changes: [JournalChange] = []
            for part in 0..<parts {
                let key = "k\(Int.random(in: 0..<25, using: &random))"
                if versions[key] != nil && Int.random(in: 0..<4, using: &random) == 0 {
                    changes.append(JournalChange(revision: revision, part: UInt32(part), parts: UInt32(parts), kind: .delete, key: key,
                                                 version: 0, createRevision: 0, timestampMilliseconds: 1000 + revision))
                    versions[key] = nil
                    model[key] = JournalEntry(key: key, value: [], version: 0, createRevision: 0, modRevision: revision,
                                              expiresAtMilliseconds: 0, isDeleted: true, modTimeMilliseconds: 1000 + revision)
                } else {
                    let current = versions[key] ?? (0, revision)
                    let value = Array("\(revision).\(part)".utf8)
                    changes.append(JournalChange(revision: revision, part: UInt32(part), parts: UInt32(parts), kind: .put, key: key,
                                                 value: value, version: current.version + 1, createRevision: current.created,
                                                 timestampMilliseconds: 1000 + revision, session: part == 1 ? [7] : []))
                    versions[key] = (current.version + 1, current.created)
                    model[key] = JournalEntry(key: key, value: value, version: current.version + 1, createRevision: current.created,
                                              modRevision: revision, expiresAtMilliseconds: 0, isDeleted: false,
                                              session: part == 1 ? [7] : [], modTimeMilliseconds: 1000 + revision)
                }
            }
            try journal.append(changes)
            if revision >= 390 && crashRevision == 0 && journal.stateRevision < revision {
                crashRevision = revision
                modelAtCrash = model
                // A crash image: the file and its write-ahead log as they are on disk now.
                try FileManager.default.createDirectory(atPath: directory + "/crash", withIntermediateDirectories: false)
                for suffix in ["", "-wal"] {
                    try FileManager.default.copyItem(atPath: directory + "/j.sqlite" + suffix, toPath: directory + "/crash/j.sqlite" + suffix)
                }
            }
        }
        func inKeyOrder(_ model: [String: JournalEntry]) -> [JournalEntry] {
            model.values.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
        }
        #expect(try journal.loadState() == inKeyOrder(model))
        #expect(journal.stateRevision == 400)

        let crashed = try Journal(path: directory + "/crash/j.sqlite")
        #expect(crashed.headRevision == crashRevision)
        #expect(crashed.stateRevision < crashRevision)
        #expect(try crashed.loadState() == inKeyOrder(modelAtCrash))
        #expect(crashed.stateRevision == crashRevision)
    }

    /// Every field of every change reads back as appended, whatever mix the rows that share one
    /// multi-row insert have: write ids or none, sessions or none, expiries, empty and large
    /// values (past the insert buffer's first size), non-ASCII keys, deletes, revisions of
    /// several parts, appends of 1 to 100 changes. Sessions, which history does not return,
    /// are checked through the state a reopened crash image rebuilds from the log.
    @Test func everyFieldReadsBackAsAppendedThroughMultiRowInserts() throws {
        let directory = try temporaryDirectory()
        let journal = try Journal(path: directory + "/j.sqlite")
        journal.stateCheckpointInterval = .max  // the state table stays behind: rebuilt from the log below
        journal.stateCheckpointBytes = .max
        var random = SplitMix64(seed: 11)
        var appended: [JournalChange] = []
        var latest: [String: JournalChange] = [:]
        var revision: UInt64 = 0
        for _ in 0..<40 {
            var changes: [JournalChange] = []
            let count = Int(random.next() % 100) + 1
            while changes.count < count {
                revision += 1
                let parts = min(Int(random.next() % 3) + 1, count - changes.count)
                var keys: [String] = []
                while keys.count < parts {
                    let key = random.next() % 5 == 0 ? "ключ.\(random.next() % 30)" : "k.\(random.next() % 30)"
                    if !keys.contains(key) { keys.append(key) }
                }
                for (part, key) in keys.enumerated() {
                    let isDelete = random.next() % 6 == 0
                    let size = [0, 1, 64, 5000, 20000][Int(random.next() % 5)]
                    let change = JournalChange(
                        revision: revision, part: UInt32(part), parts: UInt32(parts), kind: isDelete ? .delete : .put, key: key,
                        value: isDelete ? [] : value(size: size, revision: revision, part: part),
                        version: isDelete ? 0 : random.next() % 1000 + 1,
                        createRevision: isDelete ? 0 : revision - random.next() % revision,
                        expiresAtMilliseconds: !isDelete && random.next() % 3 == 0 ? 1_800_000_000_000 + revision : 0,
                        timestampMilliseconds: 1_700_000_000_000 + revision,
                        writeID: part == 0 && random.next() % 2 == 0 ? Array(repeating: UInt8(revision & 0xff), count: 16) : nil,
                        session: !isDelete && random.next() % 4 == 0 ? [1, 2, UInt8(revision & 0xff)] : [])
                    changes.append(change)
                    latest[key] = change
                }
            }
            try journal.append(changes)
            appended += changes
        }
        #expect(journal.headRevision == revision)
        let history = try journal.changes(prefix: "", from: 1, to: revision, limit: appended.count).changes
        #expect(history == appended.map { change in
            var withoutSession = change
            withoutSession.session = []
            return withoutSession
        })

        // A crash image, whose state table is empty: opening it rebuilds the state from the log.
        try FileManager.default.createDirectory(atPath: directory + "/crash", withIntermediateDirectories: false)
        for suffix in ["", "-wal"] {
            try FileManager.default.copyItem(atPath: directory + "/j.sqlite" + suffix, toPath: directory + "/crash/j.sqlite" + suffix)
        }
        let crashed = try Journal(path: directory + "/crash/j.sqlite")
        #expect(crashed.stateRevision == 0)
        let expected = latest.values
            .map { change in
                JournalEntry(key: change.key, value: change.value, version: change.version, createRevision: change.createRevision,
                             modRevision: change.revision, expiresAtMilliseconds: change.expiresAtMilliseconds,
                             isDeleted: change.kind != .put, session: change.session,
                             modTimeMilliseconds: change.timestampMilliseconds)
            }
            .sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }
        #expect(try crashed.loadState() == expected)

        func value(size: Int, revision: UInt64, part: Int) -> [UInt8] {
            var value = [UInt8](repeating: UInt8(truncatingIfNeeded: revision), count: size)
            if size > 1 {
                value[0] = UInt8(part)
                value[size - 1] = 0xAB
            }
            return value
        }
    }

    @Test func writeIDsAreRecoverable() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/j.sqlite")
        var change = put(1, "k", "v", version: 1)
        change.writeID = [1, 2, 3]
        try journal.append([change])
        try journal.append([put(2, "k", "w", version: 2, created: 1)])
        let ids = try journal.recentWriteIDs(revisions: 10)
        #expect(ids.count == 1)
        #expect(ids[0].writeID == [1, 2, 3] && ids[0].revision == 1)
    }

    /// A backup made in steps holds what was committed between its steps, under its own epoch;
    /// one cancelled halfway leaves no file.
    @Test func aBackupInStepsTakesTheCommitsMadeBetweenThemAndACancelledOneLeavesNoFile() throws {
        let directory = try temporaryDirectory()
        let journal = try Journal(path: directory + "/j.sqlite")
        let big = String(repeating: "x", count: 4000)
        for revision in UInt64(1)...500 { try journal.append([put(revision, "k\(revision % 300)", big, version: 1)]) }

        let backup = try journal.beginBackup(to: directory + "/copy.sqlite")
        var steps = 0
        var revision: UInt64 = 500
        while try !backup.step(pages: 16) {
            steps += 1
            #expect(backup.pages.remaining > 0 && backup.pages.total > 0)
            revision += 1
            try journal.append([put(revision, "between\(revision)", "\(steps)", version: 1)])
        }
        #expect(steps > 10)
        let copy = try Journal(path: directory + "/copy.sqlite")
        #expect(copy.headRevision == journal.headRevision)
        #expect(copy.epoch == backup.epoch && copy.epoch != journal.epoch)
        let copied = try copy.changes(prefix: "", from: 1, to: copy.headRevision, limit: 100_000).changes
        #expect(copied == (try journal.changes(prefix: "", from: 1, to: journal.headRevision, limit: 100_000).changes))

        let cancelled = try journal.beginBackup(to: directory + "/cancelled.sqlite")
        #expect(try !cancelled.step(pages: 16))
        cancelled.cancel()
        #expect(!FileManager.default.fileExists(atPath: directory + "/cancelled.sqlite"))
        #expect(throws: JournalError.self) { _ = try journal.beginBackup(to: directory + "/copy.sqlite") }
    }
}
