/// Why the journal could not do what was asked.
public struct JournalError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure, for callers that react differently to each.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        /// Another process holds the journal (a second daemon on the same state directory).
        public static let locked = Code(name: "locked")
        /// The file or its directory cannot be written.
        public static let readOnly = Code(name: "read-only")
        /// The disk is full.
        public static let full = Code(name: "disk full")
        /// The file is not a Beacon journal or is damaged.
        public static let corrupt = Code(name: "corrupt")
        /// The journal was written by a newer Beacon with a schema this one does not know.
        public static let schemaTooNew = Code(name: "schema too new")
        /// Any other I/O or SQLite failure.
        public static let io = Code(name: "I/O error")
        public var description: String { name }
    }

    /// The kind of failure.
    public var code: Code
    /// What went wrong, for a person.
    public var message: String
    /// The SQLite error underneath, if any.
    public var underlying: SQLiteError?

    /// Creates an error.
    public init(code: Code, message: String, underlying: SQLiteError? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    init(_ error: SQLiteError, while doing: String) {
        let code: Code = error.isBusy ? .locked : error.isFull ? .full : error.isReadOnly ? .readOnly
            : error.isCorrupt ? .corrupt : .io
        self.init(code: code, message: "\(doing): \(error.message)", underlying: error)
    }

    public var description: String { "journal \(code): \(message)" }
}
