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
    /// The endpoints bound, as libzmq reports them: a tcp port the kernel chose (`:*`) is the
    /// port it gave, so that a reopened socket binds the same one.
    private(set) var endpoints: [String] = []
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
    /// What libzmq holds of each connection's subscriptions, granted or not.
    var subscriptionLedger = SubscriptionLedger(perPeer: 0)
    /// Messages published since start.
    private(set) var published: UInt64 = 0
    /// Bytes of publications of at least ``trackedBytes`` that libzmq holds: not yet written to
    /// every subscriber they went to. A subscriber that reads nothing keeps them all.
    let unsent = BytesInFlight()
    /// Publications this large or larger are counted in ``unsent``; the smaller ones are
    /// followed by sentinels (``smallBacklog``).
    static let trackedBytes = 256
    /// How far the slowest subscriber is behind on small publications.
    let smallBacklog = SmallPublicationBacklog()
    /// What one small publication queued for one connection costs libzmq: its topic and body
    /// frames (64 bytes each) and the body (under ``trackedBytes``, shared by the connections it
    /// went to, counted for each). Four subscribers that never read held about 180 bytes per
    /// publication each.
    static let smallPublicationBytes = 192
    /// A subscriber this many small publications behind is looked for.
    static let smallBacklogToCheck: UInt64 = 8 * SmallPublicationBacklog.interval
    /// The largest message a subscriber may send: room for the longest topic and for the commands
    /// of a CURVE handshake (an INITIATE is about 300 bytes).
    static let subscriptionMessageBytes = 512
    /// Subscription messages of one connection libzmq takes in before the loop has read them.
    static let subscriptionsAhead: Int32 = 128
    /// Whether a connection of this socket may hold a subscription that matches a key's topic:
    /// set by the first such grant, cleared only when the socket is opened anew. Until then no
    /// diff is sent on its key's topic (it would reach no one: every subscriber takes bundles).
    /// libzmq drops a closed connection's subscriptions without reliably saying whose they
    /// were, so this never counts down: an over-estimate costs the sends, an under-estimate
    /// would lose diffs.
    private(set) var keyTopicsGranted = false
    /// Where a diff that goes into bundles only is encoded: grown for a large one, given back
    /// at the end of its group.
    private var scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: Publisher.scratchBytes, alignment: 8)
    private static let scratchBytes = 4096
    /// Prefixes subscribed to as bundles (topic `#P#`), with their subscriptions counted.
    private(set) var bundledPrefixes: [String: Int] = [:]
    /// The bundles of the group commit being published: one per bundled prefix, filled by
    /// ``publishDiffs(_:epoch:marks:)`` between ``beginGroup()`` and ``finishGroup()``.
    private var gathering: [GatheredBundle] = []
    /// A bundle is sent once it holds this many bytes; the rest of the group goes in the next.
    static let bundleBytes = 256 * 1024

    /// One prefix's bundle being filled: its topic, the body so far, and bodies that reached
    /// ``bundleBytes``, to be sent once the diff being published has left (frames of another
    /// message cannot go out in the middle of its own).
    private struct GatheredBundle {
        let prefix: String
        let topic: [UInt8]
        var body: [UInt8] = []
        var full: [[UInt8]] = []
    }

    /// When the socket was last opened anew, and whether a timer will do it again.
    private(set) var lastReopened = MonotonicTime(milliseconds: 0)
    var reopenPending = false
    /// Endpoints the socket opened anew could not bind yet (a tcp port still held).
    private(set) var unboundEndpoints: [String] = []

    /// Creates the socket and binds every endpoint.
    init(context: ZMQContext, endpoints: [String], highWaterMark: Int32, connections: ConnectionGuard,
         bind: @escaping (ZMQSocket, String) throws(ZMQError) -> Void) throws(ZMQError) {
        self.context = context
        self.highWaterMark = highWaterMark
        self.connections = connections
        self.bind = bind
        socket = try Self.makeSocket(context, highWaterMark: highWaterMark, connections: connections)
        for endpoint in endpoints {
            try bind(socket, endpoint)
            self.endpoints.append(try socket.lastEndpoint)
        }
    }

    private static func makeSocket(_ context: ZMQContext, highWaterMark: Int32,
                                   connections: ConnectionGuard) throws(ZMQError) -> ZMQSocket {
        let socket = try ZMQSocket(context, type: .xpub, linger: 1000)
        try socket.setSendHighWaterMark(highWaterMark)
        // libzmq keeps every subscription a peer sends until the connection ends, at many times its
        // size (``SubscriptionLedger``): a message longer than any topic, a CURVE handshake's
        // commands aside, ends its connection as it is decoded, and libzmq takes in at most this
        // many subscriptions of a connection ahead of the loop.
        try socket.setMaxMessageSize(Int64(Self.subscriptionMessageBytes))
        try socket.setReceiveHighWaterMark(Self.subscriptionsAhead)
        try socket.setXPubManual(true)
        try socket.setHandshakeInterval(milliseconds: DaemonNetwork.handshakeMilliseconds)
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
        subscriptionLedger.reset()
        bundledPrefixes = [:]
        keyTopicsGranted = false
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
        for topic in topics {
            if !keyTopicsGranted && WireTopic.matchesKeys(topic) { keyTopicsGranted = true }
            try? socket.addSubscription(topic)
        }
    }

    /// Unsubscribes the connection paired with the unsubscription just received from `topics`.
    func revoke(_ topics: [[UInt8]]) {
        for topic in topics { try? socket.removeSubscription(topic) }
    }

    /// Counts a bundle subscription to `prefix`.
    func subscribeBundles(of prefix: String) { bundledPrefixes[prefix, default: 0] += 1 }

    /// A bundle subscription to `prefix` ended.
    func unsubscribeBundles(of prefix: String) {
        guard let count = bundledPrefixes[prefix] else { return }
        bundledPrefixes[prefix] = count > 1 ? count - 1 : nil
    }

    // MARK: Publishing

    /// Starts a group commit's publications: from here to ``finishGroup()`` each diff also goes
    /// into the bundle of every bundled prefix its key is under.
    func beginGroup() {
        precondition(gathering.isEmpty, "a group's bundles were not sent")
        for prefix in bundledPrefixes.keys.sorted() {
            gathering.append(GatheredBundle(prefix: prefix, topic: Array(WireTopic.bundle(of: prefix).utf8)))
        }
    }

    /// Sends the group's bundles that hold anything.
    /// - Returns: the topics whose publication failed.
    func finishGroup() -> [(topic: String, error: ZMQError)] {
        var failures = sendFullBundles()
        for index in gathering.indices where !gathering[index].body.isEmpty {
            do {
                try sendBundle(gathering[index].topic, gathering[index].body)
            } catch {
                failures.append((WireTopic.bundle(of: gathering[index].prefix), error))
            }
        }
        gathering.removeAll()
        if scratch.count > Self.scratchBytes {
            scratch.deallocate()
            scratch = .allocate(byteCount: Self.scratchBytes, alignment: 8)
        }
        return failures
    }

    /// Sends the bundles that filled up, in order.
    private func sendFullBundles() -> [(topic: String, error: ZMQError)] {
        var failures: [(topic: String, error: ZMQError)] = []
        for index in gathering.indices where !gathering[index].full.isEmpty {
            for body in gathering[index].full {
                do {
                    try sendBundle(gathering[index].topic, body)
                } catch {
                    failures.append((WireTopic.bundle(of: gathering[index].prefix), error))
                }
            }
            gathering[index].full.removeAll()
        }
        return failures
    }

    private func sendBundle(_ topic: [UInt8], _ body: [UInt8]) throws(ZMQError) {
        try send(topic: topic, count: body.count) { buffer in body.withUnsafeBytes { buffer.copyMemory(from: $0) } }
        published += 1
    }

    /// Adds the diff just encoded for `key` to the bundles of the prefixes it is under; a bundle
    /// it would take past ``bundleBytes`` is set aside as full first.
    /// - Returns: whether a bundle filled up.
    private func gather(_ diff: UnsafeMutableRawBufferPointer, key: String) -> Bool {
        var filled = false
        for index in gathering.indices where key.isUnder(gathering[index].prefix) {
            let length = WireEncoder.bundledSize(diffCount: diff.count)
            if !gathering[index].body.isEmpty && gathering[index].body.count + length > Self.bundleBytes {
                gathering[index].full.append(gathering[index].body)
                gathering[index].body.removeAll(keepingCapacity: true)
                filled = true
            }
            WireEncoder.appendBundled(diff: UnsafeRawBufferPointer(diff), to: &gathering[index].body)
        }
        return filled
    }

    /// Publishes the diffs of one revision's changes, encoded straight into the frames libzmq
    /// sends, each with its sequencing marks (from ``tracker``; none when nothing is sequenced).
    /// - Returns: the topics whose publication failed.
    func publishDiffs(_ changes: [JournalChange], epoch: UInt64,
                      marks: [[Beacon_V1_PrefixMark]]) -> [(topic: String, error: ZMQError)] {
        guard keyTopicsGranted else { return gatherOnly(changes, epoch: epoch, marks: marks) }
        var failures: [(topic: String, error: ZMQError)] = []
        var filled = false
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
                ) { (count, fill) throws(ZMQError) -> Bool in
                    guard !gathering.isEmpty else { return try send(topic: key, count: count, fill: fill) }
                    return try send(topic: key, count: count) { buffer in
                        fill(buffer)
                        if gather(buffer, key: key) { filled = true }
                    }
                }
                published += 1
            } catch {
                failures.append((key, error))
            }
            if filled {
                failures += sendFullBundles()
                filled = false
            }
        }
        return failures
    }

    /// ``publishDiffs(_:epoch:marks:)`` while no subscription matches a key's topic: each diff
    /// goes only into the bundles gathered (none, nothing is encoded).
    private func gatherOnly(_ changes: [JournalChange], epoch: UInt64,
                            marks: [[Beacon_V1_PrefixMark]]) -> [(topic: String, error: ZMQError)] {
        guard !gathering.isEmpty else { return [] }
        var failures: [(topic: String, error: ZMQError)] = []
        for index in changes.indices {
            let filled = WireEncoder.diff(
                epoch: epoch, revision: changes[index].revision, part: changes[index].part, parts: changes[index].parts,
                kind: StoredValueCodec.kind(changes[index].kind), key: changes[index].key, encodedValue: changes[index].value,
                version: changes[index].version, createRevision: changes[index].createRevision,
                expiresAtMilliseconds: changes[index].expiresAtMilliseconds,
                timestampMilliseconds: changes[index].timestampMilliseconds,
                marks: marks.isEmpty ? [] : marks[index]
            ) { (count, fill) -> Bool in
                if scratch.count < count {
                    scratch.deallocate()
                    scratch = .allocate(byteCount: max(count, 2 * scratch.count), alignment: 8)
                }
                let diff = UnsafeMutableRawBufferPointer(rebasing: scratch[0..<count])
                fill(diff)
                return gather(diff, key: changes[index].key)
            }
            if filled { failures += sendFullBundles() }
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
        return try sendBody(count: count, fill: fill)
    }

    @discardableResult
    private func send(topic: [UInt8], count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) throws(ZMQError) -> Bool {
        let socket = socket
        _ = try topic.withUnsafeBytes { bytes in
            Result { () throws(ZMQError) in try socket.send(copying: bytes, flags: [.sendMore, .dontWait]) }
        }.get()
        return try sendBody(count: count, fill: fill)
    }

    private func sendBody(count: Int, fill: (UnsafeMutableRawBufferPointer) -> Void) throws(ZMQError) -> Bool {
        let socket = socket
        guard count >= Self.trackedBytes else {
            if let sentinel = smallBacklog.handing() { return try socket.send(count: count, flags: .dontWait, released: sentinel, fill: fill) }
            return try socket.send(count: count, flags: .dontWait, fill: fill)
        }
        return try socket.send(count: count, flags: .dontWait, released: unsent.hand(count), fill: fill)
    }

    /// Whether libzmq may hold more than `budget` bytes of publications: large ones past it, or
    /// a subscriber far enough behind on small ones to be looked for.
    func mayHoldMore(than budget: Int) -> Bool {
        unsent.value > budget || smallBacklog.backlog >= Self.smallBacklogToCheck
    }

    /// What libzmq holds of publications, at most, with `stalled` connections not reading: the
    /// large ones counted, and the small ones each of them may still have queued (no more than
    /// the high-water mark).
    func heldBytes(stalledConnections stalled: Int) -> Int {
        let small = min(smallBacklog.backlog, UInt64(highWaterMark))
        return unsent.value + stalled * Int(small) * Self.smallPublicationBytes
    }

    func close() {
        connections.stopWatching(.subscribers)
        socket.close()
    }

    deinit { scratch.deallocate() }
}
