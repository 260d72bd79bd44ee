internal import CBeaconKernel

extension ServerLoop {
    /// A subscriber connection whose kernel send queue holds this much has stopped reading (a
    /// unix socket's queue holds about 208 KiB at most; a reading subscriber keeps it near empty).
    static let stalledQueueBytes: Int32 = 128 << 10
    /// Whether the kernel holds all it takes for a subscriber connection: this much unread (large
    /// publications), or so many small writes that it takes no more (each costs the kernel far
    /// more than its bytes).
    static func sendQueueIsFull(_ fd: Int32) -> Bool {
        cbeacon_unread_sent_bytes(fd) >= stalledQueueBytes || cbeacon_send_queue_full(fd) == 1
    }

    /// How often stalled subscribers are looked for at most: libzmq takes a moment to let go of
    /// what it held for a connection closed.
    static let stalledScanMilliseconds: UInt64 = 100

    /// Closes the subscriber connections that do not read, once libzmq holds more than
    /// `publish_buffer_bytes` of publications not yet written to every subscriber (the large ones
    /// counted, the small ones as many as the slowest subscriber is behind, for each connection
    /// that stalled): those whose kernel send queue was full, and held the same, at two scans in
    /// a row (a reader can be caught with a full queue, but what it holds moves as it reads).
    /// Each reconnects, subscribes again and repairs what it missed (PROTOCOL.md §6), like a
    /// subscriber whose publications were dropped at its high-water mark.
    func closeStalledSubscribers() {
        let now = clock.now()
        guard maintenance.lastStalledSubscriberScan.milliseconds(until: now) >= Self.stalledScanMilliseconds else { return }
        maintenance.lastStalledSubscriberScan = now
        drainConnections(.subscribers)
        let full = Set(connections.ledger.connections(on: .subscribers).filter { Self.sendQueueIsFull($0.0) }
            .map { StalledSubscriber(descriptor: $0.0, peer: $0.1, unread: cbeacon_unread_sent_bytes($0.0)) })
        let seenBefore = maintenance.stalledSubscribers
        maintenance.stalledSubscribers = full
        guard publisher.heldBytes(stalledConnections: full.count) > live.limits.publishBufferBytes else { return }
        var closed: [ConnectionPeer] = []
        for connection in full where seenBefore.contains(connection) {
            if connections.shutDown(fd: connection.descriptor, on: .subscribers, from: connection.peer, closed: { _ in }, shed: { logShed($0) }) {
                closed.append(connection.peer)
                maintenance.stalledSubscribers.remove(connection)
            }
        }
        stats.slowSubscribersClosed += UInt64(closed.count)
        guard let first = closed.first, let held = stats.logThrottle.admit("subscriber.slow", now: now) else { return }
        logger.notice("subscribers closed: they do not read their publications", metadata: [
            "peer": "\(first)", "subscribers": "\(closed.count)", "unsent.bytes": "\(publisher.unsent.value)",
            "small.behind": "\(publisher.smallBacklog.backlog)",
            "limit": "publish_buffer_bytes (\(live.limits.publishBufferBytes))", "held.back": "\(held)"])
    }
}

/// A subscriber connection seen with a full kernel send queue, and what the queue held: seen
/// again holding exactly as much, it read nothing meanwhile.
struct StalledSubscriber: Hashable {
    var descriptor: Int32
    var peer: ConnectionPeer
    var unread: Int32
}
