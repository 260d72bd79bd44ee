import BeaconProtocol
import Foundation

/// A relay's request order per connection. A write it forwards is answered by the upstream later;
/// whatever the same connection sends after it — a read that must see it, a write that must not
/// be applied before it — waits until every forwarded request of that connection is answered,
/// then is handed back in order. Forwarded writes pipeline behind each other when the one they
/// go to applies them in order (a relay's upstream answers one connection in order); otherwise
/// (an etcd front's concurrent transactions) a write waits for the one before it too. What waits
/// is bounded in bytes per connection.
///
/// A value: no sockets, no clock; the relay asks it and acts.
struct ForwardingOrder<Request> {
    /// A request that waits.
    struct Waiting {
        var request: Request
        /// Whether it is forwarded itself when its turn comes (a write, a `KeepAlive`).
        var isForwarded: Bool
        var bytes: Int
    }

    /// What becomes of a request as it arrives.
    enum Admission: Equatable {
        /// Handle it now.
        case now
        /// It waits: kept, handed back by ``nextToHandBack()``.
        case waits
        /// Keeping it would pass the bound: the connection is to be closed; what waited is dropped.
        case overBound(held: Int)
    }

    /// Per connection, forwarded requests not yet answered.
    private(set) var unanswered: [RoutingID: Int] = [:]
    /// Per connection, how many of those no forwarded request may pipeline behind (a consistent
    /// read learning its read index: a write sent after it must not be forwarded ahead of it).
    private var barriers: [RoutingID: Int] = [:]
    private var waiting: [RoutingID: (requests: [Waiting], bytes: Int)] = [:]
    /// Connections whose forwarded requests were all answered, with requests waiting.
    private var due: Set<RoutingID> = []
    /// The connection being handed back.
    private var handingBack: RoutingID?
    /// Whether a forwarded request may go while an earlier one of its connection is unanswered.
    let pipelinesForwarded: Bool

    init(pipelinesForwarded: Bool = true) {
        self.pipelinesForwarded = pipelinesForwarded
    }

    /// Requests waiting, over all connections.
    var waitingCount: Int { waiting.values.reduce(0) { $0 + $1.requests.count } }

    /// Decides whether `request` of `connection` goes now or waits, with at most `boundBytes` of
    /// the connection's requests waiting (`handedBack`: it is one that waited, on its way back now).
    /// - Parameter bytes: the request's size, asked only if it is to wait.
    mutating func admit(_ request: Request, of connection: RoutingID, isForwarded: Bool, bytes: @autoclosure () -> Int,
                        boundBytes: Int, handedBack: Bool = false) -> Admission {
        let inFlight = unanswered[connection] ?? 0
        let queued = !handedBack && waiting[connection] != nil
        guard inFlight > 0 || queued else { return .now }
        if !queued && isForwarded && pipelinesForwarded && barriers[connection] == nil { return .now }  // writes pipeline behind writes
        let size = bytes()
        let held = (waiting[connection]?.bytes ?? 0) + size
        guard held <= boundBytes else {
            drop(connection)
            return .overBound(held: held)
        }
        waiting[connection, default: ([], 0)].requests.append(Waiting(request: request, isForwarded: isForwarded, bytes: size))
        waiting[connection]!.bytes = held
        return .waits
    }

    /// A request of `connection` was forwarded (`barrier`: nothing forwarded pipelines behind it).
    mutating func forwarded(by connection: RoutingID, barrier: Bool = false) {
        unanswered[connection, default: 0] += 1
        if barrier { barriers[connection, default: 0] += 1 }
    }

    /// A forwarded request of `connection` was answered (and, for a write, shown here).
    mutating func answered(for connection: RoutingID, barrier: Bool = false) {
        if barrier {
            barriers[connection, default: 1] -= 1
            if barriers[connection] == 0 { barriers[connection] = nil }
        }
        guard let left = unanswered[connection] else { return }
        if left > 1 {
            unanswered[connection] = left - 1
            return
        }
        unanswered[connection] = nil
        if waiting[connection] != nil { due.insert(connection) }
    }

    /// The next waiting request whose turn has come, in its connection's order: until a request
    /// that must wait (one not forwarded, or any without pipelining) meets forwarded ones of its
    /// connection still unanswered.
    mutating func nextToHandBack() -> Request? {
        while true {
            if handingBack == nil {
                guard let connection = due.popFirst() else { return nil }
                handingBack = connection
            }
            let connection = handingBack!
            guard let next = waiting[connection]?.requests.first,
                  (next.isForwarded && pipelinesForwarded && barriers[connection] == nil) || (unanswered[connection] ?? 0) == 0 else {
                handingBack = nil
                continue
            }
            waiting[connection]!.requests.removeFirst()
            waiting[connection]!.bytes -= next.bytes
            if waiting[connection]!.requests.isEmpty { waiting[connection] = nil }
            return next.request
        }
    }

    /// Forgets what `connection` has waiting.
    mutating func drop(_ connection: RoutingID) {
        waiting[connection] = nil
        due.remove(connection)
        if handingBack == connection { handingBack = nil }
    }

    /// Whether anything is to be handed back.
    var hasDue: Bool { !due.isEmpty || handingBack != nil }
}

/// A request forwarded and not yet answered: where its answer goes, and what was sent
/// (`Work`: what the authority needs of it once answered).
struct ForwardedRequest<Work> {
    var connection: RoutingID
    var ticket: HoldTicket
    /// The client's request id.
    var id: UInt64
    /// The client's write id, as it sent it (empty for a `KeepAlive`, or a write without one).
    var clientWriteID: Data
    var work: Work
}

/// A forwarded write's answer, held until this daemon's journal shows its revision.
struct HeldAnswer {
    var connection: RoutingID
    var ticket: HoldTicket
    var reply: Beacon_V1_Reply
    /// A retry of a write applied earlier: its versions are read from the journal once shown.
    var replayedRevision: UInt64?
}

/// Writes the upstream acknowledged at a revision this relay has not journaled yet, in revision
/// order: each is answered once the relay's own journal shows it (read-your-writes through the
/// relay), and only while the relay holds the upstream's current epoch.
struct MirrorWaiters<Waiter> {
    private struct Entry {
        var epoch: UInt64
        var revision: UInt64
        var waiter: Waiter
    }

    private var entries: [Entry] = []

    var count: Int { entries.count }
    var isEmpty: Bool { entries.isEmpty }

    /// Adds a write acknowledged at `revision` of `epoch`, after those of that epoch at or below it.
    mutating func add(_ waiter: Waiter, epoch: UInt64, revision: UInt64) {
        let place = entries.lastIndex { $0.epoch != epoch || $0.revision <= revision }.map { $0 + 1 } ?? 0
        entries.insert(Entry(epoch: epoch, revision: revision, waiter: waiter), at: place)
    }

    /// Takes the writes the relay now shows, in order: with the journal at the upstream's epoch,
    /// those through `durableRevision` and those of another epoch (gone with that journal:
    /// answered as they are, never waited for). Nothing while the epochs differ.
    mutating func takeShown(journalEpoch: UInt64, upstreamEpoch: UInt64, durableRevision: UInt64) -> [Waiter] {
        guard upstreamEpoch == journalEpoch else { return [] }
        let count = entries.prefix { $0.epoch != journalEpoch || $0.revision <= durableRevision }.count
        guard count > 0 else { return [] }
        defer { entries.removeFirst(count) }
        return entries[..<count].map(\.waiter)
    }

    /// Takes every waiting write with its revision (at shutdown).
    mutating func takeAll() -> [(waiter: Waiter, revision: UInt64)] {
        defer { entries.removeAll() }
        return entries.map { ($0.waiter, $0.revision) }
    }
}
