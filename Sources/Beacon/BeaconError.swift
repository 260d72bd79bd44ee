import BeaconProtocol

/// Why a Beacon client operation failed.
///
/// `code` says what went wrong in a way a program can act on; `message` says it for a person.
/// Errors the daemon returned carry its code (`versionConflict`, `notFound`, …); errors of the
/// client itself are `unreachable`, `typeMismatch`, `encoding` and `closed`.
public struct BeaconError: Error, Sendable, CustomStringConvertible {
    /// A kind of failure.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// A short name, such as `version-conflict`.
        public let name: String

        init(_ name: String) { self.name = name }

        /// The key or prefix is not valid (proto/PROTOCOL.md §3.1).
        public static let invalidKey = Code("invalid-key")
        /// The value is not valid (missing, nested too deep).
        public static let invalidValue = Code("invalid-value")
        /// The encoded value exceeds the daemon's limit.
        public static let valueTooLarge = Code("value-too-large")
        /// The key does not exist.
        public static let notFound = Code("not-found")
        /// A compare-and-set found another version (`currentVersion`).
        public static let versionConflict = Code("version-conflict")
        /// A create-only write found the key existing (`currentVersion`).
        public static let alreadyExists = Code("already-exists")
        /// History before the requested revision was compacted.
        public static let compacted = Code("compacted")
        /// The daemon cannot write its journal now; reads still work.
        public static let readOnly = Code("read-only")
        /// The daemon's access policy does not let this process do this, or refuses its
        /// connection altogether (no rule admits its uid or CURVE key; a write fails at once).
        public static let permissionDenied = Code("permission-denied")
        /// This process wrote faster than the daemon's limit for it; `retryAfter` says when to retry.
        public static let rateLimited = Code("rate-limited")
        /// A limit on keys per writer or on the journal's size was reached.
        public static let quotaExceeded = Code("quota-exceeded")
        /// The daemon is a relay that cannot reach its upstream: the write was not applied, or
        /// (when its answer was lost) may have been; the client retries it with its write id.
        public static let upstreamUnavailable = Code("upstream-unavailable")
        /// The request was refused for another reason the daemon named.
        public static let rejected = Code("rejected")
        /// The daemon did not answer in time; a write may or may not have been committed.
        public static let unreachable = Code("unreachable")
        /// A value from the daemon does not decode as the Swift type asked for.
        public static let typeMismatch = Code("type-mismatch")
        /// A Swift value could not be encoded as a Beacon value.
        public static let encoding = Code("encoding")
        /// The client was closed.
        public static let closed = Code("closed")
        /// The local journal cannot be opened or written.
        public static let localJournal = Code("local-journal")

        public var description: String { name }
    }

    /// What went wrong.
    public var code: Code
    /// What went wrong, for a person.
    public var message: String
    /// The key concerned, if any.
    public var key: String?
    /// For `versionConflict` and `alreadyExists`: the key's version at the daemon.
    public var currentVersion: UInt64?
    /// For a failed transaction: the index of the operation that failed.
    public var operationIndex: Int?
    /// For `rateLimited`: how long to wait before writing again.
    public var retryAfter: Duration?
    /// The error underneath (a `DecodingError`, an `EncodingError`), if any.
    public var underlying: (any Error & Sendable)?

    /// Creates an error.
    public init(_ code: Code, _ message: String, key: String? = nil, underlying: (any Error & Sendable)? = nil) {
        self.code = code
        self.message = message
        self.key = key
        self.underlying = underlying
    }

    public var description: String { "\(code): \(message)" }

    /// The client's error for a daemon's error reply.
    init(reply error: Beacon_V1_Error, operationCount: Int) {
        let code: Code = switch error.code {
        case .invalidKey: .invalidKey
        case .invalidValue: .invalidValue
        case .valueTooLarge: .valueTooLarge
        case .notFound: .notFound
        case .versionConflict: .versionConflict
        case .alreadyExists: .alreadyExists
        case .compacted: .compacted
        case .readOnly: .readOnly
        case .permissionDenied: .permissionDenied
        case .rateLimited: .rateLimited
        case .quotaExceeded: .quotaExceeded
        case .upstreamUnavailable: .upstreamUnavailable
        default: .rejected
        }
        self.init(code, error.message, key: error.key.isEmpty ? nil : error.key)
        if code == .versionConflict || code == .alreadyExists { currentVersion = error.currentVersion }
        if operationCount > 1 { operationIndex = Int(error.opIndex) }
        if code == .rateLimited { retryAfter = .milliseconds(error.retryAfterMs) }
    }
}
