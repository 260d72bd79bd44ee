import BeaconZMQ

/// Counts the connections of one socket from its monitor events (accepted +1, disconnected −1).
/// Loop thread only.
final class ConnectionCounter {
    /// The monitor's PAIR socket, polled by the loop.
    let events: ZMQSocket
    private(set) var count = 0

    init(watching socket: ZMQSocket, name: String) throws(ZMQError) {
        events = try socket.monitor(events: [.accepted, .disconnected], name: name)
    }

    /// Applies every waiting event.
    func drain() {
        while let event = try? events.receiveMonitorEvent(flags: .dontWait) {
            if event.kind.contains(.accepted) { count += 1 }
            if event.kind.contains(.disconnected) { count = max(count - 1, 0) }
        }
    }

    func close() { events.close() }
}

/// A rate over the last few seconds from samples of a growing counter. Loop thread only.
struct RateMeter {
    private var samples: [(atMilliseconds: UInt64, count: UInt64)] = []
    private let window: UInt64

    init(windowMilliseconds: UInt64 = 5000) { window = windowMilliseconds }

    /// Records the counter's value now (call it about once a second or more often).
    mutating func record(_ count: UInt64, at now: UInt64) {
        samples.append((now, count))
        while samples.count > 2, let first = samples.first, now - first.atMilliseconds > window { samples.removeFirst() }
    }

    /// Events per second between the oldest sample in the window and the newest.
    var perSecond: Double {
        guard let first = samples.first, let last = samples.last, last.atMilliseconds > first.atMilliseconds else { return 0 }
        return Double(last.count - first.count) * 1000 / Double(last.atMilliseconds - first.atMilliseconds)
    }
}
