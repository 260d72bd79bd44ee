import BeaconProtocol

/// The subscriptions libzmq holds for each subscriber connection, granted or not.
///
/// In manual mode (the daemon decides every subscription) libzmq's XPUB keeps every subscription
/// message a peer sends in a trie — granted or refused — until the peer cancels it or its
/// connection ends, at many times the topic's size. So every distinct topic a connection
/// subscribes to counts here, and a connection is to be closed when its peer holds more than
/// `perPeer` of them (the superuser: no limit), or when it sends a topic longer than any valid
/// one. Closing it is what makes libzmq let go. State only, owned by the loop thread.
struct SubscriptionLedger {
    /// Topics one peer's connections may hold together (0: no limit).
    var perPeer: Int

    /// A topic can be a key prefix, or one in `#` … `#` (a bundle), or a control topic.
    static let longestTopic = WireLimits.maxKeyBytes + 2

    enum Verdict: Equatable {
        case keep
        /// Close the connection: why.
        case close(String)
    }

    private struct Connection {
        var peer: ConnectionPeer
        var topics: Set<[UInt8]> = []
    }

    private var connections: [Int32: Connection] = [:]
    private var heldByPeer: [ConnectionPeer: Int] = [:]

    init(perPeer: Int) {
        self.perPeer = perPeer
    }

    /// Topics `peer`'s connections hold now.
    func held(by peer: ConnectionPeer) -> Int { heldByPeer[peer, default: 0] }

    /// Records a subscription (or, with `subscribe` false, a cancellation) of `topic` that
    /// connection `fd` of `peer` sent.
    mutating func received(_ topic: [UInt8], subscribe: Bool, fd: Int32, peer: ConnectionPeer) -> Verdict {
        guard topic.count <= Self.longestTopic else {
            return .close("a subscription of \(topic.count) bytes, longer than any topic (\(Self.longestTopic))")
        }
        guard peer != .user(0) else { return .keep }
        var connection = connections[fd] ?? Connection(peer: peer)
        if connection.peer != peer {
            closed(fd: fd)
            connection = Connection(peer: peer)
        }
        if subscribe {
            if connection.topics.insert(topic).inserted { heldByPeer[peer, default: 0] += 1 }
        } else if connection.topics.remove(topic) != nil {
            let left = heldByPeer[peer, default: 1] - 1
            heldByPeer[peer] = left > 0 ? left : nil
        }
        connections[fd] = connection
        if perPeer > 0, heldByPeer[peer, default: 0] > perPeer {
            return .close("its peer's subscriptions, granted or not, passed subscriptions_per_peer (\(perPeer))")
        }
        return .keep
    }

    /// Forgets connection `fd`: it is gone, and libzmq has let go of its subscriptions.
    mutating func closed(fd: Int32) {
        guard let connection = connections.removeValue(forKey: fd) else { return }
        let left = heldByPeer[connection.peer, default: 0] - connection.topics.count
        heldByPeer[connection.peer] = left > 0 ? left : nil
    }

    /// Forgets every connection (the publish socket was opened anew).
    mutating func reset() {
        connections.removeAll()
        heldByPeer.removeAll()
    }
}
