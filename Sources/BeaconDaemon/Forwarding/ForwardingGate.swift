import BeaconProtocol
import Foundation

/// What a write authority that forwards its clients' writes elsewhere (a relay to its upstream,
/// an etcd front to etcd) keeps of their requests while the answers are on their way:
///
/// - each connection's later requests behind its forwarded ones, bounded in bytes, handed back
///   in order once those are answered (``ForwardingOrder``);
/// - the fence after a write answered `UPSTREAM_UNAVAILABLE`, which turns the connection's later
///   writes away until it sends that one again (``WriteFences``);
/// - consistent reads, from their arrival through their read index to the copy that holds it
///   (``ConsistentReads``), each keeping its connection's place.
///
/// The authority sends and answers; the gate decides what waits and hands it back. Its owner's
/// loop thread only: it calls the host, which may call the authority, and so the gate, again.
final class ForwardingGate {
    /// A request that waits.
    struct WaitingRequest {
        var request: Beacon_V1_Request
        var route: ReplyRoute
        var inBatch: Bool
        var context: RequestContext
    }

    /// What becomes of a request as it arrives.
    enum Admission {
        /// The host handles it now.
        case handleNow
        /// It waits, and is handed back by ``handBack(host:)``; or its connection was closed.
        case held
        /// A consistent read, which keeps its place while its read index is asked for
        /// (``start(_:unlessRefused:host:askReadIndex:)``).
        case consistentRead(WaitingRequest)
    }

    private var order: ForwardingOrder<WaitingRequest>
    private var fences = WriteFences()
    /// Consistent reads, and how far the copy holds what the authority follows (the other side's revisions).
    private var reads = ConsistentReads<WaitingRequest>()
    /// The token of the read index being learned.
    private var readIndexToken: UInt64?
    private let clock: any DaemonClock
    /// What the authority forwards, as refusals name it ("its forwarded writes", "its writes to etcd").
    private let forwardedWhat: String

    /// - Parameter pipelinesForwarded: whether a forwarded write may go while an earlier one of
    ///   its connection is unanswered (the other side applies one connection's writes in order).
    init(pipelinesForwarded: Bool, forwardedWhat: String, clock: any DaemonClock) {
        order = ForwardingOrder(pipelinesForwarded: pipelinesForwarded)
        self.forwardedWhat = forwardedWhat
        self.clock = clock
    }

    // MARK: Arrivals

    /// Decides whether `request` goes now, waits behind its connection's forwarded requests, or
    /// is a consistent read to start; closes a connection whose waiting requests pass the bound.
    private func admit(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext,
                       host: some AuthorityHost) -> Admission {
        let connection = route.connection
        let waiting = WaitingRequest(request: request, route: route, inBatch: inBatch, context: context)
        switch order.admit(waiting, of: connection, isForwarded: Self.isForwarded(request),
                           bytes: ((try? request.serializedBytes()) as [UInt8]?)?.count ?? 0,
                           boundBytes: host.perConnectionBytes, handedBack: replaying) {
        case .now:
            return context.readIndex == nil && request.asksForConsistentRead ? .consistentRead(waiting) : .handleNow
        case .waits:
            return .held
        case .overBound(let held):
            host.closeConnection(connection, pilingUp: held,
                                 reason: "requests waiting behind \(forwardedWhat) passed reply_buffer_bytes (\(host.perConnectionBytes))")
            return .held
        }
    }

    /// The authority's `holdsBack`: whether `request` waits (``admit(_:route:inBatch:replaying:context:host:)``);
    /// a consistent read goes to `startRead`, and waits.
    func holdsBack(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext,
                   host: some AuthorityHost, startRead: (WaitingRequest) -> Void) -> Bool {
        switch admit(request, route: route, inBatch: inBatch, replaying: replaying, context: context, host: host) {
        case .handleNow:
            return false
        case .held:
            return true
        case .consistentRead(let read):
            startRead(read)
            return true
        }
    }

    /// Whether `request` is forwarded: a write or a `KeepAlive`.
    static func isForwarded(_ request: Beacon_V1_Request) -> Bool {
        switch request.op {
        case .put, .delete, .txn, .keepAlive: true
        default: false
        }
    }

    /// The write id of a write as its client sent it; nil for what is not a write.
    static func writeID(of op: Beacon_V1_Request.OneOf_Op) -> Data? {
        switch op {
        case .put(let put): put.writeID
        case .delete(let delete): delete.writeID
        case .txn(let txn): txn.writeID
        default: nil
        }
    }

    // MARK: Forwarded writes

    /// Refuses a write the other side would refuse whatever its state, as a primary would: too
    /// many operations, a bad key or value, a value past the protocol's size.
    static func checkLimits(of ops: [WriteOp]) throws(Refusal) {
        if let problem = WriteOp.countProblem(ops.count) {
            throw WritePath.rejection(problem.code, problem.message, key: "", index: 0, current: 0, operations: ops.count)
        }
        for index in ops.indices {
            if let problem = ops[index].inputProblem ?? ops[index].limitProblem {
                throw WritePath.rejection(problem.code, problem.message, key: ops[index].key, index: index, current: 0,
                                          operations: ops.count)
            }
        }
    }

    /// Refuses a write of `connection` sent after one answered `UPSTREAM_UNAVAILABLE` (with a
    /// write id or without), until the client sends that one again (``WriteFences``); nil when
    /// it may go.
    func fenceRefusal(_ connection: RoutingID, writeID: Data) -> Refusal? {
        guard !fences.admits(connection, writeID: writeID, at: clock.now().milliseconds,
                             answersHeld: order.unanswered[connection] != nil) else { return nil }
        return Refusal(.upstreamUnavailable, "an earlier write of this connection was answered UPSTREAM_UNAVAILABLE, so this one "
            + "was not sent on (it would have been applied ahead of it): send the earlier ones again first, with their write ids")
    }

    /// A write of `connection` was answered `UPSTREAM_UNAVAILABLE`: it may have been applied.
    func answeredUnavailable(_ connection: RoutingID, writeID: Data) {
        guard !writeID.isEmpty else { return }
        fences.unavailable(connection, writeID: writeID, at: clock.now().milliseconds)
    }

    /// A request of `connection` was forwarded: its later requests wait until it is answered.
    func forwarded(by connection: RoutingID) {
        order.forwarded(by: connection)
    }

    /// A forwarded request of `connection` was answered. Once none is left, the answers held for
    /// the connection are on their way to its client, and a fence counts its hold from now.
    func answered(_ connection: RoutingID) {
        order.answered(for: connection)
        if order.unanswered[connection] == nil { fences.answersGiven(connection, at: clock.now().milliseconds) }
    }

    // MARK: Consistent reads

    /// Takes a consistent read, which keeps its connection's place until it is answered (nothing
    /// the connection sends after it is forwarded ahead of it).
    /// - Returns: whether a read index is to be asked for now (none is on its way).
    private func takeConsistentRead(_ read: WaitingRequest) -> Bool {
        order.forwarded(by: read.route.connection, barrier: true)
        return reads.add(read, now: clock.now().milliseconds)
    }

    /// Takes a consistent read, or answers it `refusal` (the other side is out of reach); calls
    /// `askReadIndex` with a new token when a read index is to be asked for now.
    func start(_ read: WaitingRequest, unlessRefused refusal: Refusal?, host: some AuthorityHost,
               askReadIndex: () -> Void) {
        if let refusal { return host.refuse(read.request.id, refusal, route: read.route, dependsOnStaged: false) }
        if takeConsistentRead(read) { askReadIndex() }
    }

    /// The read index asked for now goes by `token`.
    func askingReadIndex(token: UInt64) {
        readIndexToken = token
    }

    /// Whether `token` is the read index's being learned.
    func isReadIndex(_ token: UInt64) -> Bool { token == readIndexToken }

    /// The read index asked for was learned (`revision`) or could not be (nil: its reads are
    /// answered `refusal`).
    /// - Returns: whether the next one is to be asked for now (reads arrived meanwhile).
    func learnedReadIndex(_ revision: UInt64?, refusal: @autoclosure () -> Refusal, host: some AuthorityHost) -> Bool {
        readIndexToken = nil
        let (failed, askAgain) = reads.learned(revision)
        for read in failed { refuse(read, refusal(), host: host) }
        return askAgain
    }

    /// Answers a consistent read with `refusal`; its connection's later requests go on.
    func refuse(_ read: WaitingRequest, _ refusal: Refusal, host: some AuthorityHost) {
        host.refuse(read.request.id, refusal, route: read.route, dependsOnStaged: false)
        order.answered(for: read.route.connection, barrier: true)
    }

    /// What the authority follows reported every change through `revision` (of the other side),
    /// with the journal head staged by then.
    func followed(through revision: UInt64, stagedHead: UInt64) {
        reads.followed(through: revision, stagedHead: stagedHead)
    }

    /// The journal holds every revision through `durableRevision` durably.
    func journalDurable(through durableRevision: UInt64) {
        reads.journalDurable(through: durableRevision)
    }

    /// The journal was replaced by the other side's state at `revision`.
    func journalReplaced(at revision: UInt64) {
        reads.journalReplaced(at: revision)
    }

    // MARK: The pass

    /// Refuses the consistent reads that waited past their patience (`expired`), hands back the
    /// ready ones with their read index, then, in order, the requests of the connections whose
    /// forwarded requests were all answered, until one of them must wait again.
    func handBack(expired: @autoclosure () -> Refusal, host: some AuthorityHost) {
        for read in reads.takeExpired(now: clock.now().milliseconds) { refuse(read, expired(), host: host) }
        for (read, readIndex) in reads.takeReady() {
            order.answered(for: read.route.connection, barrier: true)
            var context = read.context
            context.readIndex = readIndex
            host.handle(read.request, route: read.route, inBatch: read.inBatch, replaying: true, context: context)
        }
        while let next = order.nextToHandBack() {
            host.handle(next.request, route: next.route, inBatch: next.inBatch, replaying: true, context: next.context)
        }
    }

    /// The daemon stops: each write answer still waiting for the journal (`held`, with the
    /// revision it waits for) is replaced by `refusal(revision)`.
    func refuse(_ held: [(waiter: HeldAnswer, revision: UInt64)], host: some AuthorityHost, _ refusal: (UInt64) -> Refusal) {
        for (entry, revision) in held {
            var answer = Beacon_V1_Reply()
            answer.id = entry.reply.id
            answer.error = refusal(revision).wire(headRevision: host.writes.durableRevision)
            host.writes.fill(entry.ticket, with: answer)
            answered(entry.connection)
        }
    }

    /// The daemon stops: every consistent read still waiting is answered `refusal`.
    func refuseEveryRead(_ refusal: Refusal, host: some AuthorityHost) {
        for read in reads.takeAll() { refuse(read, refusal, host: host) }
    }

    /// Whether requests wait to be handed back, or consistent reads to be answered.
    var holdsRequests: Bool { order.hasDue || !reads.isEmpty }

    /// How long the loop may wait for the next consistent read's deadline (0: reads are ready);
    /// nil when none waits.
    var pollTimeoutMilliseconds: Int? {
        if reads.hasReady { return 0 }
        guard let deadline = reads.nextDeadline else { return nil }
        let now = clock.now().milliseconds
        return deadline > now ? Int(deadline - now) : 0
    }

    /// How long a consistent read may wait for its read index and the copy.
    static var readPatienceMilliseconds: UInt64 { ConsistentReads<WaitingRequest>.patienceMilliseconds }
}

/// A write authority that forwards its clients' writes (a relay, an etcd front): its requests
/// wait in its ``ForwardingGate``, and it starts the consistent reads the gate lets through.
protocol ForwardingAuthority: WriteAuthority {
    var gate: ForwardingGate { get }
    /// Asks for `read`'s read index, or refuses it (the other side is out of reach): with
    /// ``ForwardingGate/start(_:unlessRefused:host:askReadIndex:)``.
    func startConsistentRead(_ read: ForwardingGate.WaitingRequest, host: some AuthorityHost)
}

extension ForwardingAuthority {
    var servesConsistentReads: Bool { true }

    func holdsBack(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext,
                   host: some AuthorityHost) -> Bool {
        gate.holdsBack(request, route: route, inBatch: inBatch, replaying: replaying, context: context, host: host) { read in
            startConsistentRead(read, host: host)
        }
    }
}
