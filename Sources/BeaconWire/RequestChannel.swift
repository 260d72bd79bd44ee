import BeaconProtocol
import BeaconZMQ
import Foundation

/// The request side of one connection to a daemon: a DEALER, the requests' ids, the replies
/// decoded, and the connection's handshake watched — so that a daemon refusing this peer (no
/// access rule admits it, or a wrong server key) is an error at once rather than silence until a
/// timeout. ``WireClient``, the `Beacon` client's engine and a relay's link to its upstream each
/// talk to a daemon through one.
///
/// Either libzmq connects again by itself when the connection ends (and sends what was queued
/// meanwhile to whichever daemon answers then), or the channel is one connection: it queues only
/// to a connection that exists, never makes another, and its end is an error
/// (``WireError/Kind/connectionLost``) — the caller decides what to send again on a new channel.
///
/// Owned, like its sockets, by one thread.
public final class RequestChannel {
    /// Something the connection's monitor reported.
    public enum Event {
        /// The handshake finished: requests reach the daemon.
        case connected
        /// The connection ended (libzmq connects again by itself if the channel reconnects).
        case disconnected
        /// The daemon refused this peer (`byAccessRules`: no rule admits it), or the security
        /// handshake failed (a wrong server key, say).
        case refused(WireError, byAccessRules: Bool)
    }

    /// The daemon's request endpoint.
    public let endpoint: String
    /// Whether libzmq connects again by itself when the connection ends.
    public let reconnects: Bool
    /// The DEALER: poll it for replies.
    public let socket: ZMQSocket
    /// The connection's events: poll its reader too, and call ``readEvents()`` when it is readable.
    public let events: ZMQMonitor
    /// Set while the daemon refuses this peer: from a failed handshake until one succeeds.
    public private(set) var refusal: WireError?
    /// Set once the connection of a channel that does not reconnect has ended.
    public private(set) var lost: WireError?
    /// Whether a handshake has finished and the connection has not ended since.
    public private(set) var isConnected = false
    private let curve: CurveCredentials?
    private var nextID: UInt64 = 1

    /// Opens the DEALER and connects it.
    /// - Parameters:
    ///   - receiveHighWaterMark: replies libzmq takes in ahead of the caller, at most; past it,
    ///     they wait at the daemon.
    ///   - sendTimeoutMilliseconds: how long a blocking ``send(_:)`` waits for room (none: it
    ///     never waits).
    ///   - name: unique within the process; names the monitor's inproc endpoint.
    /// - Throws: ``ZMQError`` when the sockets cannot be created.
    public init(endpoint: String, context: ZMQContext, curve: CurveCredentials?, reconnects: Bool,
                receiveHighWaterMark: Int32 = 100_000, sendTimeoutMilliseconds: Int32? = nil, name: String) throws(ZMQError) {
        self.endpoint = endpoint
        self.reconnects = reconnects
        self.curve = curve
        socket = try ZMQSocket(context, type: .dealer, linger: 0)
        try socket.setSendHighWaterMark(100_000)
        try socket.setReceiveHighWaterMark(receiveHighWaterMark)
        if let sendTimeoutMilliseconds { try socket.setSendTimeout(milliseconds: sendTimeoutMilliseconds) }
        if let curve { try socket.enableCurveClient(serverKey: curve.serverKey, keys: curve.keys) }
        if !reconnects {
            // Queue only to a connection that exists, and never make another.
            try socket.setQueuesOnlyToConnected(true)
            try socket.disableReconnecting()
        }
        events = try socket.monitor(
            events: [.handshakeSucceeded, .handshakeFailedAuth, .handshakeFailedProtocol, .disconnected, .closed],
            name: "\(name)-\(UInt64.random(in: 0 ... .max))")
        try socket.connect(endpoint)
    }

    /// The sockets to poll: the DEALER and the monitor's reader.
    public var pollable: [ZMQSocket] { [socket, events.reader] }

    /// The id the next request takes (ids count up from 1, per channel).
    public func takeRequestID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    /// Reads what the monitor reported, and keeps ``isConnected``, ``refusal`` and ``lost`` up to date.
    /// - Returns: the events, in order.
    @discardableResult
    public func readEvents() -> [Event] {
        var read: [Event] = []
        while let event = try? events.receiveEvent(flags: .dontWait) {
            if event.kind.contains(.handshakeSucceeded) {
                isConnected = true
                refusal = nil
                read.append(.connected)
            } else if event.kind.contains(.handshakeFailedAuth) || event.kind.contains(.handshakeFailedProtocol) {
                let error = refused(event)
                refusal = error
                read.append(.refused(error, byAccessRules: event.kind.contains(.handshakeFailedAuth)))
            } else {
                isConnected = false
                if !reconnects && lost == nil {
                    lost = WireError(kind: .connectionLost, message: "the connection to the daemon at \(endpoint) ended")
                }
                read.append(.disconnected)
            }
        }
        return read
    }

    /// Sends a request under the next id.
    /// - Parameter flags: `.dontWait` to fail at once when libzmq has no room (or no connection).
    /// - Returns: the request's id.
    /// - Throws: the refusal or the end of the connection when there is one; `.timeout` when the
    ///   request could not be queued within the send timeout.
    @discardableResult
    public func send(_ op: Beacon_V1_Request.OneOf_Op, flags: ZMQFlags = []) throws(WireError) -> UInt64 {
        let id = takeRequestID()
        try send(id: id, op, flags: flags)
        return id
    }

    /// Sends a request under an id the caller chose.
    public func send(id: UInt64, _ op: Beacon_V1_Request.OneOf_Op, flags: ZMQFlags = []) throws(WireError) {
        var request = Beacon_V1_Request()
        request.id = id
        request.op = op
        try send(rawBody: (try? request.serializedBytes()) ?? [], flags: flags)
    }

    /// Sends raw bytes as a request body (for testing how the daemon treats bad input).
    public func send(rawBody: [UInt8], flags: ZMQFlags = []) throws(WireError) {
        if let refusal { throw refusal }
        if let lost { throw lost }
        do {
            try socket.send(ZMQMessage(bytes: rawBody), flags: flags)
        } catch where error.wouldBlock {
            readEvents()
            if let refusal { throw refusal }
            if let lost { throw lost }
            if !reconnects {
                let error = WireError(kind: .connectionLost, message: "no connection to the daemon at \(endpoint)")
                lost = error
                throw error
            }
            throw WireError(kind: .timeout, message: "the request to \(endpoint) could not be queued"
                + " (daemon unreachable, refusing this peer, or not reading)")
        } catch {
            throw WireError(error)
        }
    }

    /// The next reply waiting, decoded; `nil` when none is (replies that do not decode are skipped).
    public func receiveReply() -> Beacon_V1_Reply? {
        while let frames = try? socket.receiveMessage(flags: .dontWait) {
            guard let body = frames.last, let reply = Self.decodeReply(body: body) else { continue }
            return reply
        }
        return nil
    }

    /// Decodes a reply's body: a `Delta` or `History` page read in place (``FastReply``), any
    /// other reply by SwiftProtobuf; `nil` when it does not decode.
    public static func decodeReply(body: ZMQMessage) -> Beacon_V1_Reply? {
        if let page = body.withUnsafeBytes({ FastReply.decodeEvents($0) }) { return page }
        return try? Beacon_V1_Reply(serializedBytes: body.bytes)
    }

    /// Closes the DEALER (what it queued is dropped) and the monitor.
    public func close() {
        socket.close()
        events.stop()
    }

    private func refused(_ event: ZMQMonitorEvent) -> WireError {
        if event.kind.contains(.handshakeFailedAuth) {
            let identity = curve.map { "CURVE key \($0.keys.publicKey)" } ?? "uid \(getuid()), gid \(getgid())"
            return WireError(kind: .refused, message: "beacond at \(endpoint) refused the connection (status \(event.value)): "
                + "no access rule admits this peer (\(identity))")
        }
        return WireError(kind: .refused, message: "the security handshake with \(endpoint) failed"
            + (curve == nil ? "" : " (is the daemon's public key right?)"))
    }
}
