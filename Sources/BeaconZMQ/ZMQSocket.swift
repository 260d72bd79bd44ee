internal import CBeaconZMQ
import Synchronization

/// The kinds of ZeroMQ socket Beacon uses.
public enum ZMQSocketType: Sendable {
    case pub, xpub, sub, xsub, router, dealer, req, rep, pair, push, pull

    var raw: Int32 {
        switch self {
        case .pub: ZMQ_PUB
        case .xpub: ZMQ_XPUB
        case .sub: ZMQ_SUB
        case .xsub: ZMQ_XSUB
        case .router: ZMQ_ROUTER
        case .dealer: ZMQ_DEALER
        case .req: ZMQ_REQ
        case .rep: ZMQ_REP
        case .pair: ZMQ_PAIR
        case .push: ZMQ_PUSH
        case .pull: ZMQ_PULL
        }
    }
}

/// Flags for sending and receiving.
public struct ZMQFlags: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// Fail with `EAGAIN` instead of blocking.
    public static let dontWait = ZMQFlags(rawValue: ZMQ_DONTWAIT)
    /// More frames of the same message follow.
    public static let sendMore = ZMQFlags(rawValue: ZMQ_SNDMORE)
}

/// A ZeroMQ socket. Not thread-safe: one thread owns it from creation to ``close()``.
public final class ZMQSocket {
    /// The raw `void *` socket; `nil` once closed. Used by the socket's one thread only, so
    /// without dynamic exclusivity checks (one per send or receive otherwise).
    @exclusivity(unchecked) var handle: UnsafeMutableRawPointer?
    /// Keeps the context alive until the socket is closed.
    public let context: ZMQContext
    /// The socket's type.
    public let type: ZMQSocketType
    /// Whether libzmq reports this socket's events to a ``ZMQMonitor``; stopped before closing.
    var isReportingEvents = false

    /// Creates a socket of `type` in `context`, with linger set to `linger` milliseconds.
    /// - Throws: ``ZMQError`` when the context is terminated or out of sockets.
    public init(_ context: ZMQContext, type: ZMQSocketType, linger: Int32 = 0) throws(ZMQError) {
        guard let handle = zmq_socket(context.handle, type.raw) else {
            throw ZMQError(code: zmq_errno(), operation: "zmq_socket")
        }
        self.handle = handle
        self.context = context
        self.type = type
        try setOption(ZMQ_LINGER, linger)
    }

    deinit { close() }

    /// Closes the socket; unsent messages are kept for the linger period. Idempotent.
    public func close() {
        guard let handle else { return }
        // Events of the connections that linger after the close would go to a monitor that may
        // be closed meanwhile, and block libzmq's I/O thread: stop reporting them first.
        stopReportingEvents()
        zmq_close(handle)
        self.handle = nil
    }

    var live: UnsafeMutableRawPointer {
        get throws(ZMQError) {
            guard let handle else { throw ZMQError(code: ENOTSOCK, operation: "closed socket") }
            return handle
        }
    }

    // MARK: Endpoints

    /// Binds to `endpoint` (`ipc://path`, `tcp://127.0.0.1:port`, `inproc://name`).
    public func bind(_ endpoint: String) throws(ZMQError) {
        let socket = try live
        try zmqCall("zmq_bind(\(endpoint))") { zmq_bind(socket, endpoint) }
    }

    /// Connects to `endpoint`; the connection is made (and remade) in the background.
    public func connect(_ endpoint: String) throws(ZMQError) {
        let socket = try live
        try zmqCall("zmq_connect(\(endpoint))") { zmq_connect(socket, endpoint) }
    }

    /// Stops listening on `endpoint`.
    public func unbind(_ endpoint: String) throws(ZMQError) {
        let socket = try live
        try zmqCall("zmq_unbind(\(endpoint))") { zmq_unbind(socket, endpoint) }
    }

    /// Drops the connection to `endpoint`.
    public func disconnect(_ endpoint: String) throws(ZMQError) {
        let socket = try live
        try zmqCall("zmq_disconnect(\(endpoint))") { zmq_disconnect(socket, endpoint) }
    }

    /// The endpoint last bound, with the port the system chose for `tcp://...:*`.
    public var lastEndpoint: String {
        get throws(ZMQError) { try stringOption(ZMQ_LAST_ENDPOINT) }
    }

    // MARK: Sending

    /// Sends one frame; `.sendMore` marks that more frames of this message follow.
    /// - Returns: `false` when `.dontWait` was given and the queue is full (nothing was sent).
    @discardableResult
    public func send(_ message: ZMQMessage, flags: ZMQFlags = []) throws(ZMQError) -> Bool {
        let socket = try live
        do {
            try zmqCall("zmq_msg_send") { zmq_msg_send(&message.raw, socket, flags.rawValue) }
            return true
        } catch where error.wouldBlock && flags.contains(.dontWait) {
            return false
        }
    }

    /// Sends one frame copied from `bytes`.
    @discardableResult
    public func send(copying bytes: UnsafeRawBufferPointer, flags: ZMQFlags = []) throws(ZMQError) -> Bool {
        let socket = try live
        do {
            try zmqCall("zmq_send") { zmq_send(socket, bytes.baseAddress, bytes.count, flags.rawValue) }
            return true
        } catch where error.wouldBlock && flags.contains(.dontWait) {
            return false
        }
    }

    /// Sends one frame of `count` bytes that `fill` writes in place, in the frame's own memory:
    /// no intermediate buffer, no copy.
    /// - Returns: `false` when `.dontWait` was given and the frame could not be queued.
    @discardableResult
    public func send(count: Int, flags: ZMQFlags = [], fill: (UnsafeMutableRawBufferPointer) -> Void) throws(ZMQError) -> Bool {
        let socket = try live
        var message = zmq_msg_t()
        try zmqCall("zmq_msg_init_size") { zmq_msg_init_size(&message, count) }
        // Closed on every path: after a successful send libzmq has emptied it, so closing is a no-op.
        defer { zmq_msg_close(&message) }
        fill(UnsafeMutableRawBufferPointer(start: zmq_msg_data(&message), count: count))
        do {
            try zmqCall("zmq_msg_send") { zmq_msg_send(&message, socket, flags.rawValue) }
            return true
        } catch where error.wouldBlock && flags.contains(.dontWait) {
            return false
        }
    }

    /// Sends one frame of `count` bytes that `fill` writes in place, in memory the frame owns;
    /// `released` is called once libzmq holds the frame no more (written to every connection it
    /// went to, dropped, or never sent), on whichever thread lets go of it last: often libzmq's
    /// I/O thread.
    /// - Returns: `false` when `.dontWait` was given and the frame could not be queued.
    @discardableResult
    public func send(count: Int, flags: ZMQFlags = [], released: @escaping @Sendable () -> Void,
                     fill: (UnsafeMutableRawBufferPointer) -> Void) throws(ZMQError) -> Bool {
        let socket = try live
        let buffer = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 16)
        fill(UnsafeMutableRawBufferPointer(start: buffer, count: count))
        let releaseCall = ReleaseCall(released)
        releaseCall.handOver()
        let hint = Unmanaged.passRetained(releaseCall).toOpaque()
        var message = zmq_msg_t()
        let rc = zmq_msg_init_data(&message, buffer, count, { data, hint in
            Unmanaged<ReleaseCall>.fromOpaque(hint!).takeRetainedValue().release(data)
        }, hint)
        precondition(rc == 0, "zmq_msg_init_data cannot fail with a free function")
        // Closed on every path: after a successful send libzmq has emptied it, so closing is a no-op.
        defer { zmq_msg_close(&message) }
        do {
            try zmqCall("zmq_msg_send") { zmq_msg_send(&message, socket, flags.rawValue) }
            return true
        } catch where error.wouldBlock && flags.contains(.dontWait) {
            return false
        }
    }

    /// Sends one frame copied from `bytes`.
    @discardableResult
    public func send(_ bytes: [UInt8], flags: ZMQFlags = []) throws(ZMQError) -> Bool {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(ZMQError) -> Bool in try send(copying: buffer, flags: flags) }
        }
        return try result.get()
    }

    /// Sends `frames` as one multipart message; all or nothing.
    /// - Returns: `false` when `.dontWait` was given and the first frame could not be queued.
    @discardableResult
    public func send(frames: [ZMQMessage], flags: ZMQFlags = []) throws(ZMQError) -> Bool {
        precondition(!frames.isEmpty, "a message has at least one frame")
        for (index, frame) in frames.enumerated() {
            var frameFlags = flags
            if index < frames.count - 1 { frameFlags.insert(.sendMore) }
            // libzmq queues the rest of a message atomically once the first frame is accepted.
            let sent = try send(frame, flags: frameFlags)
            if !sent { return false }
        }
        return true
    }

    // MARK: Receiving

    /// Receives one frame into `message`.
    /// - Returns: `false` when `.dontWait` was given and nothing was waiting.
    @discardableResult
    public func receive(into message: ZMQMessage, flags: ZMQFlags = []) throws(ZMQError) -> Bool {
        let socket = try live
        do {
            try zmqCall("zmq_msg_recv") { zmq_msg_recv(&message.raw, socket, flags.rawValue) }
            return true
        } catch where error.wouldBlock && flags.contains(.dontWait) {
            return false
        }
    }

    /// Receives all frames of the next message.
    /// - Returns: `nil` when `.dontWait` was given and nothing was waiting.
    public func receiveMessage(flags: ZMQFlags = []) throws(ZMQError) -> [ZMQMessage]? {
        let first = ZMQMessage()
        guard try receive(into: first, flags: flags) else { return nil }
        var frames: [ZMQMessage] = []
        frames.reserveCapacity(2)  // a routing id and a body, in one allocation
        frames.append(first)
        while frames[frames.count - 1].hasMore {
            let next = ZMQMessage()
            try receive(into: next)
            frames.append(next)
        }
        return frames
    }

    // MARK: Options

    /// Sets an integer socket option (`ZMQ_*` constant).
    public func setOption(_ option: Int32, _ value: Int32) throws(ZMQError) {
        let socket = try live
        var value = value
        try zmqCall("zmq_setsockopt(\(option))") { zmq_setsockopt(socket, option, &value, MemoryLayout<Int32>.size) }
    }

    /// Sets a 64-bit integer socket option (`ZMQ_MAXMSGSIZE`, `ZMQ_AFFINITY`).
    public func setOption(_ option: Int32, int64 value: Int64) throws(ZMQError) {
        let socket = try live
        var value = value
        try zmqCall("zmq_setsockopt(\(option))") { zmq_setsockopt(socket, option, &value, MemoryLayout<Int64>.size) }
    }

    /// Limits inbound messages to `bytes`; a peer that sends a larger one is disconnected.
    public func setMaxMessageSize(_ bytes: Int64) throws(ZMQError) { try setOption(ZMQ_MAXMSGSIZE, int64: bytes) }

    /// Sets a byte-string socket option (`ZMQ_*` constant).
    public func setOption(_ option: Int32, bytes: [UInt8]) throws(ZMQError) {
        let socket = try live
        try zmqCall("zmq_setsockopt(\(option))") {
            bytes.withUnsafeBytes { zmq_setsockopt(socket, option, $0.baseAddress, $0.count) }
        }
    }

    /// Reads an integer socket option (`ZMQ_*` constant).
    public func intOption(_ option: Int32) throws(ZMQError) -> Int32 {
        let socket = try live
        var value: Int32 = 0
        var size = MemoryLayout<Int32>.size
        try zmqCall("zmq_getsockopt(\(option))") { zmq_getsockopt(socket, option, &value, &size) }
        return value
    }

    /// Reads a string socket option (`ZMQ_*` constant).
    public func stringOption(_ option: Int32) throws(ZMQError) -> String {
        let socket = try live
        var buffer = [CChar](repeating: 0, count: 1024)
        var size = buffer.count
        try zmqCall("zmq_getsockopt(\(option))") { zmq_getsockopt(socket, option, &buffer, &size) }
        return String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Subscribes a SUB socket to messages whose first frame starts with `prefix`.
    public func subscribe(_ prefix: [UInt8]) throws(ZMQError) { try setOption(ZMQ_SUBSCRIBE, bytes: prefix) }

    /// Removes one subscription of a SUB socket.
    public func unsubscribe(_ prefix: [UInt8]) throws(ZMQError) { try setOption(ZMQ_UNSUBSCRIBE, bytes: prefix) }

    /// Receive high-water mark: messages queued per peer before new ones are dropped (or block).
    public func setReceiveHighWaterMark(_ messages: Int32) throws(ZMQError) { try setOption(ZMQ_RCVHWM, messages) }

    /// Send high-water mark: messages queued per peer before new ones are dropped (or block).
    public func setSendHighWaterMark(_ messages: Int32) throws(ZMQError) { try setOption(ZMQ_SNDHWM, messages) }

    /// How long a new connection may take over its ZMTP handshake (and security) before libzmq
    /// closes it; 0: no limit.
    public func setHandshakeInterval(milliseconds: Int32) throws(ZMQError) { try setOption(ZMQ_HANDSHAKE_IVL, milliseconds) }

    /// How long a blocking send waits for room (or for a peer) before failing with `EAGAIN`;
    /// -1 waits forever.
    public func setSendTimeout(milliseconds: Int32) throws(ZMQError) { try setOption(ZMQ_SNDTIMEO, milliseconds) }

    /// How long a blocking receive waits before failing with `EAGAIN`; -1 waits forever.
    public func setReceiveTimeout(milliseconds: Int32) throws(ZMQError) { try setOption(ZMQ_RCVTIMEO, milliseconds) }

    /// Makes a connecting socket queue messages only to connections that exist (`ZMQ_IMMEDIATE`):
    /// with none, a send waits (or fails with `EAGAIN`), and what was queued to a connection
    /// that ends is dropped rather than sent to the next one.
    public func setQueuesOnlyToConnected(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_IMMEDIATE, on ? 1 : 0) }

    /// Stops libzmq from connecting again by itself once a connection ends (`ZMQ_RECONNECT_IVL` -1).
    public func disableReconnecting() throws(ZMQError) { try setOption(ZMQ_RECONNECT_IVL, -1) }

    /// Whether more frames of the last received message are waiting.
    public var hasMoreFrames: Bool {
        get throws(ZMQError) { try intOption(ZMQ_RCVMORE) != 0 }
    }

    /// Makes an unroutable ROUTER send fail with `EHOSTUNREACH` instead of dropping silently.
    public func setRouterMandatory(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_ROUTER_MANDATORY, on ? 1 : 0) }

    /// Passes every subscribe and unsubscribe of an XPUB socket to the application.
    public func setXPubVerbose(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_XPUB_VERBOSE, on ? 1 : 0) }
}

/// Hands a socket to another thread (libzmq allows migrating a socket across a full memory
/// barrier, such as starting a thread). The sending thread must not use the socket afterwards.
public struct ZMQSocketTransfer: @unchecked Sendable {
    /// The socket being handed over.
    public let socket: ZMQSocket
    /// Wraps `socket` for the hand-over.
    public init(_ socket: ZMQSocket) { self.socket = socket }
}

/// What to call once libzmq lets go of a frame's memory, on whichever thread that is.
///
/// libzmq passes a frame between its threads through lock-free queues that ThreadSanitizer
/// cannot see (libzmq is not instrumented). A release store when the frame is handed over and an
/// acquire load before its memory is let go make that hand-over explicit, so the closure and the
/// frame's bytes, written on the sending thread, are read and freed after it in every model.
private final class ReleaseCall: Sendable {
    private let call: @Sendable () -> Void
    private let handedOver = Atomic<Bool>(false)

    init(_ call: @escaping @Sendable () -> Void) { self.call = call }

    /// Publishes this object, and the frame written before it, to the thread that will release them.
    func handOver() { handedOver.store(true, ordering: .releasing) }

    /// Frees the frame's memory and calls the closure (libzmq's free function).
    func release(_ data: UnsafeMutableRawPointer?) {
        precondition(handedOver.load(ordering: .acquiring), "a frame was released before it was handed over")
        data?.deallocate()
        call()
    }
}
