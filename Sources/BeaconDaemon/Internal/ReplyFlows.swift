import BeaconZMQ

/// The routing id a ROUTER socket gives one connection: its messages' first envelope frame.
/// Ids libzmq makes are five bytes; a peer may choose its own, up to 255.
struct RoutingID: Hashable {
    /// Up to eight bytes, packed; longer ids are kept whole in `long`.
    private let packed: UInt64
    private let count: Int
    private let long: [UInt8]?

    init(_ frame: ZMQMessage) {
        self = frame.withUnsafeBytes { RoutingID($0) }
    }

    /// Calls `body` with the id's bytes.
    func withBytes<Result>(_ body: (UnsafeRawBufferPointer) -> Result) -> Result {
        if let long { return long.withUnsafeBytes(body) }
        // Packed first byte highest: the last `count` bytes of the big-endian word.
        var word = packed.bigEndian
        return Swift.withUnsafeBytes(of: &word) { body(UnsafeRawBufferPointer(rebasing: $0[(8 - count)...])) }
    }

    init(_ bytes: UnsafeRawBufferPointer) {
        count = bytes.count
        if bytes.count <= 8 {
            var value: UInt64 = 0
            for byte in bytes { value = value << 8 | UInt64(byte) }
            packed = value
            long = nil
        } else {
            packed = 0
            long = Array(bytes)
        }
    }
}

/// The replies on their way to each connection of the request socket, bounded in bytes: what
/// Redis calls a client's output buffer, for a ROUTER socket.
///
/// libzmq queues whatever it is handed for a connection, up to a count of messages and without
/// regard to their size, so a peer that sends requests and never reads the replies would make the
/// daemon hold them all. So the daemon hands a connection its replies only as libzmq writes them
/// out, which it learns from each reply's release (``BytesInFlight``):
///
/// - A reply of at least ``Limits/trackedBytes`` is handed while libzmq holds less than
///   ``Limits/handOff`` bytes for the connection, or holds none (a larger reply goes alone).
///   Smaller replies are handed at once: libzmq's send high-water mark bounds them in number.
/// - Otherwise replies wait here, in order, counted in bytes; the loop offers them again
///   (``flush()``) until libzmq has written what it holds. A reply libzmq refuses because the
///   connection's queue is full is put back first in line (``putBack(_:to:)``).
/// - A connection whose waiting replies exceed ``Limits/perConnection``, or that holds the most
///   when its peer's connections together exceed ``Limits/perPeer`` (not for the superuser) or
///   all connections together exceed ``Limits/total``, is to be closed: its waiting replies are
///   dropped, and the loop shuts the connection down. Its peer's libzmq reconnects; requests it
///   had sent and not been answered look like ones that timed out.
///
/// Replies handed to libzmq count too: a tracked reply is handed only while what libzmq holds
/// for the peer's connections together stays within `perPeer` and for all within `total` (or
/// holds none: a larger reply goes alone), and the peer's or everyone's limit is passed by what
/// waits and what libzmq holds together. Otherwise each of many connections of one peer holds a
/// large reply "handed to libzmq" that no bound counted.
///
/// So what the daemon holds for one connection is at most `handOff` (or one reply) in libzmq,
/// beside libzmq's own bound on small replies, and `perConnection` plus one reply here; for one
/// peer, `perPeer` plus a reply in libzmq and one here. State only, owned by the loop thread:
/// the loop sends and closes.
struct ReplyFlows {
    struct Limits: Equatable {
        /// Bytes of replies waiting for one connection before it is closed.
        var perConnection: Int
        /// Bytes waiting for all connections of one peer (a uid, or a tcp address) before the
        /// one holding the most is closed; the superuser has no such limit.
        var perPeer: Int
        /// Bytes waiting for all connections together before the one holding the most is closed.
        var total: Int
        /// Bytes libzmq may hold for a connection before more wait here.
        var handOff = 1 << 20
        /// Replies this large or larger are counted while libzmq holds them.
        var trackedBytes = 256
    }

    /// A reply kept until its connection reads: its envelope and body.
    struct Reply {
        var envelope: ReplyEnvelope
        var body: [UInt8]
    }

    /// What to do with a reply offered to a connection.
    enum Offer {
        /// Hand it to libzmq now; count it in `inFlight` while libzmq holds it (`nil`: untracked).
        case send(BytesInFlight?)
        /// It waits here.
        case kept
        /// It waits here, and connection `victim` (perhaps another one) must be closed.
        case keptClosing(Victim)
    }

    /// A connection to close, and why.
    struct Victim: Equatable {
        var id: RoutingID
        /// The connection's descriptor; -1 when not known (it cannot be shut down, only forgotten).
        var fd: Int32
        var peer: ConnectionPeer
        var heldBytes: Int
        var reason: String
    }

    private struct Flow {
        var fd: Int32
        var peer: ConnectionPeer
        /// What libzmq holds for this connection, counted in its peer's and in everyone's too.
        var inFlight: BytesInFlight
        var waiting: [Reply] = []
        var waitingStart = 0
        var waitingBytes = 0

        var hasWaiting: Bool { waitingStart < waiting.count }
    }

    var limits: Limits
    private var flows: [RoutingID: Flow] = [:]
    /// The connection ``knowsDescriptor(of:)`` last found known; `nil` once it may be gone.
    private var lastKnown: RoutingID?
    private var byDescriptor: [Int32: RoutingID] = [:]
    private var waitingByPeer: [ConnectionPeer: Int] = [:]
    /// What libzmq holds for each peer's connections, and for all.
    private var inFlightByPeer: [ConnectionPeer: BytesInFlight] = [:]
    /// How many peers' counts of what libzmq holds are kept (each goes with its last connection).
    var peersCounted: Int { inFlightByPeer.count }
    private let inFlightTotal = BytesInFlight()
    /// Connections with replies waiting.
    private var blocked: Set<RoutingID> = []
    /// Bytes of replies waiting, all connections together.
    private(set) var waitingBytes = 0
    /// Connections closed for not reading their replies, since start.
    private(set) var closedConnections: UInt64 = 0
    /// Connections closed for not reading their replies, with when: the requests they sent
    /// before the close and libzmq still hands over are dropped unread for a while.
    private var closed: [RoutingID: MonotonicTime] = [:]
    /// How long requests of a closed connection are dropped (a peer may reuse its own routing id).
    static let closedMilliseconds: UInt64 = 10_000

    init(limits: Limits) {
        self.limits = limits
    }

    /// Whether some connection has replies waiting (the loop then offers them again soon).
    var hasWaiting: Bool { !blocked.isEmpty }

    /// Whether `id` is known (it sent a request since it connected).
    func knows(_ id: RoutingID) -> Bool { flows[id] != nil }

    /// Bytes libzmq holds for connection `id` now.
    func bytesInFlight(_ id: RoutingID) -> Int { flows[id]?.inFlight.value ?? 0 }

    /// Records the connection a request came from: its routing id, descriptor and peer.
    mutating func connected(_ id: RoutingID, fd: Int32, peer: ConnectionPeer) {
        if let previous = byDescriptor[fd], previous != id { forget(previous) }
        byDescriptor[fd] = id
        guard var flow = flows[id] else {
            flows[id] = Flow(fd: fd, peer: peer, inFlight: inFlightCount(for: peer))
            return
        }
        // Known without its descriptor (a reply waited before its first request was placed).
        countWaiting(-flow.waitingBytes, of: flow.peer)
        countWaiting(flow.waitingBytes, of: peer)
        flow.fd = fd
        if flow.peer != peer { flow.inFlight = inFlightCount(for: peer) }
        flow.peer = peer
        flows[id] = flow
    }

    /// Whether `id` is known with its descriptor (it sent a request since it connected). The
    /// last one found is remembered: requests mostly come in runs from one connection.
    mutating func knowsDescriptor(of id: RoutingID) -> Bool {
        if let lastKnown, lastKnown == id { return true }
        guard (flows[id]?.fd ?? -1) >= 0 else { return false }
        lastKnown = id
        return true
    }

    /// Bytes a new reply to connection `id` may take before a bound would close the connection:
    /// what it, its peer (not the superuser) and all connections may still hold. A connection
    /// whose peer holds nothing may take a reply of any size (it goes to libzmq alone, as a
    /// reading client's large reply always has).
    /// - Parameter building: bytes built for the peer's replies not yet handed here (its
    ///   unfinished batches), counted as held.
    func allowance(for id: RoutingID, building: Int = 0) -> Int {
        guard let flow = flows[id] else { return .max }
        let peerHeld = (waitingByPeer[flow.peer] ?? 0) + (inFlightByPeer[flow.peer]?.value ?? 0) + building
        if peerHeld == 0 && held(flow) == 0 { return .max }
        var room = limits.perConnection - held(flow) - building
        if flow.peer != .user(0) { room = min(room, limits.perPeer - peerHeld) }
        room = min(room, limits.total - (waitingBytes + inFlightTotal.value))
        return max(room, 0)
    }

    /// The connection with descriptor `fd`, if it sent a request since it connected.
    func connection(withDescriptor fd: Int32) -> RoutingID? { byDescriptor[fd] }

    /// Forgets the connection that had descriptor `fd` (it is gone); its waiting replies are dropped.
    mutating func disconnected(fd: Int32) {
        if let id = byDescriptor[fd] { forget(id) }
    }

    /// Whether a reply of `size` bytes goes to libzmq at once, whatever its connection: it is
    /// small, and no connection has replies waiting.
    @inline(__always)
    func goesAtOnce(size: Int) -> Bool { size < limits.trackedBytes && blocked.isEmpty }

    /// Decides what happens to a reply of `size` bytes for connection `id`.
    mutating func offer(_ reply: @autoclosure () -> Reply, size: Int, to id: RoutingID) -> Offer {
        // Most replies: small, and nothing waits for their connection.
        if size < limits.trackedBytes && (blocked.isEmpty || !blocked.contains(id)) { return .send(nil) }
        guard var flow = flows[id] else { return .send(nil) }  // never sent a request: gone, or not ours to bound
        if !flow.hasWaiting, let tracking = mayHand(size, flow) { return .send(tracking) }
        let kept = reply()
        let bytes = kept.body.count
        flow.waiting.append(kept)
        flow.waitingBytes += bytes
        flows[id] = flow
        blocked.insert(id)
        countWaiting(bytes, of: flow.peer)
        if let victim = overLimit(after: id) { return .keptClosing(victim) }
        return .kept
    }

    /// Puts back a reply libzmq refused (the connection's queue is full), first in line. A
    /// connection not known yet is bounded from now on, though it cannot be closed.
    mutating func putBack(_ reply: Reply, to id: RoutingID) {
        var flow = flows[id] ?? Flow(fd: -1, peer: .unknown, inFlight: inFlightCount(for: .unknown))
        if flow.waitingStart > 0 {
            flow.waitingStart -= 1
            flow.waiting[flow.waitingStart] = reply
        } else {
            flow.waiting.insert(reply, at: 0)
        }
        flow.waitingBytes += reply.body.count
        flows[id] = flow
        blocked.insert(id)
        countWaiting(reply.body.count, of: flow.peer)
    }

    /// Hands the waiting replies that may go to libzmq now to `hand`, in order per connection,
    /// each with what counts it in flight. `hand` returns `false` when libzmq refused the reply
    /// (the connection's queue is full): it stays first in line, and its connection's later
    /// replies wait behind it.
    mutating func flush(_ hand: (Reply, BytesInFlight?) -> Bool) {
        for id in blocked {
            guard var flow = flows[id] else { continue }
            var inFlight = flow.inFlight.value
            while flow.hasWaiting {
                let size = flow.waiting[flow.waitingStart].body.count
                guard let tracking = mayHand(size, flow, inFlight: inFlight),
                      hand(flow.waiting[flow.waitingStart], tracking) else { break }
                if tracking != nil { inFlight += size }
                flow.waiting[flow.waitingStart].body = []
                flow.waitingStart += 1
                flow.waitingBytes -= size
                countWaiting(-size, of: flow.peer)
            }
            if !flow.hasWaiting {
                flow.waiting.removeAll()
                flow.waitingStart = 0
                blocked.remove(id)
            } else if flow.waitingStart > 64 && flow.waitingStart * 2 > flow.waiting.count {
                flow.waiting.removeFirst(flow.waitingStart)
                flow.waitingStart = 0
            }
            flows[id] = flow
        }
    }

    /// Connection `id` to close for `reason`, if it is known.
    func victim(closing id: RoutingID, heldBytes: Int, reason: String) -> Victim? {
        guard let flow = flows[id] else { return nil }
        return Victim(id: id, fd: flow.fd, peer: flow.peer, heldBytes: heldBytes, reason: reason)
    }

    /// Drops the waiting replies of connection `id` and forgets it: the loop is closing it.
    mutating func close(_ id: RoutingID, now: MonotonicTime) {
        guard flows[id] != nil else { return }
        forget(id)
        closedConnections += 1
        if closed.count >= 1024 { closed = closed.filter { $0.value.milliseconds(until: now) < Self.closedMilliseconds } }
        closed[id] = now
    }

    /// Whether a request from `id` comes from a connection closed for not reading its replies
    /// (it is then dropped: nobody reads its answer).
    mutating func isClosed(_ id: RoutingID, now: @autoclosure () -> MonotonicTime) -> Bool {
        guard !closed.isEmpty, let closedAt = closed[id] else { return false }
        let now = now()
        if closedAt.milliseconds(until: now) < Self.closedMilliseconds { return true }
        closed[id] = nil  // expired
        return false
    }

    /// Whether a reply of `size` bytes may go to libzmq now, with libzmq holding `inFlight`
    /// bytes for the connection: `nil` if not, else how to count it (`.some(nil)`: untracked).
    private func mayHand(_ size: Int, _ flow: Flow, inFlight: Int? = nil) -> BytesInFlight?? {
        guard size >= limits.trackedBytes else { return .some(nil) }
        let held = inFlight ?? flow.inFlight.value
        guard held == 0 || held + size <= limits.handOff else { return nil }
        if flow.peer != .user(0), let peerHeld = inFlightByPeer[flow.peer]?.value, peerHeld > 0, peerHeld + size > limits.perPeer {
            return nil
        }
        let allHeld = inFlightTotal.value
        guard allHeld == 0 || allHeld + size <= limits.total else { return nil }
        return .some(flow.inFlight)
    }

    /// A connection's count of what libzmq holds, within its peer's and everyone's.
    private mutating func inFlightCount(for peer: ConnectionPeer) -> BytesInFlight {
        let peerCount: BytesInFlight
        if let existing = inFlightByPeer[peer] {
            peerCount = existing
        } else {
            peerCount = BytesInFlight()
            inFlightByPeer[peer] = peerCount
        }
        return BytesInFlight(within: [peerCount, inFlightTotal])
    }

    /// Bytes held for connection `flow`: waiting here and in libzmq.
    private func held(_ flow: Flow) -> Int { flow.waitingBytes + flow.inFlight.value }

    /// The connection to close once connection `id`'s waiting replies grew, if a limit is passed.
    private func overLimit(after id: RoutingID) -> Victim? {
        guard let flow = flows[id] else { return nil }
        if flow.waitingBytes > limits.perConnection {
            return victim(id, "its unread replies passed reply_buffer_bytes (\(limits.perConnection))")
        }
        if flow.peer != .user(0),
           waitingByPeer[flow.peer, default: 0] + (inFlightByPeer[flow.peer]?.value ?? 0) > limits.perPeer,
           let largest = largest(where: { $0.peer == flow.peer }) {
            return victim(largest, "its peer's unread replies passed reply_buffer_peer_bytes (\(limits.perPeer))")
        }
        if waitingBytes + inFlightTotal.value > limits.total, let largest = largest(where: { _ in true }) {
            return victim(largest, "all connections' unread replies passed reply_buffer_total_bytes (\(limits.total))")
        }
        return nil
    }

    /// The connection holding the most (waiting and in libzmq) among those `matches` accepts.
    private func largest(where matches: (Flow) -> Bool) -> RoutingID? {
        flows.filter { matches($0.value) && held($0.value) > 0 }.max { held($0.value) < held($1.value) }?.key
    }

    private func victim(_ id: RoutingID, _ reason: String) -> Victim {
        let flow = flows[id]!
        return Victim(id: id, fd: flow.fd, peer: flow.peer, heldBytes: held(flow), reason: reason)
    }

    private mutating func forget(_ id: RoutingID) {
        if lastKnown == id { lastKnown = nil }
        guard let flow = flows.removeValue(forKey: id) else { return }
        if byDescriptor[flow.fd] == id { byDescriptor[flow.fd] = nil }
        blocked.remove(id)
        countWaiting(-flow.waitingBytes, of: flow.peer)
        // A peer's count goes with its last connection, once libzmq holds nothing for it (else
        // a later connection of the peer finds it, with what is still held).
        if let peerCount = inFlightByPeer[flow.peer], peerCount.value == 0, !flows.values.contains(where: { $0.peer == flow.peer }) {
            inFlightByPeer[flow.peer] = nil
        }
    }

    /// Adds `bytes` (or takes them off, when negative) to what waits in all and for `peer`.
    private mutating func countWaiting(_ bytes: Int, of peer: ConnectionPeer) {
        waitingBytes += bytes
        let left = waitingByPeer[peer, default: 0] + bytes
        waitingByPeer[peer] = left > 0 ? left : nil
    }
}
