internal import CBeaconKernel

extension BeaconServer {
    /// A subscriber connection whose kernel send queue holds this much has stopped reading (a
    /// unix socket's queue holds about 208 KiB at most; a reading subscriber keeps it near empty).
    static let stalledQueueBytes: Int32 = 128 << 10
    /// How often stalled subscribers are looked for at most: libzmq takes a moment to let go of
    /// what it held for a connection closed.
    static let stalledScanMilliseconds: UInt64 = 100

    /// Closes the subscriber connections that do not read, once libzmq holds more than
    /// `publish_buffer_bytes` of publications not yet written to every subscriber: those whose
    /// kernel send queue was full at two scans in a row (a reader of large values can be caught
    /// with a full queue once, between two reads). Each reconnects, subscribes again and repairs
    /// what it missed (PROTOCOL.md §6), like a subscriber whose publications were dropped at its
    /// high-water mark.
    func closeStalledSubscribers() {
        let now = clock.now()
        guard maintenance.lastStalledSubscriberScan.milliseconds(until: now) >= Self.stalledScanMilliseconds else { return }
        maintenance.lastStalledSubscriberScan = now
        drainConnections(.subscribers)
        var closed: [ConnectionPeer] = []
        var full: Set<StalledSubscriber> = []
        for (fd, peer) in connections.ledger.connections(on: .subscribers) where cbeacon_unread_sent_bytes(fd) >= Self.stalledQueueBytes {
            let connection = StalledSubscriber(descriptor: fd, peer: peer)
            guard maintenance.stalledSubscribers.contains(connection) else {
                full.insert(connection)
                continue
            }
            if connections.shutDown(fd: fd, on: .subscribers, from: peer, closed: { _ in }, shed: { logShed($0) }) {
                closed.append(peer)
            }
        }
        maintenance.stalledSubscribers = full
        stats.slowSubscribersClosed += UInt64(closed.count)
        guard let first = closed.first, let held = stats.logThrottle.admit("subscriber.slow", now: now) else { return }
        logger.notice("subscribers closed: they do not read their publications", metadata: [
            "peer": "\(first)", "subscribers": "\(closed.count)", "unsent.bytes": "\(publisher.unsent.value)",
            "limit": "publish_buffer_bytes (\(live.limits.publishBufferBytes))", "held.back": "\(held)"])
    }
}

/// A subscriber connection seen with a full kernel send queue.
struct StalledSubscriber: Hashable {
    var descriptor: Int32
    var peer: ConnectionPeer
}
