internal import CBeaconSQLite
import Foundation

/// A client's local copy of what it mirrors (SQLite, WAL): the last known row of every mirrored
/// key, and per followed prefix the revision the copy is complete through, in one journal epoch.
///
/// With it, a process that starts while the daemon is down shows the last known values, and on
/// connect asks only for the changes after each prefix's bookmark. Rows are opaque to the cache
/// (the client stores encoded key states); each carries the revision that produced it, and a
/// row is only ever replaced by a newer one.
public final class MirrorCache {
    /// One cached key.
    public struct Row: Sendable, Equatable {
        public var key: String
        /// The revision of the key's last change (a write, or the deletion for a tombstone).
        public var revision: UInt64
        /// The encoded state; empty for a deleted key.
        public var record: [UInt8]
        public var isDeleted: Bool { record.isEmpty }

        /// Creates a row; an empty `record` records a deletion.
        public init(key: String, revision: UInt64, record: [UInt8]) {
            self.key = key
            self.revision = revision
            self.record = record
        }
    }

    /// Everything the cache holds.
    public struct Contents: Sendable {
        /// The journal epoch the rows and bookmarks belong to (0: empty cache).
        public var epoch: UInt64
        /// Per followed prefix, the revision the cached rows under it are complete through.
        public var bookmarks: [String: UInt64]
        /// Live keys (tombstones left out), in key order.
        public var rows: [Row]
    }

    private let database: SQLiteDatabase
    private var upsert: SQLiteStatement?
    private var saveBookmark: SQLiteStatement?

    /// Opens (or creates) the cache at `path`, locked to this process.
    /// - Throws: ``JournalError`` when the file cannot be opened, is in use, or is damaged.
    public init(path: String) throws(JournalError) {
        do {
            database = try SQLiteDatabase(path: path)
            try database.execute("PRAGMA busy_timeout = 0")
            try database.execute("PRAGMA locking_mode = EXCLUSIVE")
            _ = try database.scalarText("PRAGMA journal_mode = WAL")
            try database.execute("PRAGMA synchronous = NORMAL")
            try database.execute("BEGIN IMMEDIATE; COMMIT")
            guard try database.scalarText("PRAGMA quick_check") == "ok" else {
                throw JournalError(code: .corrupt, message: "\(path) is damaged")
            }
            try database.execute("""
                CREATE TABLE IF NOT EXISTS cache_meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS cache_keys (
                    key TEXT PRIMARY KEY, revision INTEGER NOT NULL, record BLOB NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS cache_bookmarks (prefix TEXT PRIMARY KEY, revision INTEGER NOT NULL) WITHOUT ROWID;
                """)
            upsert = try database.prepare("""
                INSERT INTO cache_keys(key, revision, record) VALUES (?1, ?2, ?3)
                ON CONFLICT(key) DO UPDATE SET revision = excluded.revision, record = excluded.record
                WHERE excluded.revision > cache_keys.revision
                """)
            saveBookmark = try database.prepare("""
                INSERT INTO cache_bookmarks(prefix, revision) VALUES (?1, ?2)
                ON CONFLICT(prefix) DO UPDATE SET revision = excluded.revision
                """)
        } catch let error as JournalError {
            throw error
        } catch let error as SQLiteError {
            if error.isBusy {
                throw JournalError(code: .locked, message: "\(path) is in use by another process", underlying: error)
            }
            throw JournalError(error, while: "cannot open \(path)")
        } catch {
            throw JournalError(code: .io, message: "\(error)")
        }
    }

    /// Reads the epoch, the bookmarks and the live rows.
    public func load() throws(JournalError) -> Contents {
        do {
            let epoch = UInt64(bitPattern: try database.scalarInt("SELECT value FROM cache_meta WHERE name = 'epoch'") ?? 0)
            var bookmarks: [String: UInt64] = [:]
            let marks = try database.prepare("SELECT prefix, revision FROM cache_bookmarks")
            while try marks.step() { bookmarks[marks.text(0)] = marks.uint(1) }
            var rows: [Row] = []
            let keys = try database.prepare("SELECT key, revision, record FROM cache_keys WHERE length(record) > 0 ORDER BY key")
            while try keys.step() { rows.append(Row(key: keys.text(0), revision: keys.uint(1), record: keys.blob(2) ?? [])) }
            return Contents(epoch: epoch, bookmarks: bookmarks, rows: rows)
        } catch {
            throw JournalError(error, while: "cannot read the mirror cache")
        }
    }

    /// Saves in one transaction: the rows (each kept only if newer than the cached one), the
    /// state of `snapshots` (prefix → revision: rows under the prefix at or below it that are
    /// not in `rows` are gone) and the bookmarks. A new `epoch` first empties the cache.
    public func save(epoch: UInt64, rows: [Row], snapshots: [String: UInt64], bookmarks: [String: UInt64]) throws(JournalError) {
        do throws(SQLiteError) {
            try database.execute("BEGIN IMMEDIATE")
            do throws(SQLiteError) {
                let current = UInt64(bitPattern: try database.scalarInt("SELECT value FROM cache_meta WHERE name = 'epoch'") ?? 0)
                if current != epoch {
                    try database.execute("DELETE FROM cache_keys; DELETE FROM cache_bookmarks;")
                    try database.execute("INSERT OR REPLACE INTO cache_meta(name, value) VALUES ('epoch', \(Int64(bitPattern: epoch)))")
                }
                for (prefix, revision) in snapshots {
                    let clear = try database.prepare("""
                        DELETE FROM cache_keys WHERE key >= ?1 AND key < ?2 AND revision <= ?3
                        """)
                    clear.bind(1, prefix)
                    clear.bind(2, Journal.upperBound(prefix) ?? "\u{7F}")
                    clear.bind(3, revision)
                    try clear.run()
                }
                guard let upsert, let saveBookmark else { throw database.error(SQLITE_MISUSE, "the mirror cache is closed") }
                for row in rows {
                    upsert.bind(1, row.key)
                    upsert.bind(2, row.revision)
                    upsert.bind(3, blob: row.record)
                    try upsert.run()
                }
                for (prefix, revision) in bookmarks {
                    saveBookmark.bind(1, prefix)
                    saveBookmark.bind(2, revision)
                    try saveBookmark.run()
                }
                try database.execute("COMMIT")
            } catch {
                try? database.execute("ROLLBACK")
                throw error
            }
        } catch {
            throw JournalError(error, while: "cannot save the mirror cache")
        }
    }

    /// Closes the file (and releases its lock). Idempotent.
    public func close() {
        upsert = nil
        saveBookmark = nil
        database.close()
    }

    deinit { close() }
}
