import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Logging

/// A relay's request connection to its upstream: one libzmq connection at a time, each on a
/// channel of its own (a ``RequestChannel`` that never reconnects).
///
/// libzmq, left to reconnect by itself, sends what it still queued for a lost connection over the
/// next one — ahead of the requests lost in the old connection's kernel buffers, which the relay's
/// clients send again later: their writes would be applied out of order. So the socket never
/// reconnects and queues only to a connection that exists: each connection is a *generation*, a
/// socket opened once the last one ended. The upstream reads what was sent on one generation in
/// order, up to where its connection broke; nothing sent on it reaches the upstream after that.
/// When a generation ends, its socket is closed with what it still queued, and the link answers
/// every request sent on it that the upstream did not.
///
/// Part of the loop's state, like the link that owns it.
final class UpstreamRequests {
    /// The current generation: the loop polls its DEALER and its monitor.
    private var channel: RequestChannel
    /// Changes whenever a socket is closed or opened: the loop polls ``pollable`` anew.
    private(set) var socketChanges = 0
    /// Monotonic ms at which the current generation gives up connecting, or (after it ended)
    /// at which the next one opens.
    private var deadline: UInt64
    /// Whether the current generation ended and the next is not open yet.
    private var socketIsClosed = false

    private let endpoint: UpstreamLink.Endpoint
    private let context: ZMQContext
    private let logger: Logger
    private var lastRefusalLog: UInt64 = 0

    /// How long a generation may take to connect and finish its handshake.
    static let connectTimeoutMilliseconds: UInt64 = 5000
    /// How long after a generation ended the next one opens (libzmq's own reconnect interval).
    static let reopenDelayMilliseconds: UInt64 = 100

    init(endpoint: UpstreamLink.Endpoint, context: ZMQContext, now: UInt64, logger: Logger) throws(ZMQError) {
        self.endpoint = endpoint
        self.context = context
        self.logger = logger
        channel = try Self.open(endpoint, context: context)
        deadline = now + Self.connectTimeoutMilliseconds
    }

    private static func open(_ endpoint: UpstreamLink.Endpoint, context: ZMQContext) throws(ZMQError) -> RequestChannel {
        try RequestChannel(endpoint: endpoint.request, context: context, curve: endpoint.curve, reconnects: false, name: "beacond-upstream")
    }

    /// Whether the current generation's connection finished its handshake: requests can be sent.
    var isConnected: Bool { !socketIsClosed && channel.isConnected }

    /// When ``service(now:)`` has something to do by the clock: nil while connected.
    var nextDeadline: UInt64? { isConnected ? nil : deadline }

    /// The sockets the loop polls: the current generation's DEALER and monitor; none between two.
    var pollable: [ZMQSocket] { socketIsClosed ? [] : channel.pollable }

    /// Sends one request on the current generation; false when it has no connection or no room.
    func send(id: UInt64, _ op: Beacon_V1_Request.OneOf_Op) -> Bool {
        guard isConnected else { return false }
        do {
            try channel.send(id: id, op, flags: .dontWait)
            return true
        } catch {
            return false
        }
    }

    /// The next reply waiting, decoded.
    func receive() -> Beacon_V1_Reply? {
        socketIsClosed ? nil : channel.receiveReply()
    }

    /// Reads the connection's events and keeps a generation going.
    /// - Returns: whether a generation whose connection was up ended now (its requests the
    ///   upstream did not answer are lost, or were applied in the order sent); a generation that
    ///   never connected sent nothing.
    func service(now: UInt64) -> Bool {
        var ended = false
        for event in socketIsClosed ? [] : channel.readEvents() {
            switch event {
            case .connected:
                break
            case .refused(_, let byAccessRules):
                logRefusal(byAccessRules: byAccessRules, now: now)
                ended = true
            case .disconnected:
                ended = true
            }
        }
        if socketIsClosed {
            if now >= deadline { reopen(now: now) }
            return false
        }
        guard ended || (!isConnected && now >= deadline) else { return false }
        let wasConnected = isConnected
        close()
        deadline = now + Self.reopenDelayMilliseconds
        return wasConnected
    }

    private func reopen(now: UInt64) {
        do {
            channel = try Self.open(endpoint, context: context)
            socketIsClosed = false
            socketChanges += 1
            deadline = now + Self.connectTimeoutMilliseconds
        } catch {
            logger.error("cannot open a connection to the upstream; trying again", metadata: ["error": "\(error)"])
            deadline = now + Self.connectTimeoutMilliseconds
        }
    }

    /// Closes the current generation's socket with what it queued, and its monitor.
    func close() {
        channel.close()
        socketIsClosed = true
        socketChanges += 1
    }

    /// Logs (every 10 s at most) that the upstream refuses this relay.
    private func logRefusal(byAccessRules: Bool, now: UInt64) {
        guard now >= lastRefusalLog + 10_000 || lastRefusalLog == 0 else { return }
        lastRefusalLog = now
        if byAccessRules {
            logger.error("the upstream refused this relay's connection: no allow rule there lists its key", metadata: [
                "upstream": "\(endpoint.request)", "relay.key": "\(endpoint.curve?.keys.publicKey ?? "none (ipc or tcp_insecure)")"])
        } else {
            logger.error("the security handshake with the upstream failed: is upstream_server_key its public key?", metadata: [
                "upstream": "\(endpoint.request)"])
        }
    }
}
