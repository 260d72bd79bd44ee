import BeaconProtocol

/// Why the daemon refuses a request, in its own terms: validation, the access rules, the limits
/// and the store decide refusals as these; ``wire`` is the one place they become the protocol's
/// `Error` (proto/PROTOCOL.md §4.3).
struct Refusal: Error {
    enum Code: CaseIterable {
        case malformed, unknownRequest, invalidKey, invalidValue, valueTooLarge, notFound, versionConflict, alreadyExists
        case compacted, futureRevision, tooManyOperations, readOnly, invalidArgument, `internal`
        case permissionDenied, rateLimited, quotaExceeded, upstreamUnavailable
    }

    var code: Code
    var message: String
    /// The key concerned, if any.
    var key = ""
    /// Which operation of a transaction was refused.
    var operationIndex: UInt32 = 0
    /// `versionConflict`, `alreadyExists`: the key's version now.
    var currentVersion: UInt64 = 0
    /// `compacted`: how far history was compacted.
    var compactedRevision: UInt64 = 0
    /// `rateLimited`: when the peer may write again.
    var retryAfterMilliseconds: UInt32 = 0

    init(_ code: Code, _ message: String, key: String = "") {
        self.code = code
        self.message = message
        self.key = key
    }

    /// The protocol's `Error` for this refusal, decided against the state at `headRevision`.
    func wire(headRevision: UInt64) -> Beacon_V1_Error {
        var error = Beacon_V1_Error()
        error.code = Self.wireCode(code)
        error.message = message
        error.key = key
        error.opIndex = operationIndex
        error.currentVersion = currentVersion
        error.compactedRevision = compactedRevision
        error.retryAfterMs = retryAfterMilliseconds
        error.headRevision = headRevision
        return error
    }

    static func wireCode(_ code: Code) -> Beacon_V1_Error.Code {
        switch code {
        case .malformed: .malformed
        case .unknownRequest: .unknownRequest
        case .invalidKey: .invalidKey
        case .invalidValue: .invalidValue
        case .valueTooLarge: .valueTooLarge
        case .notFound: .notFound
        case .versionConflict: .versionConflict
        case .alreadyExists: .alreadyExists
        case .compacted: .compacted
        case .futureRevision: .futureRevision
        case .tooManyOperations: .tooManyOperations
        case .readOnly: .readOnly
        case .invalidArgument: .invalidArgument
        case .internal: .internal
        case .permissionDenied: .permissionDenied
        case .rateLimited: .rateLimited
        case .quotaExceeded: .quotaExceeded
        case .upstreamUnavailable: .upstreamUnavailable
        }
    }
}
