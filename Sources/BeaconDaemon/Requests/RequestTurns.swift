import BeaconProtocol

/// The request socket's peers served in turn: how much read work one peer's requests may cause in
/// one pass of the loop, and the requests that wait for that peer's next turn.
///
/// A request costs what its reply weighs: a `Batch` of 256 `List`s of a large prefix is megabytes
/// of encoding for one message of a few kilobytes. So each peer (one identity, whatever its
/// number of connections) may produce ``bytesPerTurn`` of read replies in a pass; once it has,
/// its further requests — the rest of a batch, and every later message of its connections —
/// wait here, in order per connection, and the loop serves them a turn per pass, peer after peer.
/// Another peer's request then waits for at most one turn of each busy peer, never for a whole
/// backlog. Work of a connection that closed is dropped at once (``drop(_:)``).
///
/// State only, owned by the loop thread (checked in debug builds).
struct RequestTurns {
    /// Reply bytes one peer's reads may produce in one pass before its further requests wait.
    static let bytesPerTurn = 64 << 10

    /// A request's work kept for its peer's next turn.
    enum Work {
        /// A whole message not yet handled: its body, the envelope its reply goes back with.
        case message(body: [UInt8], envelope: ReplyEnvelope, context: RequestContext)
        /// The requests of a batch from `next` on (their byte ranges in `body`).
        case batchRest(body: [UInt8], requests: [Range<Int>], next: Int, replies: BatchReplies, context: RequestContext)
        /// The same for a batch that needed the full decoder.
        case decodedBatchRest(requests: [Beacon_V1_Request], next: Int, replies: BatchReplies, context: RequestContext)
    }

    private struct Waiting {
        var work: [Work]
        var start = 0
        var peer: String
        /// When its oldest work was put here (the loop's clock).
        var since: MonotonicTime
    }

    /// Reply bytes produced per peer in this pass.
    private var spent: [String: Int] = [:]
    /// Reply bytes built per peer for batches not yet answered whole: they count against the
    /// peer's reply allowance as what it holds does (its other batches cannot each take it all).
    private var building: [String: Int] = [:]
    /// Whether some peer has used up its turn in this pass.
    private(set) var someTurnIsSpent = false
    /// Work per connection, in arrival order.
    private var waiting: [RoutingID: Waiting] = [:]
    /// Connections with work, in the order they are served.
    private var order: [RoutingID] = []
    private let ownership: LoopOwnership

    init(ownership: LoopOwnership) {
        self.ownership = ownership
    }

    /// Makes the calling thread (the loop's) the owner.
    func claimOwnership() { ownership.claim() }

    /// Whether any request waits for its turn (the loop then polls without sleeping).
    var hasWaiting: Bool { !order.isEmpty }

    /// Requests waiting, all connections together.
    var waitingCount: Int { waiting.values.reduce(0) { $0 + $1.work.count - $1.start } }

    /// How long the oldest waiting work has waited at `now`, in milliseconds (0: none waits).
    func oldestWait(at now: MonotonicTime) -> UInt64 {
        waiting.values.map { $0.since.milliseconds(until: now) }.max() ?? 0
    }

    /// A new pass: every peer has a full turn again.
    mutating func startPass() {
        ownership.check()
        if !spent.isEmpty { spent.removeAll(keepingCapacity: true) }
        someTurnIsSpent = false
    }

    /// Whether `peer` has used up its turn in this pass.
    func isSpent(_ peer: String) -> Bool { spent[peer, default: 0] >= Self.bytesPerTurn }

    /// Counts `bytes` of replies produced for `peer`.
    mutating func charge(_ peer: String, bytes: Int) {
        ownership.check()
        spent[peer, default: 0] += bytes
        if spent[peer, default: 0] >= Self.bytesPerTurn { someTurnIsSpent = true }
    }

    /// Whether a message of connection `id` from `peer` must wait: its peer has used its turn,
    /// or earlier work of its connection waits. Two flags on the common path.
    @inline(__always)
    func mustWait(_ id: RoutingID, peer: String) -> Bool {
        guard hasWaiting || someTurnIsSpent else { return false }
        return isWaiting(id) || isSpent(peer)
    }

    /// Reply bytes built for `peer`'s unfinished batches.
    func bytesBuilding(for peer: String) -> Int { building[peer] ?? 0 }

    /// Counts `bytes` built for a batch of `peer` (negative: released, the batch was answered or dropped).
    mutating func build(_ bytes: Int, for peer: String) {
        ownership.check()
        let left = building[peer, default: 0] + bytes
        building[peer] = left > 0 ? left : nil
    }

    /// Whether connection `id` has work waiting: its later messages wait behind it.
    func isWaiting(_ id: RoutingID) -> Bool { waiting[id] != nil }

    /// Keeps `work` of connection `id` (of `peer`) for a later turn, behind what it has waiting.
    mutating func park(_ work: Work, of id: RoutingID, peer: String, now: MonotonicTime) {
        ownership.check()
        if waiting[id] == nil {
            waiting[id] = Waiting(work: [work], peer: peer, since: now)
            order.append(id)
        } else {
            waiting[id]!.work.append(work)
        }
    }

    /// Puts `work`, the rest of what ``next(now:)`` just handed out for connection `id`, back
    /// first in its line: it comes before the connection's later messages.
    mutating func parkContinuation(_ work: Work, of id: RoutingID, peer: String, now: MonotonicTime) {
        ownership.check()
        // Taken out while it changes: the dictionary keeps no second reference to its array.
        guard var entry = waiting.removeValue(forKey: id) else {
            park(work, of: id, peer: peer, now: now)
            return
        }
        if entry.start > 0 {
            entry.start -= 1
            entry.work[entry.start] = work
        } else {
            entry.work.insert(work, at: 0)
        }
        waiting[id] = entry
    }

    /// The next work to do in this pass: the first waiting work of the first connection whose
    /// peer still has a turn, taken out; that connection goes to the end of the line.
    mutating func next(now: MonotonicTime) -> (id: RoutingID, work: Work)? {
        ownership.check()
        for index in order.indices {
            let id = order[index]
            guard let peer = waiting[id]?.peer, !isSpent(peer), var entry = waiting.removeValue(forKey: id) else { continue }
            let work = entry.work[entry.start]
            entry.start += 1
            order.remove(at: index)
            if entry.start < entry.work.count {
                // What was handed out goes (a connection that always has work waiting would
                // otherwise keep every message it ever sent).
                if entry.start >= 32 && entry.start * 2 >= entry.work.count {
                    entry.work.removeFirst(entry.start)
                    entry.start = 0
                }
                entry.since = now
                waiting[id] = entry
                order.append(id)
            }
            return (id, work)
        }
        return nil
    }

    /// Drops the work of connection `id` (it closed); returns how many works were dropped.
    @discardableResult
    mutating func drop(_ id: RoutingID) -> Int {
        ownership.check()
        guard let entry = waiting.removeValue(forKey: id) else { return 0 }
        order.removeAll { $0 == id }
        for work in entry.work[entry.start...] {
            switch work {
            case .batchRest(_, _, _, let replies, _), .decodedBatchRest(_, _, let replies, _):
                build(-replies.builtBytes, for: replies.peer)
            case .message:
                break
            }
        }
        return entry.work.count - entry.start
    }
}
