#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)
import BeaconLocking
import GRPCCore
import GRPCNIOTransportHTTP2Posix

/// One member's connection for calls, replaced by a fresh one every ``callsPerConnection`` calls.
///
/// etcd's gRPC server (grpc-go) pings its client once for every burst of requests it receives,
/// to estimate the connection's bandwidth-delay product, and swift-nio-http2 closes a connection
/// whose peer sends more than 200 control frames in 30 seconds (`ENHANCE_YOUR_CALM`); the limit
/// is not configurable through grpc-swift-nio-transport. A call in flight on such a connection
/// loses its answer. So no connection carries more calls than etcd may ping for: the next call
/// after the budget opens a new connection, and the old one is shut down once its last call has
/// its answer.
///
/// Thread-safe. Owns its connections and the tasks that run them.
final class RotatingConnection: Sendable {
    typealias Client = GRPCClient<HTTP2ClientTransport.Posix>

    /// Calls per connection: etcd pings at most once per request, and the connection's own
    /// set-up (`SETTINGS` both ways) counts too, so this leaves room below swift-nio-http2's 200.
    static let callsPerConnection = 150

    /// A connection and the calls started on it.
    private struct Connection {
        let client: Client
        let runner: Task<Void, Never>
        var started = 0
        var inFlight = 0
    }

    private struct State {
        var current: Connection
        /// The connection each number names: the current one and those retired with calls still
        /// in flight.
        var retired: [Int: Connection] = [:]
        var currentNumber = 0
        var closed = false
    }

    private let open: @Sendable () throws -> Client
    private let state: Locked<State>

    /// - Parameter open: makes a new (not yet running) connection.
    /// - Throws: what `open` throws for the first connection.
    init(open: @escaping @Sendable () throws -> Client) throws {
        self.open = open
        state = Locked(State(current: Self.run(try open())))
    }

    deinit { close() }

    private static func run(_ client: Client) -> Connection {
        Connection(client: client, runner: Task { try? await client.runConnections() })
    }

    /// Runs `body` with a connection that stays open until it returns; nil once closed.
    func withClient<Result: Sendable>(_ body: (Client) async throws -> Result) async throws -> Result? {
        guard let (number, client) = acquire() else { return nil }
        defer { release(number) }
        return try await body(client)
    }

    private func acquire() -> (Int, Client)? {
        state.withLock { state in
            guard !state.closed else { return nil }
            if state.current.started >= Self.callsPerConnection, let fresh = try? open() {
                state.retired[state.currentNumber] = state.current
                state.currentNumber += 1
                state.current = Self.run(fresh)
                Self.shutDownIfDone(&state, state.currentNumber - 1)
            }
            state.current.started += 1
            state.current.inFlight += 1
            return (state.currentNumber, state.current.client)
        }
    }

    private func release(_ number: Int) {
        state.withLock { state in
            if number == state.currentNumber {
                state.current.inFlight -= 1
            } else {
                state.retired[number]?.inFlight -= 1
                Self.shutDownIfDone(&state, number)
            }
        }
    }

    /// Shuts the retired connection `number` down once no call is in flight on it.
    private static func shutDownIfDone(_ state: inout State, _ number: Int) {
        guard let connection = state.retired[number], connection.inFlight == 0 else { return }
        state.retired[number] = nil
        connection.client.beginGracefulShutdown()
    }

    /// Ends every connection; later calls get nil. Idempotent.
    func close() {
        let connections: [Connection] = state.withLock { state in
            guard !state.closed else { return [] }
            state.closed = true
            defer { state.retired = [:] }
            return [state.current] + state.retired.values
        }
        for connection in connections {
            connection.client.beginGracefulShutdown()
            connection.runner.cancel()
        }
    }
}
#endif
