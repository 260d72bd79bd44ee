import BeaconJournal
import BeaconProtocol
import Logging

/// What the write path asks of the daemon around it: to publish what committed, send the replies
/// it releases, and hear of commits, rollbacks and the keys the daemon's own writes removed.
protocol WritePathDelegate: AnyObject {
    /// Publishes a committed batch, in order, before any of its replies is sent.
    func publish(_ batch: [StagedWrite])
    /// Sends a reply the write path released.
    func deliver(_ route: ReplyRoute, _ reply: PendingReply)
    /// A committed batch was published and its replies released.
    func committed(_ batch: [StagedWrite])
    /// A commit failed: `refused` (the batch and every write staged behind it) was undone and its
    /// replies are about to be refused.
    func rolledBack(_ refused: [StagedWrite], _ error: JournalError)
    /// A write of the daemon's own (an expiry, an ended session) removed these keys.
    func removedByDaemon(_ changes: [JournalChange])
}

/// The signals' state and the writes on their way into the journal: the store, the group commit,
/// the replies that wait for it, the write ids that make retries safe, the read-only period after
/// a failed commit, and the timers of key expiries and writers' sessions.
///
/// It reads time only from its ``DaemonClock`` and the journal only through ``JournalStore``, so
/// that all of this runs in a test without sockets, sleeps or root. Loop thread only (checked in
/// debug builds once the loop has claimed it, ``LoopOwnership``).
final class WritePath {
    /// What may change on reload.
    struct Settings {
        /// A session's time to live when a write starts it.
        var sessionTTLMilliseconds: UInt64
        /// Writes staged before the loop waits for the commit in flight.
        var maxBatch: Int
        /// Whether keys expire and sessions end here; not on a relay, whose upstream sends the deletes.
        var expiresKeys: Bool
    }

    /// The write path's own timers.
    enum Timer {
        /// Delete `key` if it still carries the expiry this timer was set for (`expiresAtMilliseconds`,
        /// the wall-clock time journaled with it, names that expiry; `modRevision` the write).
        case expiry(key: String, modRevision: UInt64, expiresAtMilliseconds: UInt64)
        /// End `session` if no `KeepAlive` renewed it meanwhile.
        case sessionEnd(session: [UInt8])
    }

    /// Batches up to this size commit on the loop thread when the commit thread is idle: at low
    /// load that saves two thread hand-offs per write; under load batches grow and pipeline.
    static let inlineCommitLimit = 32

    let clock: any DaemonClock
    var settings: Settings
    let ownership = LoopOwnership()
    private let logger: Logger
    /// The running daemon, which owns this write path and outlives it; a placeholder that traps
    /// until ``attach(_:)`` names it (the daemon is built around its write path).
    private unowned(unsafe) var delegate: any WritePathDelegate

    // The loop thread's alone: no dynamic exclusivity checks (each cost as much as the access).
    /// The journal, the commit thread and the writes waiting for them.
    @exclusivity(unchecked) let pipeline: WritePipeline
    /// The signals. Settable because its ordered scans sort an index lazily (a read that
    /// mutates); only the write path applies changes to it.
    @exclusivity(unchecked) var store = SignalStore()
    /// The last revision journaled (under the configured durability) and published: behind the
    /// store's head while writes are staged or committing. No reply waits for more, none names more.
    @exclusivity(unchecked) private(set) var durableRevision: UInt64 = 0
    /// Replies decided and waiting for the writes they depend on to be durable.
    @exclusivity(unchecked) var replies = ReplyQueue()
    @exclusivity(unchecked) private(set) var writeIDs: WriteIDMemory
    @exclusivity(unchecked) private(set) var backoff = ReadOnlyBackoff()
    @exclusivity(unchecked) private(set) var sessions = SessionTable()
    @exclusivity(unchecked) private var timers = TimerQueue<Timer>()

    /// Write ids remembered for idempotent retries.
    static let defaultWriteIDMemory = 100_000

    /// Takes over `journal` and starts its commit thread (`onCommitted` runs there after each
    /// batch: it wakes the loop). Nothing is loaded until ``load()``.
    init(journal: any JournalStore, clock: any DaemonClock, settings: Settings, logger: Logger,
         writeIDMemory: Int = WritePath.defaultWriteIDMemory, delegate: any WritePathDelegate = Unattached.shared,
         onCommitted: @escaping @Sendable () -> Void) {
        self.clock = clock
        self.settings = settings
        self.logger = logger
        self.delegate = delegate
        writeIDs = WriteIDMemory(capacity: writeIDMemory)
        pipeline = WritePipeline(journal: journal, onCommitted: onCommitted)
    }

    /// Names the daemon that publishes, answers and journals what this write path decides; once,
    /// before the loop runs.
    func attach(_ delegate: any WritePathDelegate) {
        precondition(self.delegate === Unattached.shared, "a write path works for one daemon")
        self.delegate = delegate
    }

    /// The delegate of a write path no daemon has attached yet: any call is a bug.
    final class Unattached: WritePathDelegate, Sendable {
        static let shared = Unattached()
        private static func unattached() -> Never { preconditionFailure("the write path was used before its daemon attached") }
        func publish(_ batch: [StagedWrite]) { Self.unattached() }
        func deliver(_ route: ReplyRoute, _ reply: PendingReply) { Self.unattached() }
        func committed(_ batch: [StagedWrite]) { Self.unattached() }
        func rolledBack(_ refused: [StagedWrite], _ error: JournalError) { Self.unattached() }
        func removedByDaemon(_ changes: [JournalChange]) { Self.unattached() }
    }

    /// The journal, for reads, compaction and backups: commits what is staged first.
    var journal: any JournalStore {
        flush()
        return pipeline.journal
    }

    var epoch: UInt64 { pipeline.epoch }
    var headRevision: UInt64 { store.headRevision }

    /// Loads the store from the journal, with the write ids of its recent revisions, and sets the
    /// timers of what expires or is bound to a session.
    func load() throws(JournalError) {
        ownership.check()
        flush()
        var loaded = SignalStore()
        let journal = pipeline.journal
        try journal.loadState { loaded.load($0) }
        loaded.loaded(headRevision: journal.headRevision)
        store = loaded
        durableRevision = journal.headRevision
        writeIDs.removeAll()
        for (writeID, revision) in try journal.recentWriteIDs(revisions: UInt64(writeIDs.capacity)) {
            writeIDs.remember(writeID, revision: revision)
        }
        guard settings.expiresKeys else { return }
        let wallNow = clock.wallMilliseconds()
        let now = clock.now()
        store.forEachExpiringOrBound { key, entry in
            if entry.expiresAtMilliseconds > 0 {
                // What is left of the TTL by the wall clock it was journaled with (none if past).
                let left = entry.expiresAtMilliseconds > wallNow ? entry.expiresAtMilliseconds - wallNow : 0
                timers.schedule(.expiry(key: key, modRevision: entry.modRevision, expiresAtMilliseconds: entry.expiresAtMilliseconds),
                                at: now.adding(milliseconds: left))
            }
            // Sessions get a full time to live after a restart for their writers to renew them.
            if !entry.session.isEmpty {
                bind(key, toSession: entry.session, now: now)
            }
        }
    }

    /// Drops the store's tombstones the journal's compaction removed.
    func dropTombstones() { store.dropTombstones(through: pipeline.compactedRevision) }

    /// Forgets every remembered write id (a relay that took another history).
    func forgetWriteIDs() { writeIDs.removeAll() }

    // MARK: Deciding writes

    /// The revision a write with `writeID` (in its writer's namespace) committed at, if it did:
    /// a retry is answered with that, never applied again. A retry of a write still staged or
    /// committing waits for it.
    func committedRevision(ofWriteID writeID: [UInt8]) -> UInt64? {
        if pipeline.pendingWriteIDs.contains(writeID) { flush() }
        return writeIDs.revision(of: writeID)
    }

    /// The refusal of a write during the read-only period after a failed commit. The clock is
    /// read only if a commit ever failed.
    func readOnlyRefusal() -> Refusal? {
        guard backoff.mayBeActive, backoff.isActive(at: clock.now()) else { return nil }
        return Refusal(.readOnly, "the journal cannot be written (\(backoff.reason ?? "unknown")); reads still work")
    }

    /// Whether writes are refused now.
    var isReadOnly: Bool { backoff.mayBeActive && backoff.isActive(at: clock.now()) }

    /// The changes `ops` make at the next revision, checked against the state (with what is
    /// staged) and each other; sessions are named in `writer`'s namespace and limited to
    /// `sessionLimit` per writer (0: no limit).
    func prepare<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops, writeID: [UInt8], writer: RequestContext,
                                                       sessionLimit: Int) throws(Refusal) -> [JournalChange]
        where Ops.Index == Int {
        ownership.check()
        if let problem = WriteOp.countProblem(ops.count) {
            throw Self.rejection(problem.code, problem.message, key: "", index: 0, current: 0, operations: ops.count)
        }
        let revision = store.headRevision + 1
        // Wall time for what is journaled (timestamps, a TTL's end as users read it).
        let now = clock.wallMilliseconds()
        var pending: [String: SignalStore.Versions?] = [:]
        if ops.count == 1 {
            // One key: no transaction state to keep; a literal array, not an append path, twice the cost.
            return [try change(ops, at: 0, revision: revision, now: now, writeID: writeID, writer: writer,
                               sessionLimit: sessionLimit, pending: &pending)]
        }
        var changes: [JournalChange] = []
        changes.reserveCapacity(ops.count)
        // By index: enumerating would copy each operation, its key and value retained.
        for index in ops.indices {
            changes.append(try change(ops, at: index, revision: revision, now: now, writeID: writeID, writer: writer,
                                      sessionLimit: sessionLimit, pending: &pending))
        }
        return changes
    }

    /// Applies `changes` (from ``prepare(_:writeID:writer:sessionLimit:)`` of `ops`) to the store,
    /// sets their expiry and session timers and stages them; the reply to request `id` waits in
    /// the queue for their commit.
    func stage<Ops: RandomAccessCollection<WriteOp>>(_ changes: [JournalChange], of ops: Ops, id: UInt64, writeID: [UInt8],
                                                     route: ReplyRoute) where Ops.Index == Int {
        let undo = store.apply(changes)
        for index in changes.indices where changes[index].kind == .put {
            // The monotonic clock is read only when a TTL or a session needs it: most writes need none.
            if changes[index].expiresAtMilliseconds > 0, case .put(_, _, let ttl, _) = ops[index].action {
                timers.schedule(.expiry(key: changes[index].key, modRevision: changes[index].revision,
                                        expiresAtMilliseconds: changes[index].expiresAtMilliseconds),
                                at: clock.now().adding(milliseconds: ttl))
            }
            if !changes[index].session.isEmpty {
                bind(changes[index].key, toSession: changes[index].session, now: clock.now())
            }
        }
        let revision = changes[0].revision
        pipeline.stage(StagedWrite(isDaemons: false, changes: changes, undo: undo, writeID: writeID.isEmpty ? nil : writeID))
        let reply: PendingReply = changes.count == 1
            ? .oneKeyWrite(id: id, revision: revision, version: changes[0].version)
            : .write(id: id, revision: revision, versions: changes.map(\.version))
        // A write just staged is never durable yet: its reply waits for its commit.
        replies.enqueue(reply, to: route, decidedAt: revision)
    }

    /// Answers request `id`, a retry of the write that committed at `revision`, as that write was.
    func answerRetry(id: UInt64, revision: UInt64, route: ReplyRoute) {
        let versions = (try? journal.changes(prefix: "", exact: false, from: revision, to: revision,
                                             limit: WireLimits.maxTxnOps))?.changes.map(\.version) ?? []
        var reply = Beacon_V1_Reply()
        reply.id = id
        reply.write = .with {
            $0.revision = revision
            $0.versions = versions
            $0.replayed = true
        }
        queue(.answer(reply, dependsOnStaged: false), to: route)
    }

    /// A refusal of operation `index` of a write of `operations` operations.
    static func rejection(_ code: Refusal.Code, _ message: String, key: String, index: Int, current: UInt64,
                          operations: Int) -> Refusal {
        var refusal = Refusal(code, operations > 1 ? "operation \(index): \(message)" : message, key: key)
        refusal.operationIndex = UInt32(index)
        refusal.currentVersion = current
        return refusal
    }

    /// The change operation `index` of `ops` makes, checked against the current state and the
    /// earlier operations of its transaction (`pending`, which it updates).
    @inline(__always)
    private func change<Ops: RandomAccessCollection<WriteOp>>(
        _ ops: Ops, at index: Int, revision: UInt64, now: UInt64, writeID: [UInt8], writer: RequestContext,
        sessionLimit: Int, pending: inout [String: SignalStore.Versions?]
    ) throws(Refusal) -> JournalChange where Ops.Index == Int {
        let part = UInt32(index)
        let key = ops[index].key
        func refusal(_ code: Refusal.Code, _ message: String, current: UInt64 = 0) -> Refusal {
            Self.rejection(code, message, key: key, index: index, current: current, operations: ops.count)
        }
        if let problem = ops[index].inputProblem {
            throw refusal(problem.code, problem.message)
        }
        let isTransaction = ops.count > 1
        let current = isTransaction ? pending[key] ?? store.liveVersions(key) : store.liveVersions(key)
        let version = current?.version ?? 0
        if let expected = ops[index].ifVersion, expected != version {
            throw refusal(.versionConflict, "key '\(key)' is at version \(version), not \(expected)", current: version)
        }
        let operationWriteID = index == 0 && !writeID.isEmpty ? writeID : nil
        switch ops[index].action {
        case .put(let encoded, let createOnly, let ttl, let session):
            if let problem = ops[index].limitProblem {
                throw refusal(problem.code, problem.message)
            }
            let ownedSession = session.isEmpty ? session : writer.owned(session)
            if !ownedSession.isEmpty { try checkSessionLimit(ownedSession, writer: writer, limit: sessionLimit) }
            if createOnly && current != nil {
                throw refusal(.alreadyExists, "key '\(key)' already exists (version \(version))", current: version)
            }
            let createRevision = current?.createRevision ?? revision
            if isTransaction {
                pending[key] = .some(SignalStore.Versions(version: version + 1, createRevision: createRevision))
            }
            return JournalChange(
                revision: revision, part: part, parts: UInt32(ops.count), kind: .put, key: key, value: encoded,
                version: version + 1, createRevision: createRevision,
                expiresAtMilliseconds: ttl > 0 ? now + ttl : 0, timestampMilliseconds: now, writeID: operationWriteID,
                session: ownedSession)
        case .delete:
            guard current != nil else {
                throw refusal(.notFound, "key '\(key)' does not exist")
            }
            if isTransaction { pending[key] = .some(nil) }
            return JournalChange(
                revision: revision, part: part, parts: UInt32(ops.count), kind: .delete, key: key,
                version: 0, createRevision: 0, timestampMilliseconds: now, writeID: operationWriteID)
        }
    }

    // MARK: Sessions and expiries

    /// Refuses to start session `id` (already in `writer`'s namespace) when the writer holds
    /// `limit` sessions (0: no limit). A session started by a write still staged is not counted
    /// yet, so a writer may go over by the writes of one commit.
    func checkSessionLimit(_ id: [UInt8], writer: RequestContext, limit: Int) throws(Refusal) {
        guard limit > 0, !sessions.contains(id), sessions.count(ownedBy: writer.peer) >= limit else { return }
        throw Refusal(.quotaExceeded, "\(writer.peer.isEmpty ? "this peer" : writer.peer) holds \(limit) sessions (sessions_per_peer)")
    }

    /// Renews session `id` (in its writer's namespace) for `ttl` milliseconds from now.
    /// - Returns: how many live keys it holds.
    func keepAlive(_ id: [UInt8], ttlMilliseconds ttl: UInt64) -> Int {
        let (session, timerAt) = sessions.keepAlive(id, ttl: ttl, now: clock.now())
        if let timerAt { timers.schedule(.sessionEnd(session: id), at: timerAt) }
        return session.keys.count { store.live($0)?.session == id }
    }

    /// Ends session `id` now: its keys are deleted in one revision, staged and submitted.
    func endSession(_ id: [UInt8]) {
        if let keys = sessions.end(id), endSession(id, keys: keys) { submitStagedIfIdle() }
    }

    /// Binds `key` to `session`, setting the session's timer if it is new (`ttl`: the session's
    /// time to live; the configured one by default).
    private func bind(_ key: String, toSession session: [UInt8], now: MonotonicTime, ttl: UInt64? = nil) {
        if let deadline = sessions.bind(key, to: session, now: now, ttl: ttl ?? settings.sessionTTLMilliseconds) {
            timers.schedule(.sessionEnd(session: session), at: deadline)
        }
    }

    /// When the next expiry or session timer is due; nil when none is set.
    var nextDeadline: MonotonicTime? { timers.nextDeadline }

    /// Expires the keys and ends the sessions whose time has come by `now`, and submits what that
    /// staged.
    func fireDueTimers(at now: MonotonicTime) {
        ownership.check()
        var staged = false
        while let (timer, due) = timers.popDue(at: now) {
            switch timer {
            case .expiry(let key, let modRevision, let expiresAt):
                staged = expire(key: key, modRevision: modRevision, expiresAtMilliseconds: expiresAt) || staged
            case .sessionEnd(let session):
                switch sessions.check(session, timerAt: due, now: now) {
                case .ended(let keys): staged = endSession(session, keys: keys) || staged
                case .renewed(let deadline): timers.schedule(.sessionEnd(session: session), at: deadline)
                case .stale: break
                }
            }
        }
        if staged { submitStagedIfIdle() }
    }

    /// Deletes `key` in a revision of its own, journaled like any write, if it still carries the
    /// expiry a timer was set for.
    /// - Returns: whether a write was staged.
    private func expire(key: String, modRevision: UInt64, expiresAtMilliseconds: UInt64) -> Bool {
        guard let entry = store.live(key), entry.modRevision == modRevision, entry.expiresAtMilliseconds == expiresAtMilliseconds
        else { return false }  // rewritten or deleted since
        let change = JournalChange(revision: store.headRevision + 1, kind: .expire, key: key,
                                   version: 0, createRevision: 0, timestampMilliseconds: clock.wallMilliseconds())
        let undo = store.apply([change])
        delegate.removedByDaemon([change])
        pipeline.stage(StagedWrite(isDaemons: true, changes: [change], undo: undo, writeID: nil))
        return true
    }

    /// Deletes the keys still bound to an ended session, in one revision.
    /// - Returns: whether a write was staged.
    private func endSession(_ id: [UInt8], keys: Set<String>) -> Bool {
        let bound = keys.filter { store.live($0)?.session == id }.sorted()
        guard !bound.isEmpty else { return false }
        let revision = store.headRevision + 1
        let now = clock.wallMilliseconds()
        let changes = bound.enumerated().map { part, key in
            JournalChange(revision: revision, part: UInt32(part), parts: UInt32(bound.count), kind: .expire, key: key,
                          version: 0, createRevision: 0, timestampMilliseconds: now)
        }
        let undo = store.apply(changes)
        delegate.removedByDaemon(changes)
        pipeline.stage(StagedWrite(isDaemons: true, changes: changes, undo: undo, writeID: nil))
        logger.debug("session ended", metadata: ["keys": "\(bound.count)", "revision": "\(revision)"])
        return true
    }

    // MARK: Mirrored writes

    /// Applies whole revisions written elsewhere (a relay's upstream) to the store and stages them
    /// with their own revisions and versions; they are published and answered like any commit.
    func stageMirrored(_ changes: [JournalChange]) {
        let undo = store.apply(changes)
        pipeline.stage(StagedWrite(isDaemons: true, changes: changes, undo: undo, writeID: nil))
        if pipeline.staged.count >= settings.maxBatch { waitForCommitThenSubmit() }
    }

    // MARK: Replies

    /// Queues `reply`, decided against the state staged now (or at `revision`), behind the replies
    /// decided before it: it leaves once that state is durable, in request order.
    func queue(_ reply: PendingReply, to route: ReplyRoute, decidedAt revision: UInt64? = nil) {
        let decided = revision ?? store.headRevision
        if replies.mayLeaveAtOnce(to: route, decidedAt: decided, durableRevision: durableRevision) {
            delegate.deliver(route, reply)
        } else {
            replies.enqueue(reply, to: route, decidedAt: decided)
        }
    }

    /// Keeps `route`'s place for a reply decided later (a relay's forwarded write).
    func hold(_ route: ReplyRoute) -> HoldTicket {
        replies.hold(route, at: store.headRevision)
    }

    /// Fills a held place; it leaves with the replies behind it once they may.
    func fill(_ ticket: HoldTicket, with reply: Beacon_V1_Reply) {
        replies.fill(ticket, with: reply, durableRevision: durableRevision, deliver: delegate.deliver)
    }

    // MARK: Group commit

    /// Commits what is staged if no commit is in flight: a small batch inline (published and
    /// answered before this returns), a larger one on the commit thread.
    /// - Parameter inline: whether a small batch may be committed inline. Not while a committed
    ///   batch waits to be published: the inline one would be published first, out of order.
    func submitStagedIfIdle(inline: Bool = true) {
        if let outcome = pipeline.submitIfIdle(inline: inline, inlineLimit: Self.inlineCommitLimit) { complete(outcome) }
    }

    /// Waits for the commit in flight, finishes it, and hands over what is staged.
    func waitForCommitThenSubmit() {
        if let outcome = pipeline.waitForOutcome() { complete(outcome) }
        submitStagedIfIdle()
    }

    /// Publishes and answers the in-flight batch if its commit has finished, then hands over
    /// what was staged meanwhile.
    func completeCommitIfReady() {
        if let outcome = pipeline.takeOutcomeIfReady() { complete(outcome) }
        submitStagedIfIdle()
    }

    /// Commits everything staged and waits: afterwards the journal holds every write accepted so
    /// far and the loop may use the journal itself.
    func flush() {
        if let outcome = pipeline.waitForOutcome() { complete(outcome) }
        submitStagedIfIdle()
        if let outcome = pipeline.waitForOutcome() { complete(outcome) }
    }

    /// Finishes a batch: on success publish then answer; on failure undo it and everything
    /// staged on top of it, and refuse them all with READ_ONLY.
    private func complete(_ outcome: WritePipeline.Outcome) {
        ownership.check()
        switch outcome {
        case .committed(let batch):
            backoff.succeeded()
            // Keep the commit thread busy: the next batch commits there while this one is
            // published and answered (it is published only when its own commit completes, after
            // this one). Never inline here: an inline commit publishes at once, before this batch.
            submitStagedIfIdle(inline: false)
            delegate.publish(batch)
            // Indexing borrows each write; a for-in loop would copy (retain) every field.
            for index in batch.indices {
                if let writeID = batch[index].writeID { writeIDs.remember(writeID, revision: batch[index].changes[0].revision) }
            }
            if let last = batch.last { durableRevision = last.changes[0].revision }
            replies.release(durableRevision: durableRevision, deliver: delegate.deliver)
            delegate.committed(batch)
            submitStagedIfIdle()
        case .failed(let refused, let error):
            for write in refused.reversed() { store.undo(write.undo) }
            let until = backoff.failed(error.description, at: clock.now())
            logger.error("journal commit failed; refusing writes for 1 s", metadata: [
                "error": "\(error)", "writes": "\(refused.count)"])
            for write in refused where write.isDaemons && settings.expiresKeys {
                // An expiry or an ended session: try again once the journal accepts writes.
                for change in write.changes {
                    guard let entry = store.live(change.key) else { continue }
                    if entry.expiresAtMilliseconds > 0 {
                        timers.schedule(.expiry(key: change.key, modRevision: entry.modRevision,
                                                expiresAtMilliseconds: entry.expiresAtMilliseconds), at: until)
                    } else if !entry.session.isEmpty {
                        bind(change.key, toSession: entry.session, now: until, ttl: 0)
                    }
                }
            }
            delegate.rolledBack(refused, error)
            // Every reply waiting on the rolled-back writes, refusals decided against them too.
            replies.rollBack(durableRevision: durableRevision, reason: error.description, deliver: delegate.deliver)
        }
    }

    /// Stops the commit thread after the batch in flight and closes the journal.
    func close() {
        flush()
        pipeline.close()
    }
}
