/// Why the daemon could not start or keep running.
public struct DaemonError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure; `beacond` maps each to an exit code.
    public struct Code: Hashable, Sendable {
        public let name: String
        /// Directories, sockets or configuration could not be set up.
        public static let startup = Code(name: "startup")
        /// Another daemon holds the runtime directory or the journal.
        public static let alreadyRunning = Code(name: "already running")
        /// The journal cannot be opened.
        public static let journal = Code(name: "journal")
    }

    /// The kind of failure.
    public var code: Code
    /// What went wrong, for a person.
    public var message: String
    /// The error underneath, if any.
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    public var description: String { message }
}
