import BeaconJournal
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct MirrorCacheTests {
    private func path() throws -> String {
        try makeTestDirectory("bcache") + "/mirror.sqlite"
    }

    private func row(_ key: String, _ revision: UInt64, _ text: String) -> MirrorCache.Row {
        .init(key: key, revision: revision, record: Array(text.utf8))
    }

    @Test func rowsBookmarksAndEpochSurviveReopening() throws {
        let file = try path()
        var cache = try MirrorCache(path: file)
        try cache.save(epoch: 7, rows: [row("a.x", 3, "x3"), row("a.y", 4, "y4")], snapshots: [:], bookmarks: ["a.": 4])
        // Older rows never replace newer ones; a deletion is a row with an empty record.
        try cache.save(epoch: 7, rows: [row("a.x", 2, "x2"), .init(key: "a.y", revision: 6, record: [])], snapshots: [:], bookmarks: ["a.": 6])
        cache.close()

        cache = try MirrorCache(path: file)
        let contents = try cache.load()
        #expect(contents.epoch == 7)
        #expect(contents.bookmarks == ["a.": 6])
        #expect(contents.rows == [row("a.x", 3, "x3")])
        cache.close()
    }

    @Test func aSnapshotReplacesItsPrefixAndANewEpochEmptiesTheCache() throws {
        let cache = try MirrorCache(path: try path())
        try cache.save(epoch: 1, rows: [row("p.a", 1, "a"), row("p.b", 2, "b"), row("q.c", 3, "c"), row("p.z", 9, "z")],
                       snapshots: [:], bookmarks: ["p.": 3, "q.": 3])
        // A snapshot of p. at 5 holds only p.a: p.b is gone; p.z (newer than the snapshot) stays.
        try cache.save(epoch: 1, rows: [row("p.a", 5, "a5")], snapshots: ["p.": 5], bookmarks: ["p.": 5])
        #expect(try cache.load().rows.map(\.key) == ["p.a", "p.z", "q.c"])
        // The journal was replaced: nothing of the old epoch is kept.
        try cache.save(epoch: 2, rows: [row("p.n", 1, "n")], snapshots: ["p.": 1], bookmarks: ["p.": 1])
        let contents = try cache.load()
        #expect(contents.epoch == 2)
        #expect(contents.rows == [row("p.n", 1, "n")])
        #expect(contents.bookmarks == ["p.": 1])
        cache.close()
    }

    @Test func aSecondProcessCannotOpenACacheInUse() throws {
        let file = try path()
        let cache = try MirrorCache(path: file)
        #expect(throws: JournalError.self) { try MirrorCache(path: file) }
        cache.close()
    }
}
