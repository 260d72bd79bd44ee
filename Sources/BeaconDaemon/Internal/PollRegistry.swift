import BeaconZMQ

/// What the loop polls, and what each part does in a pass: the parts register their sockets with
/// the work a readable one calls for, and work they do every pass, in the order the loop must do
/// it. The loop builds a registry anew when a part replaces a socket.
///
/// The loop thread's, like the sockets in it.
struct PollRegistry {
    private struct Entry {
        /// The poller's index of what is polled; nil for work done every pass.
        let index: Int?
        /// Whether the work reads requests (compaction and backup steps yield to a pass that does).
        let readsRequests: Bool
        let work: () -> Void
    }

    private let poller = ZMQPoller()
    private var entries: [Entry] = []

    /// Polls `socket`; `work` runs in each pass where it is readable.
    mutating func onReadable(_ socket: ZMQSocket, readsRequests: Bool = false, _ work: @escaping () -> Void) {
        entries.append(Entry(index: poller.add(socket), readsRequests: readsRequests, work: work))
    }

    /// Polls a plain file descriptor; `work` runs in each pass where it is readable.
    mutating func onReadable(fileDescriptor: Int32, _ work: @escaping () -> Void) {
        entries.append(Entry(index: poller.add(fileDescriptor: fileDescriptor), readsRequests: false, work: work))
    }

    /// Polls `socket` only to wake the loop: its part reads it in work done every pass.
    mutating func wakes(on socket: ZMQSocket) {
        poller.add(socket)
    }

    /// `work` runs in every pass, in its place in the order.
    mutating func everyPass(_ work: @escaping () -> Void) {
        entries.append(Entry(index: nil, readsRequests: false, work: work))
    }

    /// Waits until something registered is readable, or `timeoutMilliseconds` pass.
    func poll(timeoutMilliseconds: Int) throws(ZMQError) {
        _ = try poller.poll(timeoutMilliseconds: timeoutMilliseconds)
    }

    /// Does, in registration order, the work of what polled readable and the work of every pass.
    /// - Returns: whether requests were read.
    func serviceReady() -> Bool {
        var readRequests = false
        for entry in entries {
            if let index = entry.index, !poller.readyEvents(index).contains(.readable) { continue }
            entry.work()
            readRequests = readRequests || entry.readsRequests
        }
        return readRequests
    }
}
