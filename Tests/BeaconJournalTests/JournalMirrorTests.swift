import BeaconJournal
import Foundation
import Testing
import BeaconTestSupport

/// ``Journal/replaceContents(epoch:revision:entries:scope:)``: a relay's journal taking its upstream's
/// state, then going on with the upstream's revisions.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct JournalMirrorTests {
    static let entries = [
        JournalEntry(key: "a.x", value: Array("x".utf8), version: 3, createRevision: 2, modRevision: 40,
                     expiresAtMilliseconds: 0, isDeleted: false, modTimeMilliseconds: 4000),
        JournalEntry(key: "a.y", value: Array("y".utf8), version: 1, createRevision: 40, modRevision: 40,
                     expiresAtMilliseconds: 9_000_000, isDeleted: false, modTimeMilliseconds: 4000),
        JournalEntry(key: "b", value: Array("b".utf8), version: 7, createRevision: 1, modRevision: 12,
                     expiresAtMilliseconds: 0, isDeleted: false, modTimeMilliseconds: 1200),
    ]

    @Test func replacedContentsReadAsTheUpstreamsCompactedJournalAndSurviveReopening() throws {
        let path = try temporaryDirectory() + "/relay.sqlite"
        var journal: Journal? = try Journal(path: path)
        try journal!.append([put(1, "old", "gone", version: 1)])
        try journal!.append([put(2, "a.x", "old", version: 1)])
        #expect(journal!.contentScope == nil, "a journal that never copied another names no scope")
        let upstreamEpoch: UInt64 = 0x7000_0000_0000_0001
        try journal!.replaceContents(epoch: upstreamEpoch, revision: 50, entries: Self.entries, scope: 0xFFFF_0000_0000_0042)

        for reopened in [false, true] {
            if reopened {
                journal!.close()
                journal = try Journal(path: path)
            }
            let replaced = try #require(journal)
            #expect(replaced.epoch == upstreamEpoch)
            #expect(replaced.contentScope == 0xFFFF_0000_0000_0042)
            #expect(replaced.headRevision == 50 && replaced.compactedRevision == 50)
            #expect(!replaced.isCompacting)
            #expect(try replaced.loadState() == Self.entries, "reopened: \(reopened)")
            #expect(try replaced.snapshot(prefix: "", at: 50) == Self.entries)
            #expect(try replaced.snapshot(prefix: "a.", at: 50).map(\.key) == ["a.x", "a.y"])
            #expect(try replaced.lastRevision(prefix: "b", atOrBelow: 50) == 12)
        }
        // The upstream's next revision appends above the snapshot, and reads like any change.
        try journal!.append([put(51, "a.x", "next", version: 4, created: 2, at: 5100)])
        let (changes, more) = try journal!.changes(prefix: "a.", from: 51, to: 51, limit: 10)
        #expect(!more && changes.map(\.key) == ["a.x"] && changes[0].version == 4)
        #expect(try journal!.loadState().first { $0.key == "a.x" }?.modRevision == 51)
    }

    @Test func anEmptyStateLeavesAnEmptyJournalAtTheRevision() throws {
        let journal = try Journal(path: try temporaryDirectory() + "/relay.sqlite")
        try journal.append([put(1, "k", "v", version: 1)])
        try journal.replaceContents(epoch: 9, revision: 7, entries: [], scope: 1)
        #expect(journal.epoch == 9 && journal.headRevision == 7)
        #expect(try journal.loadState().isEmpty)
        try journal.append([put(8, "k", "v", version: 1)])
        #expect(journal.headRevision == 8)
    }
}
