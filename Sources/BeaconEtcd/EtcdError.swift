#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)
/// What went wrong talking to etcd.
package struct EtcdError: Error, Sendable, CustomStringConvertible {
    package enum Code: Sendable, Hashable {
        /// No member answered in time, or none had a leader (quorum lost): nothing was decided,
        /// or — for a write — it may have been applied. Retry.
        case unavailable
        /// The revision asked for was compacted away; `compactedRevision` says to where.
        case compacted
        /// etcd refused the request itself (too large, malformed, a lease that is gone).
        case rejected
        /// The client was closed.
        case closed
        /// An endpoint or TLS file is wrong.
        case invalidConfiguration
    }

    package var code: Code
    package var message: String
    /// For `.compacted`: etcd's compacted revision, when etcd said it.
    package var compactedRevision: Int64

    package init(_ code: Code, _ message: String, compactedRevision: Int64 = 0) {
        self.code = code
        self.message = message
        self.compactedRevision = compactedRevision
    }

    package var description: String { message }
}
#endif
