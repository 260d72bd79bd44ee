internal import CBeaconSQLite

/// An error reported by SQLite: its result code, message and the statement concerned.
public struct SQLiteError: Error, Equatable, Sendable, CustomStringConvertible {
    /// SQLite's (extended) result code, such as 5 for `SQLITE_BUSY`.
    public var code: Int32
    /// SQLite's message for the failure.
    public var message: String
    /// The SQL or operation that failed.
    public var operation: String

    /// Creates an error.
    public init(code: Int32, message: String, operation: String) {
        self.code = code
        self.message = message
        self.operation = operation
    }

    /// The primary result code (the low byte of an extended one).
    public var primaryCode: Int32 { code & 0xFF }

    /// The database is locked by another connection or process.
    public var isBusy: Bool { primaryCode == SQLITE_BUSY || primaryCode == SQLITE_LOCKED }
    /// The disk or quota is full.
    public var isFull: Bool { primaryCode == SQLITE_FULL }
    /// The file or its directory cannot be written.
    public var isReadOnly: Bool { primaryCode == SQLITE_READONLY || primaryCode == SQLITE_PERM || primaryCode == SQLITE_CANTOPEN }
    /// The file is not a database or is damaged.
    public var isCorrupt: Bool { primaryCode == SQLITE_CORRUPT || primaryCode == SQLITE_NOTADB }

    public var description: String { "\(operation): \(message) (SQLite code \(code))" }
}
