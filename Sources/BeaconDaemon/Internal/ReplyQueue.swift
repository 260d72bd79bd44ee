import BeaconProtocol
import BeaconZMQ

/// A reply the loop has decided and not yet released.
enum PendingReply {
    /// A write that changed one key: answered once its revision is durable.
    case oneKeyWrite(id: UInt64, revision: UInt64, version: UInt64)
    /// A write that changed several keys (a transaction).
    case write(id: UInt64, revision: UInt64, versions: [UInt64])
    /// Any other answer. `dependsOnStaged`: a refusal decided against the current state, writes
    /// not yet durable included (a version conflict, say), which must not outlive their rollback.
    indirect case answer(Beacon_V1_Reply, dependsOnStaged: Bool)
    /// An answer already encoded, its request id included, decided against durable state only
    /// (a `Delta` or `History` page read from the journal).
    case encoded([UInt8])
    /// A place held for an answer that comes later (a compaction's): the connection's later
    /// replies wait behind it.
    case held(HoldTicket)
}

/// Names a reply whose place ``ReplyQueue/hold(_:at:)`` kept.
struct HoldTicket: Hashable {
    fileprivate let number: UInt64
}

/// The replies decided but not yet sent, released in the order they were decided once the
/// journal's durable head reaches the state each was decided against (PROTOCOL.md §4.1).
///
/// Every reply is decided against the staged head of the moment, and that head never goes down
/// while anything waits, so one queue in decision order keeps each connection's replies in
/// request order and releases none early: no reply reveals a write a crash can take back, and
/// none names a revision above the durable head. If a commit fails, what waits on it is answered
/// as rolled back instead (``rollBack(durableRevision:reason:deliver:)``).
///
/// State only; the loop sends what it releases. Loop thread only.
struct ReplyQueue {
    private struct Entry {
        var route: ReplyRoute
        var reply: PendingReply
        /// The staged head the reply was decided against.
        var revision: UInt64
    }

    private let entries = EntryRing()
    /// Connections with a held place: their replies queue here, behind it, by routing id.
    private var holding: [RoutingID: [Entry]] = [:]
    private var nextTicket: UInt64 = 0
    /// Which connections have replies in `entries`: each one's last entry, by its number (the
    /// entries appended before it). Still there while at or after the first entry's number; the
    /// last connection to queue is kept apart, so that one writer's stream of replies costs no
    /// table update each.
    private var lastQueuedConnection = RoutingID(UnsafeRawBufferPointer(start: nil, count: 0))
    /// `lastQueuedConnection`'s last entry; `nil` before any.
    private var lastQueuedNumber: UInt64?
    private var lastQueuedByConnection: [RoutingID: UInt64] = [:]
    /// Table entries left after the last pass that dropped those no longer in `entries`.
    private var keptByLastPrune = 0

    /// Replies waiting, held places included.
    var count: Int { entries.count + holding.values.reduce(0) { $0 + $1.count } }

    /// Whether a reply to `route` decided at `revision` may leave at once, unqueued: it is durable,
    /// and nothing of its connection is ahead of it (an entry waiting for a commit, or a place its
    /// connection holds). Replies to other connections may wait meanwhile: each connection's
    /// replies keep their order, and none leaves early.
    func mayLeaveAtOnce(to route: ReplyRoute, decidedAt revision: UInt64, durableRevision: UInt64) -> Bool {
        guard revision <= durableRevision else { return false }
        if entries.isEmpty && holding.isEmpty { return true }
        let connection = route.connection
        return !hasQueued(connection) && (holding.isEmpty || holding[connection] == nil)
    }

    /// Whether `connection` has a reply in `entries`.
    private func hasQueued(_ connection: RoutingID) -> Bool {
        guard !entries.isEmpty else { return false }
        let last = lastQueuedConnection == connection ? lastQueuedNumber : lastQueuedByConnection[connection]
        return last.map { $0 >= entries.firstNumber } ?? false
    }

    /// Queues `reply`, decided against state at `revision`, behind everything decided before it
    /// (``mayLeaveAtOnce(to:decidedAt:durableRevision:)`` says when it need not wait).
    mutating func enqueue(_ reply: consuming PendingReply, to route: consuming ReplyRoute, decidedAt revision: UInt64) {
        if !holding.isEmpty, case let connection = route.connection, holding[connection] != nil {
            holding[connection]!.append(Entry(route: route, reply: reply, revision: revision))
        } else {
            noteQueued(route, number: entries.appended)
            entries.append(Entry(route: route, reply: reply, revision: revision))
        }
    }

    /// Records that entry `number` of `entries` goes to `route`'s connection.
    @inline(__always)
    private mutating func noteQueued(_ route: ReplyRoute, number: UInt64) {
        let connection = route.connection
        if lastQueuedConnection != connection {
            if let previous = lastQueuedNumber { lastQueuedByConnection[lastQueuedConnection] = previous }
            lastQueuedConnection = connection
            // Connections whose replies have all left are dropped now and then, not one by one.
            if lastQueuedByConnection.count > max(64, 2 * keptByLastPrune) {
                let first = entries.firstNumber
                lastQueuedByConnection = lastQueuedByConnection.filter { $0.value >= first }
                keptByLastPrune = lastQueuedByConnection.count
            }
        }
        lastQueuedNumber = number
    }

    /// Keeps a place for a reply that ``fill(_:with:durableRevision:deliver:)`` gives later; the
    /// connection's replies decided meanwhile wait behind it.
    mutating func hold(_ route: ReplyRoute, at revision: UInt64) -> HoldTicket {
        nextTicket += 1
        let ticket = HoldTicket(number: nextTicket)
        holding[route.connection, default: []].append(Entry(route: route, reply: .held(ticket), revision: revision))
        return ticket
    }

    /// Gives the held place of `ticket` its reply; it and the replies behind it then queue as
    /// if decided now (still each waiting for its own revision).
    mutating func fill(_ ticket: HoldTicket, with reply: Beacon_V1_Reply, durableRevision: UInt64,
                       deliver: (ReplyRoute, PendingReply) -> Void) {
        for (connection, waiting) in holding {
            guard let index = waiting.firstIndex(where: { if case .held(ticket) = $0.reply { true } else { false } }) else { continue }
            var waiting = waiting
            waiting[index].reply = .answer(reply, dependsOnStaged: false)
            holding[connection] = nil
            // The first entry is the oldest held place; what follows a later one stays held.
            let ready = waiting.firstIndex { if case .held = $0.reply { true } else { false } } ?? waiting.endIndex
            // What is ready leaves (or queues) first, while the connection holds no place: put
            // behind a later held place, it would wait for that one.
            for entry in waiting[..<ready] {
                if mayLeaveAtOnce(to: entry.route, decidedAt: entry.revision, durableRevision: durableRevision) {
                    deliver(entry.route, entry.reply)
                } else {
                    enqueue(entry.reply, to: entry.route, decidedAt: entry.revision)
                }
            }
            if ready < waiting.endIndex { holding[connection] = Array(waiting[ready...]) }
            return
        }
    }

    /// Releases, in order, every reply decided at or below `durableRevision`.
    mutating func release(durableRevision: UInt64, deliver: (ReplyRoute, PendingReply) -> Void) {
        while let revision = entries.firstRevision, revision <= durableRevision {
            let entry = entries.removeFirst()
            deliver(entry.route, entry.reply)
        }
        if entries.isEmpty && !lastQueuedByConnection.isEmpty {
            lastQueuedByConnection.removeAll(keepingCapacity: true)
            keptByLastPrune = 0
        }
    }

    /// A commit failed and the store went back to `durableRevision`: what waited for a later
    /// revision is answered now, writes as not done, refusals decided against the rolled-back
    /// writes as retryable (READ_ONLY), other answers as they were, naming the durable head.
    mutating func rollBack(durableRevision: UInt64, reason: String, deliver: (ReplyRoute, PendingReply) -> Void) {
        func rolledBack(_ entry: inout Entry) {
            guard entry.revision > durableRevision else { return }
            entry.revision = durableRevision
            entry.reply = Self.rolledBack(entry.reply, durableRevision: durableRevision, reason: reason)
        }
        entries.forEachInPlace(rolledBack)
        for connection in Array(holding.keys) {
            for index in holding[connection]!.indices { rolledBack(&holding[connection]![index]) }
        }
        release(durableRevision: durableRevision, deliver: deliver)
    }

    private static func rolledBack(_ reply: PendingReply, durableRevision: UInt64, reason: String) -> PendingReply {
        func readOnly(_ id: UInt64, _ message: String) -> PendingReply {
            var answer = Beacon_V1_Reply()
            answer.id = id
            answer.error = .with {
                $0.code = .readOnly
                $0.message = message
                $0.headRevision = durableRevision
            }
            return .answer(answer, dependsOnStaged: false)
        }
        switch reply {
        case .oneKeyWrite(let id, _, _), .write(let id, _, _):
            return readOnly(id, "the journal cannot be written (\(reason)); nothing was changed")
        case .answer(let answer, true):
            return readOnly(answer.id, "the journal cannot be written (\(reason)); this answer depended on writes that were rolled back, retry")
        case .answer(var answer, false):
            if case .error = answer.result { answer.error.headRevision = min(answer.error.headRevision, durableRevision) }
            return .answer(answer, dependsOnStaged: false)
        case .held, .encoded:
            return reply
        }
    }

    /// The queue proper: a ring that entries are moved into and out of, never copied (under
    /// load it never empties, and an array's front removal moved every waiting entry). Its
    /// storage is initialized and moved from directly: no optional to test and no old value to
    /// destroy on every append. Owned by one ``ReplyQueue``, which is not copied.
    private final class EntryRing {
        private var slots: UnsafeMutablePointer<Entry>
        private var capacity = 64
        private var first = 0
        private(set) var count = 0
        /// Entries ever appended: the next one's number.
        private(set) var appended: UInt64 = 0
        /// The number of the first entry waiting (`appended` when none does).
        var firstNumber: UInt64 { appended - UInt64(count) }

        init() { slots = .allocate(capacity: capacity) }

        deinit {
            while count > 0 { _ = removeFirst() }
            slots.deallocate()
        }

        var isEmpty: Bool { count == 0 }
        var firstRevision: UInt64? { count == 0 ? nil : slots[first].revision }

        func append(_ entry: consuming Entry) {
            if count == capacity { grow() }
            (slots + ((first + count) & (capacity - 1))).initialize(to: entry)
            count += 1
            appended += 1
        }

        func removeFirst() -> Entry {
            precondition(count > 0, "removeFirst on an empty ring")
            let entry = (slots + first).move()
            first = (first + 1) & (capacity - 1)
            count -= 1
            return entry
        }

        func forEachInPlace(_ body: (inout Entry) -> Void) {
            for offset in 0..<count { body(&slots[(first + offset) & (capacity - 1)]) }
        }

        /// Doubles the ring (its size stays a power of two), the waiting entries first.
        private func grow() {
            let larger = UnsafeMutablePointer<Entry>.allocate(capacity: capacity * 2)
            for offset in 0..<count { (larger + offset).moveInitialize(from: slots + ((first + offset) & (capacity - 1)), count: 1) }
            slots.deallocate()
            slots = larger
            capacity *= 2
            first = 0
        }
    }
}
