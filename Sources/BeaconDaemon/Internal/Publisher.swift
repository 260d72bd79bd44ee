import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import SwiftProtobuf

/// The daemon's publish side: the XPUB socket (in manual mode: the daemon decides every
/// subscription), whether its subscriptions are paired with the connections that sent them
/// (``SubscriptionPairing``), the prefixes it sequences (``PrefixTracker``), and how diffs are
/// encoded straight into its frames. Who may subscribe to what is the access rules' business,
/// decided by the loop; this part only carries it out. Loop thread only.
final class Publisher {
    private let context: ZMQContext
    private let endpoints: [String]
    private let highWaterMark: Int32
    private unowned let connections: ConnectionGuard
    /// Binds the socket to one endpoint with that endpoint's security (the loop's rules).
    private let bind: (ZMQSocket, String) throws(ZMQError) -> Void

    /// The socket now; a reopening replaces it.
    private(set) var socket: ZMQSocket
    /// Counts openings, so that the loop polls the current socket.
    private(set) var generation = 0
    /// Whether grants go to the connection that asked.
    @exclusivity(unchecked) var pairing = SubscriptionPairing()
    /// The prefixes sequenced: those subscribed, and those leased by snapshots and deltas.
    @exclusivity(unchecked) var tracker = PrefixTracker()
    /// Messages published since start.
    private(set) var published: UInt64 = 0
    /// Bytes of publications of at least ``trackedBytes`` that libzmq holds: not yet written to
    /// every subscriber they went to. A subscriber that reads nothing keeps them all.
    let unsent = BytesInFlight()
    /// Publications this large or larger are counted in ``unsent``; libzmq's high-water mark
    /// bounds the smaller ones in number.
    static let trackedBytes = 256
    /// When the socket was last opened anew, and whether a timer will do it again.
    private(set) var lastReopened = MonotonicTime(milliseconds: 0)
    var reopenPending = false
    /// Endpoints the socket opened anew could not bind yet (a tcp port still held).
    private(set) var unboundEndpoints: [String] = []

    /// Creates the socket and binds every endpoint.
    init(context: ZMQContext, endpoints: [String], highWaterMark: Int32, connections: ConnectionGuard,
         bind: @escaping (ZMQSocket, String) throws(ZMQError) -> Void) throws(ZMQError) {
        self.context = context
        self.endpoints = endpoints
        self.highWaterMark = highWaterMark
        self.connections = connections
        self.bind = bind
        socket = try Self.makeSocket(context, highWaterMark: highWaterMark, connections: connections)
        for endpoint in endpoints { try bind(socket, endpoint) }
    }

    private static func makeSocket(_ context: ZMQContext, highWaterMark: Int32,
                                   connections: ConnectionGuard) throws(ZMQError) -> ZMQSocket {
        let socket = try ZMQSocket(context, type: .xpub, linger: 1000)
        try socket.setSendHighWaterMark(highWaterMark)
        try socket.setXPubManual(true)
        try socket.setHandshakeInterval(milliseconds: BeaconServer.handshakeMilliseconds)
        try connections.watch(socket, as: .subscribers, name: "beacond-subscribers-\(UInt64.random(in: 0 ... .max))")
        return socket
    }

    /// Closes the socket and opens another: subscribers reconnect and subscribe anew (and repair
    /// what they missed). The old socket lets go of its endpoints first; ``bindPending()`` binds
    /// the new one, and is to be called again while ``unboundEndpoints`` is not empty.
    func reopen(now: MonotonicTime) throws(ZMQError) {
        lastReopened = now
        reopenPending = false
        connections.stopWatching(.subscribers)
        for endpoint in endpoints { try? socket.unbind(endpoint) }
        socket.close()
        tracker.resetSubscriptions()
        pairing = SubscriptionPairing()
        socket = try Self.makeSocket(context, highWaterMark: highWaterMark, connections: connections)
        generation += 1
        unboundEndpoints = endpoints
    }

    /// Binds the endpoints still unbound; returns those that failed, with why.
    func bindPending() -> [(endpoint: String, error: ZMQError)] {
        var failed: [(endpoint: String, error: ZMQError)] = []
        var stillUnbound: [String] = []
        for endpoint in unboundEndpoints {
            do {
                try bind(socket, endpoint)
            } catch {
                failed.append((endpoint, error))
                stillUnbound.append(endpoint)
            }
        }
        unboundEndpoints = stillUnbound
        return failed
    }

    // MARK: Subscriptions

    /// The next subscription message, if one waits; the pairing learns of it (and of an empty queue).
    func receive() throws(ZMQError) -> (frames: [ZMQMessage], inStep: Bool)? {
        let received: [ZMQMessage]?
        do {
            received = try socket.receiveMessage(flags: .dontWait)
        } catch {
            pairing.lost()
            throw error
        }
        guard let frames = received else {
            pairing.drained()
            return nil
        }
        return (frames, pairing.read(frames))
    }

    /// Subscribes the connection paired with the subscription just received to `topics`.
    func grant(_ topics: [[UInt8]]) {
        for topic in topics { try? socket.addSubscription(topic) }
    }

    /// Unsubscribes the connection paired with the unsubscription just received from `topics`.
    func revoke(_ topics: [[UInt8]]) {
        for topic in topics { try? socket.removeSubscription(topic) }
    }

    // MARK: Publishing

    /// Publishes the diffs of one revision's changes, encoded straight into the frames libzmq
    /// sends, each with its sequencing marks (from ``tracker``; none when nothing is sequenced).
    /// - Returns: the topics whose publication failed.
    func publishDiffs(_ changes: [JournalChange], epoch: UInt64,
                      marks: [[Beacon_V1_PrefixMark]]) -> [(topic: String, error: ZMQError)] {
        var failures: [(topic: String, error: ZMQError)] = []
        for index in changes.indices {
            let key = changes[index].key
            do {
                _ = try WireEncoder.diff(
                    epoch: epoch, revision: changes[index].revision, part: changes[index].part, parts: changes[index].parts,
                    kind: StoredValueCodec.kind(changes[index].kind), key: key, encodedValue: changes[index].value,
                    version: changes[index].version, createRevision: changes[index].createRevision,
                    expiresAtMilliseconds: changes[index].expiresAtMilliseconds,
                    timestampMilliseconds: changes[index].timestampMilliseconds,
                    marks: marks.isEmpty ? [] : marks[index]
                ) { (count, fill) throws(ZMQError) -> Bool in try send(topic: key, count: count, fill: fill) }
                published += 1
            } catch {
                failures.append((key, error))
            }
        }
        return failures
    }

    /// Publishes `body` on `topic`.
    func publish(topic: String, body: [UInt8]) throws(ZMQError) {
        try send(topic: topic, count: body.count) { buffer in body.withUnsafeBytes { buffer.copyMemory(from: $0) } }
        published += 1
    }

    /// Sends `topic` and a body of `count` bytes that `fill` writes in the frame's memory. XPUB
    /// never blocks: at a subscriber's high-water mark the message is dropped for that
    /// subscriber, which detects the gap from the sequencing marks and repairs it.
    @discardableResult
    private func send(topic: String, count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) throws(ZMQError) -> Bool {
        let socket = socket
        _ = try withUTF8Bytes(topic) { utf8 in
            Result { () throws(ZMQError) in try socket.send(copying: utf8, flags: [.sendMore, .dontWait]) }
        }.get()
        guard count >= Self.trackedBytes else { return try socket.send(count: count, flags: .dontWait, fill: fill) }
        return try socket.send(count: count, flags: .dontWait, released: unsent.hand(count), fill: fill)
    }

    func close() {
        connections.stopWatching(.subscribers)
        socket.close()
    }
}
