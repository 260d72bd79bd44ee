import Foundation
internal import CBeaconSQLite

/// The durable record of every change: an append-only change log keyed by revision plus the
/// current state of every key, in one SQLite file in WAL mode.
///
/// The journal is used by one thread at a time; it holds its file exclusively, so a second
/// process opening the same file gets a ``JournalError`` with code ``JournalError/Code/locked``.
public final class Journal {
    /// The schema version this code writes; older journals are migrated at open.
    public static let schemaVersion = Int64(migrations.count)
    /// How much of the journal file SQLite reads through a memory map (1 GiB). What lies beyond
    /// is read through the page cache, which is the daemon's own memory: with 256 MiB, a journal
    /// of 1,000,000 keys filled the cache at start-up (266 MB resident, against 222 MB now).
    static let mappedBytes = 1 << 30

    /// Where the journal lives.
    public let path: String
    /// The journal's identity: random, chosen when the file was created, kept across restarts
    /// (a relay's takes its upstream's, ``replaceContents(epoch:revision:entries:scope:)``). Read for
    /// every diff the daemon publishes, so without a dynamic exclusivity check.
    @exclusivity(unchecked) public internal(set) var epoch: UInt64 = 0
    /// The highest committed revision (0 for a new journal).
    public internal(set) var headRevision: UInt64 = 0
    /// History at or below this revision has been compacted: only the latest change per key remains.
    public internal(set) var compactedRevision: UInt64 = 0
    /// The compaction under way, if any (see ``beginCompaction(through:)``).
    var compaction: CompactionRun?
    /// What of another journal this one copies, as its copier named it when it last replaced
    /// the contents (``replaceContents(epoch:revision:entries:scope:)``); `nil` if it never did.
    public internal(set) var contentScope: UInt64?

    let database: SQLiteDatabase
    // Read for every append: no dynamic exclusivity check (a journal is used by one thread at
    // a time, and appending calls nothing that appends).
    @exclusivity(unchecked) var changeLog: ChangeLogWriter!
    private var upsertState: SQLiteStatement!
    private var saveStateRevision: SQLiteStatement!
    /// The state table reflects every change up to this revision; later ones are in the log only.
    public internal(set) var stateRevision: UInt64 = 0
    /// Revisions the state table may lag behind the log before ``append(_:)`` brings it up to date.
    public var stateCheckpointInterval: UInt64 = 32_768
    /// Bytes of values appended since the last checkpoint before ``append(_:)`` brings the state
    /// table up to date, whatever the revisions: the changes are held in memory until then.
    public var stateCheckpointBytes = 16 << 20
    /// Every change appended since `stateRevision`, as the arrays it was appended in, when this
    /// journal appended all of them (nil when the log holds changes from before the journal was
    /// opened: the checkpoint then reads them back from the log). Holding the caller's arrays
    /// costs one reference per array; the checkpoint picks each key's latest change.
    @exclusivity(unchecked) private var unsavedChanges: [[JournalChange]]?
    /// Value and key bytes held in `unsavedChanges`.
    @exclusivity(unchecked) private var unsavedStateBytes = 0
    private var upsertStateRow: SQLiteStatement!
    private var begin: SQLiteStatement!
    private var commitStatement: SQLiteStatement!
    private var rollbackStatement: SQLiteStatement!

    /// Opens the journal at `path`, creating it (and a new epoch) when it does not exist.
    ///
    /// Checks integrity, migrates older schemas and takes an exclusive lock on the file.
    /// - Parameters:
    ///   - path: the SQLite file.
    ///   - durability: how commits are synced (see ``Durability``).
    /// - Throws: ``JournalError`` when the file is locked, damaged, unwritable or too new.
    public init(path: String, durability: Durability = .normal) throws(JournalError) {
        self.path = path
        // Say plainly when the file or its directory cannot be written (SQLite would report a
        // generic I/O error once it tries to create the write-ahead log).
        // SQLite writes the file and creates its write-ahead log beside it.
        let directory = (path as NSString).deletingLastPathComponent
        for target in [directory.isEmpty ? "." : directory, path] where FileManager.default.fileExists(atPath: target) {
            if access(target, W_OK) != 0 {
                let reason = String(cString: strerror(errno))
                throw JournalError(code: .readOnly, message: "\(target) is not writable: \(reason)")
            }
        }
        do {
            database = try SQLiteDatabase(path: path)
        } catch {
            throw JournalError(error, while: "cannot open \(path)")
        }
        do {
            try database.execute("PRAGMA busy_timeout = 0")
            // Exclusive locking: one daemon per journal, and WAL without a shared-memory file.
            try database.execute("PRAGMA locking_mode = EXCLUSIVE")
            guard try database.scalarText("PRAGMA journal_mode = WAL")?.lowercased() == "wal" else {
                throw JournalError(code: .readOnly, message: "cannot switch \(path) to WAL mode")
            }
            try database.execute("PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
            // A 64 MiB page cache and memory-mapped reads keep the hot B-tree pages out of
            // read syscalls; checkpointing every ~40 MiB of WAL writes each hot page back once
            // per checkpoint instead of once per ~4 MiB.
            try database.execute("PRAGMA cache_size = -65536")
            try database.execute("PRAGMA mmap_size = \(Self.mappedBytes)")
            try database.execute("PRAGMA wal_autocheckpoint = 10000")
            // Takes the exclusive lock now rather than at the first write.
            try database.execute("BEGIN IMMEDIATE; COMMIT")
            try checkIntegrity()
            try migrate()
            try prepareStatements()
            try loadMeta()
        } catch let error as JournalError {
            throw error
        } catch let error as SQLiteError {
            if error.isBusy {
                throw JournalError(code: .locked, message: "\(path) is in use by another process (is another beacond running on this state directory?)", underlying: error)
            }
            throw JournalError(error, while: "cannot open \(path)")
        } catch {
            throw JournalError(code: .io, message: "\(error)")
        }
    }

    /// Turns off SQLite's memory statistics, which take a process-wide mutex on every allocation
    /// (about 5% of an append's instructions). Call it once at process start, before any thread
    /// uses SQLite; later calls change nothing. `beacond` does.
    /// - Returns: whether the setting took effect.
    @discardableResult
    public static func disableSQLiteMemoryStatistics() -> Bool {
        cbeacon_sqlite_disable_memory_statistics() == SQLITE_OK
    }

    /// Closes the file; further calls fail. Idempotent.
    public func close() {
        if database.handle != nil, upsertState != nil {
            try? checkpointState()
        }
        changeLog = nil
        upsertState = nil
        upsertStateRow = nil
        saveStateRevision = nil
        begin = nil
        commitStatement = nil
        rollbackStatement = nil
        if database.handle != nil {
            try? database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        }
        database.close()
    }

    deinit { close() }

    private func checkIntegrity() throws {
        let result = try database.scalarText("PRAGMA quick_check") ?? "no answer"
        if result != "ok" {
            throw JournalError(code: .corrupt, message: "\(path) failed its integrity check: \(result)")
        }
    }

    private func migrate() throws {
        let version = try database.scalarInt("PRAGMA user_version") ?? 0
        if version > Journal.schemaVersion {
            throw JournalError(code: .schemaTooNew, message: "\(path) has schema \(version); this beacond knows up to \(Journal.schemaVersion)")
        }
        if version == Journal.schemaVersion { return }
        if version == 0, try database.scalarInt("SELECT count(*) FROM sqlite_master") ?? 0 > 0 {
            throw JournalError(code: .corrupt, message: "\(path) is an SQLite file but not a Beacon journal")
        }
        try database.execute("BEGIN IMMEDIATE")
        do {
            for step in (version + 1)...Journal.schemaVersion {
                try database.execute(Journal.migrations[Int(step) - 1])
            }
            let epoch = UInt64.random(in: 1...UInt64(Int64.max))
            let now = Journal.nowMilliseconds()
            try database.execute("""
                INSERT OR IGNORE INTO meta(name, value) VALUES ('epoch', \(epoch));
                INSERT OR IGNORE INTO meta(name, value) VALUES ('compacted_revision', 0);
                INSERT OR IGNORE INTO meta(name, value) VALUES ('created_ms', \(now));
                PRAGMA user_version = \(Journal.schemaVersion);
                """)
            try database.execute("COMMIT")
        } catch {
            try? database.execute("ROLLBACK")
            throw error
        }
    }

    /// Schema steps; entry N-1 migrates from version N-1 to N. Never edit a released step.
    static let migrations = [
        """
        CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
        CREATE TABLE changes (
            revision INTEGER NOT NULL, part INTEGER NOT NULL, parts INTEGER NOT NULL,
            kind INTEGER NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
            version INTEGER NOT NULL, create_revision INTEGER NOT NULL, expires_at INTEGER NOT NULL,
            timestamp INTEGER NOT NULL, write_id BLOB,
            PRIMARY KEY (revision, part)) WITHOUT ROWID;
        CREATE INDEX changes_by_key ON changes(key, revision);
        CREATE TABLE state (
            key TEXT PRIMARY KEY, value BLOB NOT NULL, version INTEGER NOT NULL,
            create_revision INTEGER NOT NULL, mod_revision INTEGER NOT NULL,
            expires_at INTEGER NOT NULL, deleted INTEGER NOT NULL) WITHOUT ROWID;
        """,
        // 2: the per-key index cost about one dirty 4 KiB page per write (a batch touches every
        // hot key's run); history of one key, old snapshots and compaction scan by revision instead.
        "DROP INDEX IF EXISTS changes_by_key;",
        // 3: keys bound to a writer's session (deleted when the session ends); empty: none.
        """
        ALTER TABLE changes ADD COLUMN session BLOB NOT NULL DEFAULT x'';
        ALTER TABLE state ADD COLUMN session BLOB NOT NULL DEFAULT x'';
        """,
        // 4: the log keyed by rowid `position` (``LogPosition``): an append to a rowid
        // table costs about a fifth fewer instructions than to the (revision, part) index.
        """
        CREATE TABLE change_log (
            position INTEGER PRIMARY KEY, parts INTEGER NOT NULL, kind INTEGER NOT NULL,
            key TEXT NOT NULL, value BLOB NOT NULL, version INTEGER NOT NULL,
            create_revision INTEGER NOT NULL, expires_at INTEGER NOT NULL, timestamp INTEGER NOT NULL,
            write_id BLOB, session BLOB NOT NULL DEFAULT x'');
        INSERT INTO change_log
            SELECT \(LogPosition.positionSQL(revision: "revision", part: "part")), parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id, session
            FROM changes ORDER BY revision, part;
        DROP TABLE changes;
        """,
        // 5: each key's commit time of its last write, for readers of current values.
        """
        ALTER TABLE state ADD COLUMN mod_time INTEGER NOT NULL DEFAULT 0;
        UPDATE state SET mod_time = coalesce((SELECT timestamp FROM change_log
            WHERE position >= \(LogPosition.positionSQL(revision: "state.mod_revision", part: "0"))
              AND position < \(LogPosition.positionSQL(revision: "(state.mod_revision + 1)", part: "0")) LIMIT 1), 0);
        """,
    ]

    private func prepareStatements() throws(SQLiteError) {
        changeLog = try ChangeLogWriter(database: database)
        // The latest change of every key changed at or after position ?1.
        upsertState = try database.prepare("""
            INSERT INTO state(key, value, version, create_revision, mod_revision, expires_at, deleted, session, mod_time)
            SELECT key, value, version, create_revision, \(LogPosition.revisionSQL()), expires_at, kind != 0, session, timestamp FROM (
              SELECT key, value, version, create_revision, position, expires_at, kind, session, timestamp, max(position)
              FROM change_log WHERE position >= ?1 GROUP BY key)
            WHERE true
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, version = excluded.version,
              create_revision = excluded.create_revision, mod_revision = excluded.mod_revision,
              expires_at = excluded.expires_at, deleted = excluded.deleted, session = excluded.session,
              mod_time = excluded.mod_time
            """)
        upsertStateRow = try database.prepare("""
            INSERT INTO state(key, value, version, create_revision, mod_revision, expires_at, deleted, session, mod_time)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
            ON CONFLICT(key) DO UPDATE SET value = excluded.value, version = excluded.version,
              create_revision = excluded.create_revision, mod_revision = excluded.mod_revision,
              expires_at = excluded.expires_at, deleted = excluded.deleted, session = excluded.session,
              mod_time = excluded.mod_time
            """)
        saveStateRevision = try database.prepare(
            "INSERT INTO meta(name, value) VALUES ('state_revision', ?1) ON CONFLICT(name) DO UPDATE SET value = excluded.value")
        begin = try database.prepare("BEGIN IMMEDIATE")
        commitStatement = try database.prepare("COMMIT")
        rollbackStatement = try database.prepare("ROLLBACK")
    }

    private func loadMeta() throws(SQLiteError) {
        epoch = UInt64(bitPattern: try database.scalarInt("SELECT value FROM meta WHERE name = 'epoch'") ?? 0)
        compactedRevision = UInt64(try database.scalarInt("SELECT value FROM meta WHERE name = 'compacted_revision'") ?? 0)
        stateRevision = UInt64(try database.scalarInt("SELECT value FROM meta WHERE name = 'state_revision'") ?? 0)
        contentScope = try database.scalarInt("SELECT value FROM meta WHERE name = 'content_scope'").map { UInt64(bitPattern: $0) }
        let lastChange = UInt64(try database.scalarInt("SELECT \(LogPosition.revisionSQL("max(position)")) FROM change_log") ?? 0)
        headRevision = max(lastChange, compactedRevision)
        unsavedChanges = headRevision > stateRevision ? nil : []
        // A compaction interrupted by a crash or a stop is resumed (its target was announced).
        let finished = UInt64(try database.scalarInt("SELECT value FROM meta WHERE name = 'compaction_finished'") ?? Int64(compactedRevision))
        if finished < compactedRevision {
            compaction = CompactionRun(target: compactedRevision)
        }
    }

    // MARK: Writing

    /// Appends `changes` (one or more whole revisions, in order) in one transaction and updates
    /// the current state to match. Either all of them are durable when this returns, or none.
    /// - Throws: ``JournalError`` (`full`, `readOnly`, `io`); the journal is unchanged then.
    public func append(_ changes: [JournalChange]) throws(JournalError) {
        try append(contentsOf: [changes])
    }

    /// Appends the changes of every array in `chunks`, in order, in one transaction: whole
    /// revisions, split into arrays at any point (a writer's per-write arrays, say, so that
    /// they need not be copied into one). Either all of them are durable when this returns, or
    /// none.
    /// - Throws: ``JournalError`` (`full`, `readOnly`, `io`); the journal is unchanged then.
    public func append(contentsOf chunks: [[JournalChange]]) throws(JournalError) {
        guard let first = chunks.first(where: { !$0.isEmpty }) else { return }
        precondition(first[0].revision > headRevision, "revisions must increase")
        var last = first[0].revision
        for chunk in chunks.indices {
            if let final = chunks[chunk].last?.revision { last = final }
        }
        do throws(SQLiteError) {
            try begin.run()
            do throws(SQLiteError) {
                try changeLog.insert(contentsOf: chunks)
                try commitStatement.run()
            } catch {
                try? rollbackStatement.run()
                throw error
            }
        } catch {
            throw JournalError(error, while: "cannot append revision \(first[0].revision)")
        }
        headRevision = last
        if unsavedChanges != nil {
            for chunk in chunks.indices where !chunks[chunk].isEmpty {
                unsavedChanges!.append(chunks[chunk])
                for index in chunks[chunk].indices {
                    unsavedStateBytes += chunks[chunk][index].value.count + chunks[chunk][index].key.utf8.count
                }
            }
        }
        if headRevision - stateRevision >= stateCheckpointInterval || unsavedStateBytes >= stateCheckpointBytes {
            // Best effort: the changes above are committed whatever happens here, and a state
            // table that lags is caught up at the next checkpoint or at open.
            try? checkpointState()
        }
    }

    /// Brings the current-state table up to date with the change log, one row per key changed
    /// since the last checkpoint. The log is authoritative; this keeps start-up reads short.
    ///
    /// The changes this journal appended itself are written from memory, one row per key; after
    /// an open with a lagging state table the log since the last checkpoint is read back.
    public func checkpointState() throws(JournalError) {
        guard headRevision > stateRevision else { return }
        do {
            try inTransaction { () throws(SQLiteError) in
                if let unsavedChanges {
                    // Newest first: the first change seen of a key is its latest.
                    var saved = Set<String>()
                    for chunk in unsavedChanges.reversed() {
                        try chunk.withUnsafeBufferPointer { changes throws(SQLiteError) in
                            for index in changes.indices.reversed() where saved.insert(changes[index].key).inserted {
                                try saveState(changes[index])
                            }
                        }
                    }
                } else {
                    upsertState.bind(1, LogPosition.after(stateRevision).rowID)
                    try upsertState.run()
                }
                saveStateRevision.bind(1, headRevision)
                try saveStateRevision.run()
            }
        } catch {
            throw JournalError(error, while: "cannot update the state table")
        }
        stateRevision = headRevision
        unsavedChanges = []
        unsavedStateBytes = 0
    }

    /// Forgets the changes held for the next checkpoint: the state table holds them already.
    func resetUnsavedChanges() {
        unsavedChanges = []
        unsavedStateBytes = 0
    }

    func saveState(_ change: JournalChange) throws(SQLiteError) {
        let statement = upsertStateRow!
        statement.bind(3, change.version)
        statement.bind(4, change.createRevision)
        statement.bind(5, change.revision)
        statement.bind(6, change.expiresAtMilliseconds)
        statement.bind(7, change.kind == .put ? Int64(0) : Int64(1))
        statement.bind(9, change.timestampMilliseconds)
        try statement.borrowing(text: change.key, at: 1) { () throws(SQLiteError) in
            try statement.borrowing(blob: change.value, at: 2) { () throws(SQLiteError) in
                try statement.borrowing(blob: change.session, at: 8) { () throws(SQLiteError) in try statement.run() }
            }
        }
    }

    /// Runs `body` in one write transaction: committed if it returns, rolled back if it throws.
    func inTransaction(_ body: () throws(SQLiteError) -> Void) throws(SQLiteError) {
        try begin.run()
        do {
            try body()
            try commitStatement.run()
        } catch {
            try? rollbackStatement.run()
            throw error
        }
    }

    /// Parts per revision the log can hold (``LogPosition``).
    public static let maxPartsPerRevision: UInt32 = LogPosition.partsPerRevision

    // MARK: Reading

    /// Every key's current state, tombstones included, in key order.
    public func loadState() throws(JournalError) -> [JournalEntry] {
        var entries: [JournalEntry] = []
        try loadState { entries.append($0) }
        return entries
    }

    /// Calls `body` with each key's current state, in key order, tombstones included (after
    /// bringing the state table up to date), one at a time so that a large state is never
    /// held twice.
    public func loadState(_ body: (JournalEntry) -> Void) throws(JournalError) {
        try checkpointState()
        do {
            let statement = try database.prepare(
                "SELECT key, value, version, create_revision, mod_revision, expires_at, deleted, session, mod_time FROM state ORDER BY key")
            while try statement.step() {
                body(JournalEntry(
                    key: statement.text(0), value: statement.blob(1) ?? [], version: statement.uint(2),
                    createRevision: statement.uint(3), modRevision: statement.uint(4),
                    expiresAtMilliseconds: statement.uint(5), isDeleted: statement.int(6) != 0,
                    session: statement.blob(7) ?? [], modTimeMilliseconds: statement.uint(8)))
            }
            // The scan touched every page of the state through the memory map. Mapping the file
            // afresh takes those pages out of the daemon's resident memory; they stay in the
            // kernel's page cache.
            try database.execute("PRAGMA mmap_size = 0")
            try database.execute("PRAGMA mmap_size = \(Self.mappedBytes)")
        } catch {
            throw JournalError(error, while: "cannot read state")
        }
    }

    /// Changes with `from <= revision <= to`, for keys equal to `prefix` (`exact`) or starting
    /// with it, in revision order, at most about `limit` (whole revisions; at least one).
    /// - Returns: the changes and whether more follow after the last one's revision.
    public func changes(prefix: String, exact: Bool = false, from: UInt64, to: UInt64, limit: Int) throws(JournalError) -> (changes: [JournalChange], more: Bool) {
        guard from <= to else { return ([], false) }
        do {
            let filter: String
            if exact {
                filter = "key = ?3"
            } else if Journal.upperBound(prefix) != nil {
                filter = "key >= ?3 AND key < ?4"
            } else {
                filter = "?3 = ?3"  // every key; keeps ?3 bound like the other forms
            }
            let statement = try database.prepare("""
                SELECT position, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id
                FROM change_log WHERE position >= ?1 AND position < ?2 AND \(filter)
                ORDER BY position LIMIT ?5
                """)
            statement.bind(1, LogPosition(revision: from).rowID)
            statement.bind(2, LogPosition.after(to).rowID)
            statement.bind(3, prefix)
            if let upper = Journal.upperBound(prefix) { statement.bind(4, upper) }
            statement.bind(5, Int64(max(limit, 1)))
            var rows = try Journal.readChanges(statement)
            var more = false
            if rows.count >= max(limit, 1), let last = rows.last {
                more = true
                // Finish the last revision so a page never splits one.
                let rest = try database.prepare("""
                    SELECT position, parts, kind, key, value, version, create_revision, expires_at, timestamp, write_id
                    FROM change_log WHERE position > ?1 AND position < ?2 AND \(filter) ORDER BY position
                    """)
                rest.bind(1, LogPosition(revision: last.revision, part: last.part).rowID)
                rest.bind(2, LogPosition.after(last.revision).rowID)
                rest.bind(3, prefix)
                if let upper = Journal.upperBound(prefix) { rest.bind(4, upper) }
                rows += try Journal.readChanges(rest)
                if last.revision >= to { more = false }
            }
            return (rows, more)
        } catch {
            throw JournalError(error, while: "cannot read changes")
        }
    }

    private static func readChanges(_ statement: SQLiteStatement) throws(SQLiteError) -> [JournalChange] {
        var rows: [JournalChange] = []
        while try statement.step() {
            let position = LogPosition(rowID: statement.int(0))
            rows.append(JournalChange(
                revision: position.revision, part: position.part, parts: UInt32(statement.int(1)),
                kind: ChangeKind(rawValue: statement.int(2)) ?? .put, key: statement.text(3),
                value: statement.blob(4) ?? [], version: statement.uint(5), createRevision: statement.uint(6),
                expiresAtMilliseconds: statement.uint(7), timestampMilliseconds: statement.uint(8),
                writeID: statement.blob(9)))
        }
        return rows
    }

    /// The live keys under `prefix` as they were at `revision` (which must be at or above
    /// ``compactedRevision``), in key order after `startAfter`, at most `limit` (0: all).
    public func snapshot(prefix: String, at revision: UInt64, startAfter: String = "", limit: Int = 0) throws(JournalError) -> [JournalEntry] {
        do {
            let upper = Journal.upperBound(prefix) ?? "\u{7F}"
            // The latest change of each key at or below the revision; SQLite takes the bare
            // columns from the row that holds the max().
            let statement = try database.prepare("""
                SELECT key, value, version, create_revision, \(LogPosition.revisionSQL()), expires_at, kind, timestamp, max(position)
                FROM change_log WHERE key >= ?1 AND key < ?2 AND position < ?4
                GROUP BY key HAVING kind = 0 AND key > ?3
                ORDER BY key LIMIT ?5
                """)
            statement.bind(1, prefix)
            statement.bind(2, upper)
            statement.bind(3, startAfter)
            statement.bind(4, LogPosition.after(revision).rowID)
            statement.bind(5, Int64(limit > 0 ? limit : -1))
            var entries: [JournalEntry] = []
            while try statement.step() {
                entries.append(JournalEntry(
                    key: statement.text(0), value: statement.blob(1) ?? [], version: statement.uint(2),
                    createRevision: statement.uint(3), modRevision: statement.uint(4),
                    expiresAtMilliseconds: statement.uint(5), isDeleted: false, modTimeMilliseconds: statement.uint(7)))
            }
            return entries
        } catch {
            throw JournalError(error, while: "cannot read snapshot")
        }
    }

    /// The revision of the last change under `prefix` at or below `revision`, tombstones included
    /// (0 if none is retained).
    public func lastRevision(prefix: String, atOrBelow revision: UInt64) throws(JournalError) -> UInt64 {
        do {
            let upper = Journal.upperBound(prefix) ?? "\u{7F}"
            let statement = try database.prepare(
                "SELECT \(LogPosition.revisionSQL("max(position)")) FROM change_log WHERE key >= ?1 AND key < ?2 AND position < ?3")
            statement.bind(1, prefix)
            statement.bind(2, upper)
            statement.bind(3, LogPosition.after(revision).rowID)
            guard try statement.step(), !statement.isNull(0) else { return 0 }
            return statement.uint(0)
        } catch {
            throw JournalError(error, while: "cannot read prefix revision")
        }
    }

    /// Write ids recorded in the last `revisions` revisions with the revision each committed.
    public func recentWriteIDs(revisions: UInt64) throws(JournalError) -> [(writeID: [UInt8], revision: UInt64)] {
        do {
            let statement = try database.prepare(
                "SELECT write_id, \(LogPosition.revisionSQL()) FROM change_log WHERE position >= ?1 AND \(LogPosition.isFirstPartSQL()) AND write_id IS NOT NULL ORDER BY position")
            statement.bind(1, LogPosition.after(headRevision > revisions ? headRevision - revisions : 0).rowID)
            var result: [(writeID: [UInt8], revision: UInt64)] = []
            while try statement.step() {
                result.append((statement.blob(0) ?? [], statement.uint(1)))
            }
            return result
        } catch {
            throw JournalError(error, while: "cannot read write ids")
        }
    }

    /// The latest revision whose commit time is before `milliseconds` (Unix), or 0.
    public func lastRevision(before milliseconds: UInt64) throws(JournalError) -> UInt64 {
        do {
            let statement = try database.prepare(
                "SELECT \(LogPosition.revisionSQL()) FROM change_log WHERE timestamp < ?1 ORDER BY position DESC LIMIT 1")
            statement.bind(1, milliseconds)
            guard try statement.step() else { return 0 }
            return statement.uint(0)
        } catch {
            throw JournalError(error, while: "cannot read timestamps")
        }
    }

    /// Starts a consistent copy of the whole journal in a new SQLite file at `path`, which must
    /// not exist, made in steps by ``JournalBackup/step(pages:)``: a journal `beacond` can open
    /// in its place (restore: stop the daemon, put the copy where the journal was, without the
    /// old `-wal` and `-shm` files, start it).
    ///
    /// The copy holds everything this journal commits before its last step, under an epoch of
    /// its own: a daemon restored from it may lack revisions its clients saw, and a new epoch
    /// makes them resync rather than take its next revisions for ones they have. Steps use this
    /// journal's connection: they run on the thread that owns the journal, with no commit in
    /// flight.
    public func beginBackup(to path: String) throws(JournalError) -> JournalBackup {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw JournalError(code: .io, message: "cannot back up to \(path): the file exists")
        }
        var copyEpoch: UInt64
        repeat {
            copyEpoch = UInt64.random(in: 1...UInt64(Int64.max))
        } while copyEpoch == epoch
        do {
            return JournalBackup(journal: self, run: try SQLiteBackup(from: database, to: path), path: path, epoch: copyEpoch)
        } catch {
            try? FileManager.default.removeItem(atPath: path)
            throw JournalError(error, while: "cannot back up the journal")
        }
    }

    /// The file's size in bytes, write-ahead log included.
    public var sizeInBytes: UInt64 {
        // stat(2) directly: FileManager's attributes also look up the owner's user and group
        // names, reading /etc/passwd and /etc/group each time, and the daemon asks every heartbeat.
        func size(_ file: String) -> UInt64 {
            var info = stat()
            return stat(file, &info) == 0 ? UInt64(info.st_size) : 0
        }
        return size(path) + size(path + "-wal")
    }

    // MARK: Helpers

    /// Upper bound of a key range for `prefix` (keys never contain 0x7F), `nil` for all keys.
    static func upperBound(_ prefix: String) -> String? {
        prefix.isEmpty ? nil : prefix + "\u{7F}"
    }

    /// Wall-clock time in Unix milliseconds.
    public static func nowMilliseconds() -> UInt64 {
        UInt64(Date().timeIntervalSince1970 * 1000)
    }
}
