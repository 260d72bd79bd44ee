#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)
import BeaconLocking
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2Posix
import GRPCProtobuf

/// A client of an etcd cluster's v3 API: the calls Beacon's fronts make, each sent to one member
/// and, when that member cannot answer (down, frozen, or without a leader), to the next.
///
/// Every call asks for a member with a leader (etcd's `hasleader` metadata), so that a member cut
/// off from its quorum refuses at once instead of waiting: when no member has a leader for about
/// a second (``refusalPatience``: an election finishes in less), a call fails with `.unavailable`.
/// A member that takes longer than ``attemptTimeout`` to answer (its leader may have died) is
/// left for the next. A call that may change state
/// (`txn`, `leaseRevoke`, …) is tried on one member only unless the caller says it is safe to
/// repeat (`idempotent`): its error then says it may have been applied.
///
/// Thread-safe. Owns its connections to every member, on NIO's shared event loop threads;
/// ``close()`` ends them.
package final class EtcdClient: Sendable {
    package typealias Transport = HTTP2ClientTransport.Posix

    /// One member: connections for calls, replaced as etcd's pings would close them (see
    /// ``RotatingConnection``), and one for watches, whose requests are few (a progress request
    /// per interval).
    private struct Member: Sendable {
        let endpoint: EtcdEndpoint
        let calls: RotatingConnection
        let streams: GRPCClient<Transport>
    }

    private let members: [Member]
    /// The member tried first: the last one that answered.
    private let preferred = Locked(0)
    /// The tasks running the watch connections; nil once closed.
    private let streamConnections: Locked<[Task<Void, Never>]?>
    /// How long a call may take in all, over every member it tries.
    package let callTimeout: Duration
    /// How long one member has first to answer one idempotent call before the next is tried:
    /// well below etcd's election time, so that a call sent to a member whose leader just died
    /// (it waits for a leader that will not answer) moves on soon after the others elected a
    /// new one. After a round in which every member ran out of time (etcd is slow, not gone),
    /// each has twice as long in the next.
    package let attemptTimeout: Duration

    private static let leaderRequired: Metadata = ["hasleader": "true"]

    /// Connects (lazily) to every endpoint.
    /// - Parameters:
    ///   - endpoints: the members' client addresses; at least one.
    ///   - tls: certificate files for `https://` endpoints.
    ///   - callTimeout: how long a call may take over every member it tries.
    ///   - attemptTimeout: how long one member has to answer an idempotent call before the next
    ///     is tried (a call that is not idempotent has the whole `callTimeout`).
    /// - Throws: ``EtcdError`` (`.invalidConfiguration`) when a transport cannot be made.
    package init(endpoints: [EtcdEndpoint], tls: EtcdTLSFiles = EtcdTLSFiles(),
                 callTimeout: Duration = .seconds(5), attemptTimeout: Duration = .milliseconds(500)) throws(EtcdError) {
        precondition(!endpoints.isEmpty, "an etcd client needs an endpoint")
        var members: [Member] = []
        do {
            for endpoint in endpoints {
                let security = Self.security(endpoint, tls)
                @Sendable func connection() throws -> GRPCClient<Transport> {
                    let target: any ResolvableTarget = switch endpoint.address {
                    case .tcp(let host, let port): .dns(host: host, port: port)
                    case .unixSocket(let path): .unixDomainSocket(path: path)
                    }
                    return GRPCClient(transport: try Transport(target: target, transportSecurity: security,
                                                        config: .defaults { $0.backoff.max = .seconds(1) }))
                }
                members.append(Member(endpoint: endpoint, calls: try RotatingConnection(open: connection), streams: try connection()))
            }
        } catch {
            throw EtcdError(.invalidConfiguration, "cannot set up the etcd client: \(error)")
        }
        self.members = members
        self.callTimeout = callTimeout
        self.attemptTimeout = min(attemptTimeout, callTimeout)
        streamConnections = Locked(members.map { member in Task { try? await member.streams.runConnections() } })
    }

    /// TLS for a secure endpoint: the member's certificate checked against the authority (and,
    /// over tcp, against the host's name; a Unix socket has none, its path names the member).
    private static func security(_ endpoint: EtcdEndpoint, _ files: EtcdTLSFiles) -> Transport.TransportSecurity {
        guard endpoint.isSecure else { return .plaintext }
        let roots: TLSConfig.TrustRootsSource = files.authorityPath.map { .certificates([.file(path: $0, format: .pem)]) }
            ?? .systemDefault
        let verification: TLSConfig.CertificateVerification = switch endpoint.address {
        case .tcp: .fullVerification
        case .unixSocket: .noHostnameVerification
        }
        if let certificate = files.certificatePath, let key = files.keyPath {
            return .mTLS(certificateChain: [.file(path: certificate, format: .pem)], privateKey: .file(path: key, format: .pem)) {
                $0.trustRoots = roots
                $0.serverCertificateVerification = verification
            }
        }
        return .tls {
            $0.trustRoots = roots
            $0.serverCertificateVerification = verification
        }
    }

    deinit { close() }

    /// Ends every connection; later calls fail with `.closed`. Idempotent.
    package func close() {
        guard let tasks = streamConnections.withLock({ tasks in defer { tasks = nil }; return tasks }) else { return }
        for member in members {
            member.calls.close()
            member.streams.beginGracefulShutdown()
        }
        for task in tasks { task.cancel() }
    }

    /// The endpoints, in the order given.
    package var endpoints: [EtcdEndpoint] { members.map(\.endpoint) }

    // MARK: Calls

    /// Reads keys (`Range`).
    package func range(_ request: Etcdserverpb_RangeRequest) async throws(EtcdError) -> Etcdserverpb_RangeResponse {
        try await call("range", idempotent: true) { grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).range(request, metadata: Self.leaderRequired, options: options)
        }
    }

    /// Runs a transaction (`Txn`).
    /// - Parameter idempotent: whether applying it twice does no harm (it compares something its
    ///   own success changes): it is then tried on the next member when one cannot answer.
    package func txn(_ request: Etcdserverpb_TxnRequest, idempotent: Bool) async throws(EtcdError) -> Etcdserverpb_TxnResponse {
        try await call("txn", idempotent: idempotent) { grpc, options in
            try await Etcdserverpb_KV.Client(wrapping: grpc).txn(request, metadata: Self.leaderRequired, options: options)
        }
    }

    /// Compacts etcd's history through `revision`. History compacted through it already (by
    /// another, or by this call on a member that answered too late) is not an error.
    package func compact(through revision: Int64) async throws(EtcdError) {
        do {
            _ = try await call("compact", idempotent: true) { grpc, options in
                try await Etcdserverpb_KV.Client(wrapping: grpc).compact(.with { $0.revision = revision },
                                                                         metadata: Self.leaderRequired, options: options)
            }
        } catch where error.code == .compacted {
            return
        }
    }

    /// Grants a lease of `seconds` (etcd may raise it to its minimum). Tried on the next member
    /// when one cannot answer: a lease granted by a call whose answer was lost runs out unused.
    /// - Returns: the lease's id and its time to live in seconds.
    package func grantLease(seconds: Int64) async throws(EtcdError) -> (id: Int64, seconds: Int64) {
        let reply = try await call("lease grant", idempotent: true) { grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseGrant(.with { $0.ttl = seconds },
                                                                           metadata: Self.leaderRequired, options: options)
        }
        guard reply.error.isEmpty else { throw EtcdError(.rejected, "etcd granted no lease: \(reply.error)") }
        return (reply.id, reply.ttl)
    }

    /// Ends a lease, deleting its keys in one revision. A lease already gone is not an error.
    package func revokeLease(_ id: Int64) async throws(EtcdError) {
        do {
            _ = try await call("lease revoke", idempotent: true) { grpc, options in
                try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseRevoke(.with { $0.id = id },
                                                                                metadata: Self.leaderRequired, options: options)
            }
        } catch where error.code == .rejected && error.message.contains("lease not found") {
            return
        }
    }

    /// Renews a lease once.
    /// - Returns: its time to live in seconds from now; 0 when it is gone.
    package func renewLease(_ id: Int64) async throws(EtcdError) -> Int64 {
        try await call("lease keep-alive", idempotent: true) { grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseKeepAlive(metadata: Self.leaderRequired, options: options) { writer in
                try await writer.write(.with { $0.id = id })
            } onResponse: { response in
                for try await reply in response.messages { return reply.ttl }
                throw RPCError(code: .unavailable, message: "the keep-alive stream ended without an answer")
            }
        }
    }

    /// A lease's time left and the keys attached to it.
    /// - Returns: seconds left (-1 when the lease is gone) and the keys.
    package func leaseTimeToLive(_ id: Int64) async throws(EtcdError) -> (seconds: Int64, keys: [Data]) {
        let reply = try await call("lease time-to-live", idempotent: true) { grpc, options in
            try await Etcdserverpb_Lease.Client(wrapping: grpc).leaseTimeToLive(.with { $0.id = id; $0.keys = true },
                                                                                metadata: Self.leaderRequired, options: options)
        }
        return (reply.ttl, reply.keys)
    }

    /// The answering member's status: its cluster id, the leader, its revision.
    package func status() async throws(EtcdError) -> Etcdserverpb_StatusResponse {
        try await call("status", idempotent: true) { grpc, options in
            try await Etcdserverpb_Maintenance.Client(wrapping: grpc).status(.init(), metadata: Self.leaderRequired, options: options)
        }
    }

    /// Sends `body` to the preferred member, and on to the next while they cannot answer (for
    /// an idempotent call: each member in turn, round and round, each for at most
    /// ``attemptTimeout`` — twice as long after a round in which every member ran out of time —
    /// until ``callTimeout`` has passed, or for ``refusalPatience`` while every member refuses at
    /// once; a pause of 100 ms after each round lets connections reopen and elections finish);
    /// remembers the one that answered.
    private func call<Response: Sendable>(
        _ what: String, idempotent: Bool,
        _ body: @Sendable (GRPCClient<Transport>, CallOptions) async throws -> Response
    ) async throws(EtcdError) -> Response {
        let deadline = ContinuousClock.now + callTimeout
        var options = CallOptions.defaults
        let first = preferred.withLock { $0 }
        var failures: [String] = []
        var attempt = 0
        var patience = attemptTimeout
        // In the round under way: whether every member ran out of time, whether every one refused at once.
        var everyOneTimedOut = true
        var everyOneRefused = true
        var refusedSince: ContinuousClock.Instant?
        while true {
            if attempt > 0 && attempt % members.count == 0 {
                if everyOneTimedOut { patience *= 2 }
                if everyOneRefused {
                    refusedSince = refusedSince ?? .now
                    if ContinuousClock.now - refusedSince! >= Self.refusalPatience { break }
                } else {
                    refusedSince = nil
                }
                (everyOneTimedOut, everyOneRefused) = (true, true)
                try? await Task.sleep(for: .milliseconds(100))
            }
            let left = deadline - ContinuousClock.now
            guard left > .zero || attempt == 0 else { break }
            let index = (first + attempt) % members.count
            let member = members[index]
            options.timeout = idempotent ? min(patience, left) : left
            attempt += 1
            let sent = ContinuousClock.now
            do {
                guard let response = try await member.calls.withClient({ try await body($0, options) }) else {
                    throw EtcdError(.closed, "the etcd client was closed")
                }
                preferred.withLock { $0 = index }
                return response
            } catch {
                let failure = Self.classify(error)
                guard failure.code == .unavailable else { throw failure }
                if ContinuousClock.now - sent < patience { everyOneTimedOut = false } else { everyOneRefused = false }
                if failures.count < 2 * members.count { failures.append("\(member.endpoint): \(failure.message)") }
                rotate(awayFrom: index)
                if !idempotent {
                    throw EtcdError(.unavailable, "etcd \(what) got no answer (\(failures.joined(separator: "; "))): it may or may not have been applied")
                }
            }
        }
        throw EtcdError(.unavailable, "no etcd member answered the \(what) (\(failures.joined(separator: "; ")))")
    }

    /// How long a call goes on while every member refuses it at once (none has a leader, or none
    /// can be reached): long enough for candidates to finish an election, short enough that a
    /// cluster without a quorum is reported in about a second.
    static let refusalPatience: Duration = .seconds(1)

    /// The member a stream goes to, and its index; nil once closed.
    func watchMember() -> (Int, GRPCClient<Transport>)? {
        guard streamConnections.withLock({ $0 != nil }) else { return nil }
        let index = preferred.withLock { $0 }
        return (index, members[index].streams)
    }

    /// The member at `index` could not answer: the next call starts at the one after it.
    func rotate(awayFrom index: Int) {
        preferred.withLock { if $0 == index { $0 = (index + 1) % members.count } }
    }

    /// etcd's and gRPC's errors as ``EtcdError``s.
    static func classify(_ error: any Error) -> EtcdError {
        if let error = error as? EtcdError { return error }
        guard let error = error as? RPCError else { return EtcdError(.unavailable, "\(error)") }
        switch error.code {
        case .unavailable, .deadlineExceeded, .aborted, .resourceExhausted, .unknown, .internalError:
            return EtcdError(.unavailable, error.message.isEmpty ? "\(error.code)" : error.message)
        case .cancelled:
            return EtcdError(.closed, "the call was cancelled")
        case .outOfRange where error.message.contains("compacted"):
            return EtcdError(.compacted, error.message)
        default:
            return EtcdError(.rejected, "etcd refused: \(error.message) (\(error.code))")
        }
    }
}
#endif
