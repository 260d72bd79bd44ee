internal import CBeaconZMQ

/// What to wait for on a polled socket or file descriptor.
public struct ZMQPollEvents: OptionSet, Sendable {
    public let rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    /// A message (or data) can be read.
    public static let readable = ZMQPollEvents(rawValue: Int16(ZMQ_POLLIN))
    /// A message can be sent without blocking.
    public static let writable = ZMQPollEvents(rawValue: Int16(ZMQ_POLLOUT))
}

/// Waits on several sockets and plain file descriptors at once (`zmq_poll`).
///
/// Build it once with the sockets to watch, then call ``poll(timeoutMilliseconds:)`` in a loop;
/// like the sockets it watches, it belongs to one thread.
public final class ZMQPoller {
    private var items: [zmq_pollitem_t] = []
    private var sockets: [ZMQSocket?] = []

    /// Creates an empty poller.
    public init() {}

    /// Watches `socket` for `events`; returns the item's index.
    @discardableResult
    public func add(_ socket: ZMQSocket, events: ZMQPollEvents = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: socket.handle, fd: -1, events: events.rawValue, revents: 0))
        sockets.append(socket)
        return items.count - 1
    }

    /// Watches a plain file descriptor (an eventfd, a pipe) for `events`; returns the item's index.
    @discardableResult
    public func add(fileDescriptor: Int32, events: ZMQPollEvents = .readable) -> Int {
        items.append(zmq_pollitem_t(socket: nil, fd: fileDescriptor, events: events.rawValue, revents: 0))
        sockets.append(nil)
        return items.count - 1
    }

    /// Waits up to `timeoutMilliseconds` (-1: forever) for any watched item to become ready.
    /// - Returns: the number of ready items; 0 on timeout.
    /// - Throws: ``ZMQError`` (`ETERM` once the context is shut down).
    @discardableResult
    public func poll(timeoutMilliseconds: Int) throws(ZMQError) -> Int {
        let count = Int32(items.count)
        let ready = try zmqCall("zmq_poll") {
            items.withUnsafeMutableBufferPointer { zmq_poll($0.baseAddress, count, timeoutMilliseconds) }
        }
        return Int(ready)
    }

    /// The events that item `index` reported in the last ``poll(timeoutMilliseconds:)``.
    public func readyEvents(_ index: Int) -> ZMQPollEvents {
        ZMQPollEvents(rawValue: items[index].revents)
    }
}
