import BeaconProtocol

/// The consistent reads (`Get`, `List`, `Snapshot` with `consistent`, `Ping` with `sync`) of a
/// daemon whose writes are decided elsewhere (an etcd front, a relay), from arrival to answer.
///
/// Each read waits for a **read index**: a revision, learned from whoever decides the writes,
/// at or above every write acknowledged anywhere before the read arrived. Then it waits until
/// this daemon's copy holds that revision, and is answered from the copy. A read index asked for
/// before a read arrived does not cover the writes acknowledged in between, so reads that arrive
/// while one is being learned share the next; at most one is asked for at a time.
///
/// What the copy holds is told as the follower learns it: ``followed(through:stagedHead:)`` (the
/// follower reported every change through a revision, with the journal head staged by then) and
/// ``journalDurable(through:)``; the reads whose read index the durable journal holds are then
/// ready (``takeReady()``).
///
/// A value: no sockets, no clock. Its owner asks for the read index, tells it what arrived, and
/// answers the reads it hands out.
struct ConsistentReads<Read> {
    private struct Waiting {
        var read: Read
        /// Monotonic milliseconds after which it is refused.
        var deadline: UInt64
    }

    /// The reads the read index being learned is for; nil when none is being learned.
    private var asked: [Waiting]?
    /// Reads that arrived while one was being learned: they share the next.
    private var queued: [Waiting] = []
    /// Reads whose read index is known, waiting for the copy to hold it.
    private var awaiting: [(revision: UInt64, waiting: Waiting)] = []
    /// Reads whose read index the durable journal holds, to be answered.
    private var ready: [(read: Read, readIndex: UInt64)] = []
    /// The revision through which the durable journal holds everything the follower reported.
    private(set) var journaledThrough: UInt64 = 0
    /// What the follower reported it went through, with the journal head staged by then.
    private var followed: [(stagedHead: UInt64, through: UInt64)] = []

    /// How long a consistent read may wait for its read index and the copy, in milliseconds.
    static var patienceMilliseconds: UInt64 { 5_000 }

    /// Whether no read waits or is ready (a read index may still be on its way, for nobody).
    var isEmpty: Bool { (asked ?? []).isEmpty && queued.isEmpty && awaiting.isEmpty && ready.isEmpty }

    /// Whether reads are ready to be answered.
    var hasReady: Bool { !ready.isEmpty }

    /// Takes a read that arrived at `now`.
    /// - Returns: whether a read index is to be asked for now (none is being learned).
    mutating func add(_ read: Read, now: UInt64) -> Bool {
        let waiting = Waiting(read: read, deadline: now + Self.patienceMilliseconds)
        guard asked == nil else {
            queued.append(waiting)
            return false
        }
        asked = [waiting]
        return true
    }

    /// The read index asked for was learned (`revision`) or could not be (nil).
    /// - Returns: the reads that failed with it, and whether the next read index is to be asked
    ///   for now (reads arrived meanwhile).
    mutating func learned(_ revision: UInt64?) -> (failed: [Read], askAgain: Bool) {
        let reads = asked ?? []
        asked = nil
        var failed: [Read] = []
        if let revision {
            awaiting += reads.map { (revision, $0) }
        } else {
            failed = reads.map(\.read)
        }
        guard !queued.isEmpty else { return (failed, false) }
        asked = queued
        queued = []
        return (failed, true)
    }

    /// The follower reported every change through `revision`; the journal head it had staged
    /// by then was `stagedHead`.
    mutating func followed(through revision: UInt64, stagedHead: UInt64) {
        followed.append((stagedHead, revision))
    }

    /// The journal holds every revision through `revision` durably: what was followed through
    /// by then is held, and the reads whose read index that covers are ready.
    mutating func journalDurable(through revision: UInt64) {
        while let first = followed.first, first.stagedHead <= revision {
            journaledThrough = max(journaledThrough, first.through)
            followed.removeFirst()
        }
        guard awaiting.contains(where: { $0.revision <= journaledThrough }) else { return }
        ready += awaiting.filter { $0.revision <= journaledThrough }.map { ($0.waiting.read, $0.revision) }
        awaiting.removeAll { $0.revision <= journaledThrough }
    }

    /// The journal was replaced by a state at `revision` (maybe of another epoch, numbered anew):
    /// it holds everything through it, and what was followed before counts no more.
    mutating func journalReplaced(at revision: UInt64) {
        followed = []
        journaledThrough = revision
        journalDurable(through: revision)
    }

    /// The reads ready to be answered, each with its read index.
    mutating func takeReady() -> [(read: Read, readIndex: UInt64)] {
        defer { ready = [] }
        return ready
    }

    /// The reads still waiting at their deadline; the read index being learned stays asked for.
    mutating func takeExpired(now: UInt64) -> [Read] {
        var expired: [Read] = []
        func split(_ list: inout [Waiting]) {
            expired += list.filter { $0.deadline <= now }.map(\.read)
            list.removeAll { $0.deadline <= now }
        }
        if var reads = asked {
            split(&reads)
            asked = reads  // still being learned, though maybe for nobody now
        }
        split(&queued)
        expired += awaiting.filter { $0.waiting.deadline <= now }.map(\.waiting.read)
        awaiting.removeAll { $0.waiting.deadline <= now }
        return expired
    }

    /// The earliest deadline of a read still waiting.
    var nextDeadline: UInt64? {
        ((asked ?? []) + queued + awaiting.map(\.waiting)).map(\.deadline).min()
    }

    /// Every read still waiting (the daemon stops, or its copy was replaced by another's).
    mutating func takeAll() -> [Read] {
        defer {
            asked = asked.map { _ in [] }
            queued = []
            awaiting = []
        }
        return (asked ?? []).map(\.read) + queued.map(\.read) + awaiting.map(\.waiting.read) + takeReady().map(\.read)
    }
}

extension Beacon_V1_Request {
    /// Whether it asks for a consistent read: a `Get`, `List` or `Snapshot` at head with
    /// `consistent`, or a `Ping` with `sync`.
    var asksForConsistentRead: Bool {
        switch op {
        case .get(let get): get.consistent
        case .list(let list): list.consistent
        case .snapshot(let snapshot): snapshot.consistent && snapshot.revision == 0
        case .ping(let ping): ping.sync
        default: false
        }
    }
}
