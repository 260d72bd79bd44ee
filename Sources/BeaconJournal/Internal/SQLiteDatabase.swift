internal import CBeaconSQLite

/// A copy of a database under way, made with SQLite's online backup API in steps of a few pages.
///
/// It uses the source connection, so the thread that uses that connection steps it, and never
/// while another thread writes through the connection. Writes through the source connection
/// between steps are carried into the copy by SQLite as they are made: the finished copy holds
/// everything committed through the source connection before its last step. A copy that is
/// dropped before it is done is left incomplete; its owner deletes the file.
final class SQLiteBackup {
    private let destination: SQLiteDatabase
    private var handle: OpaquePointer?

    /// Starts a copy of `source` into a new database at `path`.
    init(from source: SQLiteDatabase, to path: String) throws(SQLiteError) {
        destination = try SQLiteDatabase(path: path, create: true)
        guard let handle = sqlite3_backup_init(destination.handle, "main", source.handle, "main") else {
            throw destination.error(sqlite3_errcode(destination.handle), "start the backup to \(path)")
        }
        self.handle = handle
    }

    deinit { finish() }

    /// Copies up to `pages` more pages (-1: all that remain).
    /// - Returns: whether the copy is complete (and closed).
    func step(pages: Int32) throws(SQLiteError) -> Bool {
        guard let handle else { return true }
        let stepped = sqlite3_backup_step(handle, pages)
        switch stepped {
        case SQLITE_OK, SQLITE_BUSY, SQLITE_LOCKED:
            return false  // more to copy; a lock held elsewhere is waited out by stepping again
        case SQLITE_DONE:
            self.handle = nil
            let finished = sqlite3_backup_finish(handle)
            destination.close()
            guard finished == SQLITE_OK else { throw destination.error(finished, "finish the copy to \(destination.path)") }
            return true
        default:
            finish()
            throw destination.error(stepped, "copy to \(destination.path)")
        }
    }

    /// The copy's progress: pages left and pages in all, as of the last step.
    var pages: (remaining: Int, total: Int) {
        guard let handle else { return (0, 0) }
        return (Int(sqlite3_backup_remaining(handle)), Int(sqlite3_backup_pagecount(handle)))
    }

    /// Ends the copy where it stands. Idempotent.
    func finish() {
        guard let handle else { return }
        sqlite3_backup_finish(handle)
        self.handle = nil
        destination.close()
    }
}

/// One SQLite connection. Not thread-safe: one thread uses it at a time.
final class SQLiteDatabase {
    private(set) var handle: OpaquePointer?
    let path: String

    /// Opens (creating if asked) the database at `path`.
    init(path: String, create: Bool = true, readOnly: Bool = false) throws(SQLiteError) {
        self.path = path
        var flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
        flags |= readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE
        if create && !readOnly { flags |= SQLITE_OPEN_CREATE }
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        if rc != SQLITE_OK {
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_close_v2(db)
            throw SQLiteError(code: rc, message: message, operation: "open \(path)")
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
    }

    deinit { close() }

    /// Closes the connection; statements still alive are finalized by SQLite lazily. Idempotent.
    func close() {
        guard let handle else { return }
        sqlite3_close_v2(handle)
        self.handle = nil
    }

    func error(_ code: Int32, _ operation: @autoclosure () -> String) -> SQLiteError {
        let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
        return SQLiteError(code: code, message: message, operation: operation())
    }

    /// Runs one or more statements that return no rows.
    func execute(_ sql: String) throws(SQLiteError) {
        var messagePointer: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &messagePointer)
        if rc != SQLITE_OK {
            let message = messagePointer.map { String(cString: $0) } ?? String(cString: sqlite3_errstr(rc))
            sqlite3_free(messagePointer)
            throw SQLiteError(code: rc, message: message, operation: sql)
        }
    }

    /// Prepares a statement to run many times.
    func prepare(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
        var statement: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard rc == SQLITE_OK, let statement else { throw error(rc, sql) }
        return SQLiteStatement(statement, database: self, sql: sql)
    }

    /// The single integer the query returns, or `nil` for no row or NULL.
    func scalarInt(_ sql: String) throws(SQLiteError) -> Int64? {
        let statement = try prepare(sql)
        guard try statement.step(), !statement.isNull(0) else { return nil }
        return statement.int(0)
    }

    /// The single text the query returns, or `nil` for no row or NULL.
    func scalarText(_ sql: String) throws(SQLiteError) -> String? {
        let statement = try prepare(sql)
        guard try statement.step(), !statement.isNull(0) else { return nil }
        return statement.text(0)
    }

    /// Rows changed by the last statement.
    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Whether a transaction is open.
    var inTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }
}

/// A prepared statement. Binding indexes start at 1, column indexes at 0.
final class SQLiteStatement {
    private let statement: OpaquePointer
    private unowned let database: SQLiteDatabase
    let sql: String

    init(_ statement: OpaquePointer, database: SQLiteDatabase, sql: String) {
        self.statement = statement
        self.database = database
        self.sql = sql
    }

    deinit { sqlite3_finalize(statement) }

    /// Resets the statement and clears its bindings, ready for new values.
    func reset() {
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
    }

    func bind(_ index: Int32, _ value: Int64) { sqlite3_bind_int64(statement, index, value) }
    func bind(_ index: Int32, _ value: UInt64) { sqlite3_bind_int64(statement, index, Int64(bitPattern: value)) }
    func bind(_ index: Int32, _ value: Int) { sqlite3_bind_int64(statement, index, Int64(value)) }
    func bind(_ index: Int32, _ value: Double) { sqlite3_bind_double(statement, index, value) }
    func bind(_ index: Int32, _ value: String) {
        sqlite3_bind_text(statement, index, value, -1, cbeacon_sqlite_transient())
    }
    func bind(_ index: Int32, blob: [UInt8]?) {
        guard let blob else { sqlite3_bind_null(statement, index); return }
        blob.withUnsafeBytes { buffer in
            // A zero-length blob must still be a blob, not NULL.
            _ = sqlite3_bind_blob(statement, index, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count), cbeacon_sqlite_transient())
        }
    }
    func bindNull(_ index: Int32) { sqlite3_bind_null(statement, index) }

    /// Binds `text` without copying it and calls `body`, which runs the statement while the
    /// bytes are valid (SQLite would otherwise copy every text and blob it is given).
    func borrowing(text: String, at index: Int32, _ body: () throws(SQLiteError) -> Void) throws(SQLiteError) {
        var text = text
        try text.withUTF8 { utf8 in
            // A zero-length text must still be text, not NULL.
            let base = UnsafeRawPointer(utf8.baseAddress ?? UnsafePointer(bitPattern: 1)!).assumingMemoryBound(to: CChar.self)
            sqlite3_bind_text(statement, index, base, Int32(utf8.count), nil)  // nil: SQLITE_STATIC
            return Result { () throws(SQLiteError) in try body() }
        }.get()
    }

    /// Binds `blob` (NULL for `nil`) without copying it and calls `body`, which runs the
    /// statement while the bytes are valid.
    func borrowing(blob: [UInt8]?, at index: Int32, _ body: () throws(SQLiteError) -> Void) throws(SQLiteError) {
        guard let blob else {
            sqlite3_bind_null(statement, index)
            return try body()
        }
        try blob.withUnsafeBytes { buffer in
            sqlite3_bind_blob(statement, index, buffer.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(buffer.count), nil)
            return Result { () throws(SQLiteError) in try body() }
        }.get()
    }

    /// Binds `count` bytes at `bytes` as text (or a blob) without copying them: they must stay
    /// valid and unchanged until the statement is next bound there or finalized.
    func bindStatic(text bytes: UnsafeRawPointer, count: Int, at index: Int32) {
        sqlite3_bind_text(statement, index, bytes.assumingMemoryBound(to: CChar.self), Int32(count), nil)
    }
    /// See ``bindStatic(text:count:at:)``.
    func bindStatic(blob bytes: UnsafeRawPointer, count: Int, at index: Int32) {
        sqlite3_bind_blob(statement, index, bytes, Int32(count), nil)
    }

    /// Runs the statement to completion and resets it, keeping its bindings for the next run.
    func runKeepingBindings() throws(SQLiteError) {
        defer { sqlite3_reset(statement) }
        while try step() {}
    }

    /// Advances to the next row. - Returns: `true` for a row, `false` when done.
    @discardableResult
    func step() throws(SQLiteError) -> Bool {
        let rc = sqlite3_step(statement)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let error = database.error(rc, sql)
        sqlite3_reset(statement)
        throw error
    }

    /// Runs the statement to completion and resets it.
    func run() throws(SQLiteError) {
        defer { reset() }
        while try step() {}
    }

    func isNull(_ column: Int32) -> Bool { sqlite3_column_type(statement, column) == SQLITE_NULL }
    func int(_ column: Int32) -> Int64 { sqlite3_column_int64(statement, column) }
    func uint(_ column: Int32) -> UInt64 { UInt64(bitPattern: sqlite3_column_int64(statement, column)) }
    func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(statement, column) else { return "" }
        return String(cString: pointer)
    }
    func blob(_ column: Int32) -> [UInt8]? {
        guard sqlite3_column_type(statement, column) != SQLITE_NULL else { return nil }
        let count = Int(sqlite3_column_bytes(statement, column))
        guard count > 0, let pointer = sqlite3_column_blob(statement, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
