@testable import BeaconJournal
import Foundation
import Testing
import BeaconTestSupport

/// Journals written by an older beacond open in this one with every change, the state and the
/// write ids intact.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct JournalMigrationTests {
    /// Writes a schema-3 journal (the log keyed by `(revision, part)`) the way beacond 3 left it:
    /// a multi-key revision, a write id, a session, a delete, an expiry and a state table that
    /// lags the log by two revisions.
    private func schema3Journal() throws -> String {
        let path = try temporaryDirectory() + "/j.sqlite"
        let database = try SQLiteDatabase(path: path)
        for step in Journal.migrations.prefix(3) { try database.execute(step) }
        try database.execute("""
            INSERT INTO meta(name, value) VALUES ('epoch', 4242), ('compacted_revision', 0), ('created_ms', 1), ('state_revision', 2);
            INSERT INTO changes(revision, part, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id, session) VALUES
              (1, 0, 1, 0, 'a.x', x'0a01', 1, 1, 0, 1000, x'0102', x''),
              (2, 0, 2, 0, 'a.x', x'0a02', 2, 1, 0, 2000, NULL, x''),
              (2, 1, 2, 0, 'b', x'0b01', 1, 2, 9000, 2000, NULL, x'5353'),
              (3, 0, 1, 1, 'b', x'', 0, 0, 0, 3000, x'0304', x''),
              (4, 0, 1, 0, 'c', x'0c01', 1, 4, 0, 4000, NULL, x'');
            INSERT INTO state(key, value, version, create_revision, mod_revision, expires_at, deleted, session) VALUES
              ('a.x', x'0a02', 2, 1, 2, 0, 0, x''),
              ('b', x'0b01', 1, 2, 2, 9000, 0, x'5353');
            PRAGMA user_version = 3;
            """)
        database.close()
        return path
    }

    @Test func aSchema3JournalKeepsEveryChangeAndItsState() throws {
        let path = try schema3Journal()
        let journal = try Journal(path: path)
        #expect(journal.epoch == 4242)
        #expect(journal.headRevision == 4)

        let history = try journal.changes(prefix: "", from: 1, to: 4, limit: 100)
        #expect(history.more == false)
        #expect(history.changes == [
            JournalChange(revision: 1, kind: .put, key: "a.x", value: [0x0A, 0x01], version: 1, createRevision: 1,
                          timestampMilliseconds: 1000, writeID: [1, 2]),
            JournalChange(revision: 2, part: 0, parts: 2, kind: .put, key: "a.x", value: [0x0A, 0x02], version: 2,
                          createRevision: 1, timestampMilliseconds: 2000),
            JournalChange(revision: 2, part: 1, parts: 2, kind: .put, key: "b", value: [0x0B, 0x01], version: 1,
                          createRevision: 2, expiresAtMilliseconds: 9000, timestampMilliseconds: 2000),
            JournalChange(revision: 3, kind: .delete, key: "b", version: 0, createRevision: 0,
                          timestampMilliseconds: 3000, writeID: [3, 4]),
            JournalChange(revision: 4, kind: .put, key: "c", value: [0x0C, 0x01], version: 1, createRevision: 4,
                          timestampMilliseconds: 4000),
        ])
        // A page of two rows still ends on a whole revision.
        let page = try journal.changes(prefix: "", from: 1, to: 4, limit: 2)
        #expect(page.changes.map(\.revision) == [1, 2, 2] && page.more)

        #expect(try journal.snapshot(prefix: "", at: 2).map(\.key) == ["a.x", "b"])
        #expect(try journal.snapshot(prefix: "", at: 4).map(\.key) == ["a.x", "c"])
        #expect(try journal.snapshot(prefix: "", at: 4).map(\.modTimeMilliseconds) == [2000, 4000])
        #expect(try journal.lastRevision(prefix: "b", atOrBelow: 4) == 3)
        #expect(try journal.lastRevision(before: 2500) == 2)
        #expect(try journal.recentWriteIDs(revisions: 10).map(\.revision) == [1, 3])

        // The state table caught up from the migrated log (it lagged at revision 2); its rows
        // from before the migration got their commit times from the log.
        let state = try journal.loadState()
        #expect(state == [
            JournalEntry(key: "a.x", value: [0x0A, 0x02], version: 2, createRevision: 1, modRevision: 2,
                         expiresAtMilliseconds: 0, isDeleted: false, modTimeMilliseconds: 2000),
            JournalEntry(key: "b", value: [], version: 0, createRevision: 0, modRevision: 3,
                         expiresAtMilliseconds: 0, isDeleted: true, modTimeMilliseconds: 3000),
            JournalEntry(key: "c", value: [0x0C, 0x01], version: 1, createRevision: 4, modRevision: 4,
                         expiresAtMilliseconds: 0, isDeleted: false, modTimeMilliseconds: 4000),
        ])
        #expect(journal.stateRevision == 4)
    }

    @Test func aMigratedJournalTakesNewRevisionsAndCompacts() throws {
        let path = try schema3Journal()
        var journal: Journal? = try Journal(path: path)
        try journal!.append([JournalChange(revision: 5, kind: .put, key: "a.x", value: [0x0A, 0x03], version: 3,
                                           createRevision: 1, timestampMilliseconds: 5000)])
        #expect(try journal!.compact(through: 5) == 4)  // a.x@1, a.x@2, b@2 and the delete of b
        journal!.close()
        journal = nil

        let reopened = try Journal(path: path)
        #expect(reopened.headRevision == 5)
        #expect(reopened.compactedRevision == 5)
        #expect(try reopened.changes(prefix: "", from: 0, to: 5, limit: 100).changes.map { "\($0.key)@\($0.revision)" }
                == ["c@4", "a.x@5"])
        #expect(try reopened.loadState().map(\.key) == ["a.x", "c"])
    }
}
