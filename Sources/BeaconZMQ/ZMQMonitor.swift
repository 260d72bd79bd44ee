internal import CBeaconZMQ

/// A connection event that libzmq reports for a monitored socket.
public struct ZMQMonitorEvent: Sendable, Equatable {
    /// The kind of event.
    public struct Kind: OptionSet, Sendable, Hashable {
        public let rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }
        public static let connected = Kind(rawValue: UInt16(ZMQ_EVENT_CONNECTED))
        public static let connectDelayed = Kind(rawValue: UInt16(ZMQ_EVENT_CONNECT_DELAYED))
        public static let connectRetried = Kind(rawValue: UInt16(ZMQ_EVENT_CONNECT_RETRIED))
        public static let listening = Kind(rawValue: UInt16(ZMQ_EVENT_LISTENING))
        public static let bindFailed = Kind(rawValue: UInt16(ZMQ_EVENT_BIND_FAILED))
        public static let accepted = Kind(rawValue: UInt16(ZMQ_EVENT_ACCEPTED))
        public static let acceptFailed = Kind(rawValue: UInt16(ZMQ_EVENT_ACCEPT_FAILED))
        public static let closed = Kind(rawValue: UInt16(ZMQ_EVENT_CLOSED))
        public static let closeFailed = Kind(rawValue: UInt16(ZMQ_EVENT_CLOSE_FAILED))
        public static let disconnected = Kind(rawValue: UInt16(ZMQ_EVENT_DISCONNECTED))
        public static let monitorStopped = Kind(rawValue: UInt16(ZMQ_EVENT_MONITOR_STOPPED))
        public static let handshakeSucceeded = Kind(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_SUCCEEDED))
        /// The peer refused this side's credentials (ZAP said no); the value is the status code.
        public static let handshakeFailedAuth = Kind(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH))
        /// The security handshake broke (such as a CURVE client with the wrong server key).
        public static let handshakeFailedProtocol = Kind(rawValue: UInt16(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL))
        public static let all = Kind(rawValue: 0xFFFF)
    }

    /// What happened.
    public var kind: Kind
    /// The event's value: a file descriptor, an errno or a retry interval, depending on `kind`.
    public var value: UInt32
    /// The endpoint the event concerns.
    public var endpoint: String
}

/// The connection events of one socket, read from the PAIR socket libzmq reports them on.
///
/// libzmq's I/O thread reports an event with a blocking send, holding the watched socket's monitor
/// lock. A reader closed while libzmq still reports to it, or one whose queue is full, would hold
/// that thread for good, and with it every socket of the context. So the reader's queue is
/// unbounded (the owner drains it), and libzmq is told to stop reporting before the reader closes:
/// by ``stop()`` (or `deinit`), and by closing the watched socket, whichever comes first.
/// Owned, like the watched socket, by one thread.
public final class ZMQMonitor {
    /// The PAIR socket the events arrive on: poll it for readability.
    public let reader: ZMQSocket
    /// The socket whose events are reported, until it or this monitor is closed.
    private weak var watched: ZMQSocket?

    fileprivate init(reader: ZMQSocket, watched: ZMQSocket) {
        self.reader = reader
        self.watched = watched
    }

    deinit { stop() }

    /// Reads one event.
    /// - Returns: `nil` when `.dontWait` was given and no event was waiting.
    /// - Throws: ``ZMQError`` when the reader is closed or interrupted.
    public func receiveEvent(flags: ZMQFlags = []) throws(ZMQError) -> ZMQMonitorEvent? {
        guard let frames = try reader.receiveMessage(flags: flags), frames.count >= 2 else { return nil }
        let header = frames[0].bytes
        guard header.count >= 6 else { return nil }
        let kind = UInt16(header[0]) | UInt16(header[1]) << 8
        let value = UInt32(header[2]) | UInt32(header[3]) << 8 | UInt32(header[4]) << 16 | UInt32(header[5]) << 24
        return ZMQMonitorEvent(kind: .init(rawValue: kind), value: value, endpoint: frames[1].string)
    }

    /// Stops libzmq reporting events, then closes the reader. Idempotent.
    public func stop() {
        watched?.stopReportingEvents()
        watched = nil
        reader.close()
    }
}

extension ZMQSocket {
    /// Starts reporting `events` of this socket to a monitor.
    ///
    /// - Parameters:
    ///   - events: the kinds to report.
    ///   - name: a unique name for the inproc endpoint that carries the events.
    /// - Returns: the monitor, whose ``ZMQMonitor/reader`` is to be polled and drained.
    /// - Throws: ``ZMQError`` when monitoring cannot start.
    public func monitor(events: ZMQMonitorEvent.Kind = .all, name: String) throws(ZMQError) -> ZMQMonitor {
        let socket = try live
        let endpoint = "inproc://\(name)"
        try zmqCall("zmq_socket_monitor(\(endpoint))") { zmq_socket_monitor(socket, endpoint, Int32(events.rawValue)) }
        isReportingEvents = true
        do {
            let reader = try ZMQSocket(context, type: .pair)
            // 0: no high-water mark on the inproc pipe, so libzmq's send never blocks on a full queue.
            try reader.setReceiveHighWaterMark(0)
            try reader.connect(endpoint)
            return ZMQMonitor(reader: reader, watched: self)
        } catch {
            stopReportingEvents()
            throw error
        }
    }

    /// Tells libzmq to stop reporting this socket's events (it closes its side of the monitor).
    func stopReportingEvents() {
        guard isReportingEvents, let handle else { return }
        zmq_socket_monitor(handle, nil, 0)
        isReportingEvents = false
    }
}
