import BeaconZMQ
import Logging

/// A relay's request connection to its upstream: one libzmq connection at a time, each on a
/// socket of its own.
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
    /// The socket of the current generation (a DEALER): the loop polls it.
    private(set) var socket: ZMQSocket
    /// Its connection's events: the loop polls the reader.
    private(set) var events: ZMQMonitor
    /// Changes whenever a socket is closed or opened: the loop polls ``pollable`` anew.
    private(set) var socketChanges = 0
    /// Whether the current generation's connection finished its handshake: requests can be sent.
    private(set) var isConnected = false
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
        (socket, events) = try Self.open(endpoint, context: context)
        deadline = now + Self.connectTimeoutMilliseconds
    }

    private static func open(_ endpoint: UpstreamLink.Endpoint, context: ZMQContext) throws(ZMQError) -> (ZMQSocket, ZMQMonitor) {
        let socket = try ZMQSocket(context, type: .dealer, linger: 0)
        try socket.setSendHighWaterMark(100_000)
        try socket.setReceiveHighWaterMark(100_000)
        try socket.setQueuesOnlyToConnected(true)
        try socket.disableReconnecting()
        if let curve = endpoint.curve { try socket.enableCurveClient(serverKey: curve.serverKey, keys: curve.keys) }
        let events = try socket.monitor(
            events: [.handshakeSucceeded, .disconnected, .closed, .handshakeFailedAuth, .handshakeFailedProtocol],
            name: "beacond-upstream-\(UInt64.random(in: 0 ... .max))")
        try socket.connect(endpoint.request)
        return (socket, events)
    }

    /// When ``service(now:)`` has something to do by the clock: nil while connected.
    var nextDeadline: UInt64? { isConnected ? nil : deadline }

    /// The sockets the loop polls: the current generation's and its events' reader; none between two.
    var pollable: [ZMQSocket] { socketIsClosed ? [] : [socket, events.reader] }

    /// Sends one request on the current generation; false when it has no connection or no room.
    func send(_ body: [UInt8]) -> Bool {
        isConnected && (try? socket.send(ZMQMessage(bytes: body), flags: .dontWait)) == true
    }

    /// Reads one reply's frames, if one is waiting.
    func receive() -> [ZMQMessage]? {
        socketIsClosed ? nil : try? socket.receiveMessage(flags: .dontWait)
    }

    /// Reads the connection's events and keeps a generation going.
    /// - Returns: whether a generation whose connection was up ended now (its requests the
    ///   upstream did not answer are lost, or were applied in the order sent); a generation that
    ///   never connected sent nothing.
    func service(now: UInt64) -> Bool {
        var ended = false
        while let event = try? events.receiveEvent(flags: .dontWait) {
            if event.kind.contains(.handshakeSucceeded) {
                isConnected = true
            } else {
                if event.kind.contains(.handshakeFailedAuth) || event.kind.contains(.handshakeFailedProtocol) { logRefusal(event.kind, now: now) }
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
            (socket, events) = try Self.open(endpoint, context: context)
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
        socket.close()
        events.stop()
        isConnected = false
        socketIsClosed = true
        socketChanges += 1
    }

    /// Logs (every 10 s at most) that the upstream refuses this relay.
    private func logRefusal(_ kind: ZMQMonitorEvent.Kind, now: UInt64) {
        guard now >= lastRefusalLog + 10_000 || lastRefusalLog == 0 else { return }
        lastRefusalLog = now
        if kind.contains(.handshakeFailedAuth) {
            logger.error("the upstream refused this relay's connection: no allow rule there lists its key", metadata: [
                "upstream": "\(endpoint.request)", "relay.key": "\(endpoint.curve?.keys.publicKey ?? "none (ipc or tcp_insecure)")"])
        } else {
            logger.error("the security handshake with the upstream failed: is upstream_server_key its public key?", metadata: [
                "upstream": "\(endpoint.request)"])
        }
    }
}
