import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import SwiftProtobuf

/// A write applied to the store and waiting for its group commit. Its reply, if a client asked
/// for it, waits in the reply queue for the commit.
struct StagedWrite {
    /// Whether the daemon wrote it itself (an expiry, an ended session).
    var isDaemons: Bool
    var changes: [JournalChange]
    var undo: SignalStore.Undo
    var writeID: [UInt8]?
}

/// One operation of a write, with its value already encoded and checked for structure.
struct WriteOp {
    enum Action {
        case put(encodedValue: [UInt8], createOnly: Bool, ttlMilliseconds: UInt64, session: [UInt8])
        case delete
    }

    var key: String
    var action: Action
    var ifVersion: UInt64?
    /// A problem with the value found while encoding it, reported with the operation's index.
    var valueProblem: (code: Refusal.Code, message: String)?

    init(key: String, action: Action, ifVersion: UInt64?) {
        self.key = key
        self.action = action
        self.ifVersion = ifVersion
    }

    /// The operation a decoded put or delete asks for.
    init?(_ op: Beacon_V1_TxnOp) {
        switch op.op {
        case .put(let put):
            self.init(put)
        case .delete(let delete):
            self.init(delete)
        case nil:
            return nil
        }
    }

    init(_ delete: Beacon_V1_Delete) {
        self.init(key: delete.key, action: .delete, ifVersion: delete.hasIfVersion ? delete.ifVersion : nil)
    }

    init(_ put: Beacon_V1_Put) {
        var encoded: [UInt8] = []
        var problem: (Refusal.Code, String)?
        if let structural = put.value.structuralProblem() {
            problem = (.invalidValue, structural.description)
        } else if let bytes: [UInt8] = try? put.value.serializedBytes() {
            encoded = bytes
            if let size = Beacon_V1_Value.sizeProblem(encodedBytes: bytes.count) { problem = (.valueTooLarge, size.description) }
        } else {
            problem = (.invalidValue, "value cannot be encoded")
        }
        self.init(key: put.key, action: .put(encodedValue: encoded, createOnly: put.createOnly, ttlMilliseconds: put.ttlMs,
                                             session: Array(put.session)),
                  ifVersion: put.hasIfVersion ? put.ifVersion : nil)
        valueProblem = problem
    }
}

extension WriteOp {
    /// What is wrong with the operation's key or value, whatever the state.
    var inputProblem: (code: Refusal.Code, message: String)? {
        if let problem = KeyPath.problem(key: key) { return (.invalidKey, problem.description) }
        return valueProblem
    }

    /// What is wrong with a put's session or time to live, whatever the state.
    var limitProblem: (code: Refusal.Code, message: String)? {
        guard case .put(_, _, let ttl, let session) = action else { return nil }
        if session.count > WireLimits.maxSessionBytes {
            return (.invalidArgument, "session is \(session.count) bytes; the limit is \(WireLimits.maxSessionBytes)")
        }
        if ttl > WireLimits.maxTTLMilliseconds {
            return (.invalidArgument, "ttl_ms is \(ttl); the limit is \(WireLimits.maxTTLMilliseconds)")
        }
        return nil
    }

    /// What is wrong with a write of `count` operations, whatever they are.
    static func countProblem(_ count: Int) -> (code: Refusal.Code, message: String)? {
        if count == 0 { return (.invalidArgument, "a transaction needs at least one operation") }
        if count > WireLimits.maxTxnOps { return (.tooManyOperations, "\(count) operations; the limit is \(WireLimits.maxTxnOps)") }
        return nil
    }
}

extension BeaconServer {
    /// Stages a write decoded by SwiftProtobuf.
    func stageWrite(_ request: Beacon_V1_Request, route: ReplyRoute) {
        switch request.op {
        case .put(let put):
            stageWrite(id: request.id, [WriteOp(put)], writeID: Array(put.writeID), route: route)
        case .delete(let delete):
            stageWrite(id: request.id, [WriteOp(delete)], writeID: Array(delete.writeID), route: route)
        case .txn(let txn):
            var ops: [WriteOp] = []
            ops.reserveCapacity(txn.ops.count)
            for (index, op) in txn.ops.enumerated() {
                guard let converted = WriteOp(op) else {
                    return reject(route, request.id, .unknownRequest, "operation \(index): sets neither put nor delete")
                }
                ops.append(converted)
            }
            stageWrite(id: request.id, ops, writeID: Array(txn.writeID), route: route)
        default:
            preconditionFailure("not a write")
        }
    }

    /// Stages a put parsed by the fast path.
    func stageWrite(_ put: FastPut, route: ReplyRoute) {
        var op = WriteOp(key: put.key, action: .put(encodedValue: put.encodedValue, createOnly: put.createOnly,
                                                    ttlMilliseconds: put.ttlMilliseconds, session: []), ifVersion: put.ifVersion)
        if let problem = Beacon_V1_Value.sizeProblem(encodedBytes: put.encodedValue.count) {
            op.valueProblem = (.valueTooLarge, problem.description)
        }
        stageWrite(id: put.id, CollectionOfOne(op), writeID: put.writeID, route: route)
    }

    /// Generic so that a one-operation write passes its operation without allocating an array.
    private func stageWrite<Ops: RandomAccessCollection<WriteOp>>(id: UInt64, _ ops: Ops, writeID: [UInt8], route: ReplyRoute)
        where Ops.Index == Int {
        if writeID.count > WireLimits.maxWriteIDBytes {
            return reject(route, id, .invalidArgument, "write_id is \(writeID.count) bytes; the limit is \(WireLimits.maxWriteIDBytes)")
        }
        // Rights before the write id: a peer that may not make this write learns nothing of a
        // write with the same id.
        do throws(Refusal) {
            try checkWriteRights(ops)
        } catch {
            return refuse(id, error, route: route)
        }
        // Ids are the writer's own: another peer's write with the same id is another write.
        let writeID = writeID.isEmpty ? writeID : ownedByCurrentPeer(writeID)
        if !writeID.isEmpty {
            // A retry of a write still staged or committing: answer it once that one is done.
            if pipeline.pendingWriteIDs.contains(writeID) { flushWrites() }
            if let revision = writeIDs[writeID] {
                return replayWrite(route, id, revision: revision)
            }
        }
        // The monotonic clock is read only when a rate limit, a read-only period, a TTL or a
        // session needs it: most writes need none.
        if readOnlyUntil.milliseconds > 0, readOnlyUntil > .now() {
            return reject(route, id, .readOnly, "the journal cannot be written (\(readOnlyReason ?? "unknown")); reads still work")
        }
        do throws(Refusal) {
            try admit(ops)
        } catch {
            return refuse(id, error, route: route)
        }
        do throws(Refusal) {
            // Wall time for what is journaled (timestamps, a TTL's end as users read it).
            let changes = try prepareChanges(ops, revision: store.headRevision + 1, now: Journal.nowMilliseconds(), writeID: writeID)
            var creates = 0
            for index in changes.indices where changes[index].kind == .put && changes[index].version == 1 { creates += 1 }
            if !access.mayCreate(creates, peer: current.peer) {
                counters.quotaExceeded += 1
                throw Refusal(.quotaExceeded, "\(current.peer) may have at most \(access.limits.keysPerPeer) live keys it created (keys_per_peer)")
            }
            access.recordOwnership(of: changes, peer: current.peer)
            let undo = store.apply(changes)
            for index in changes.indices where changes[index].kind == .put {
                if changes[index].expiresAtMilliseconds > 0, case .put(_, _, let ttl, _) = ops[index].action {
                    scheduleExpiry(key: changes[index].key, modRevision: changes[index].revision,
                                   expiresAtMilliseconds: changes[index].expiresAtMilliseconds, at: MonotonicTime.now().adding(milliseconds: ttl))
                }
                if !changes[index].session.isEmpty {
                    bind(changes[index].key, toSession: changes[index].session, now: .now())
                }
            }
            let revision = changes[0].revision
            pipeline.stage(StagedWrite(isDaemons: false, changes: changes, undo: undo, writeID: writeID.isEmpty ? nil : writeID))
            let reply: PendingReply = changes.count == 1
                ? .oneKeyWrite(id: id, revision: revision, version: changes[0].version)
                : .write(id: id, revision: revision, versions: changes.map(\.version))
            // A write just staged is never durable yet: its reply waits for its commit.
            replies.enqueue(reply, to: route, decidedAt: revision)
        } catch {
            // Decided against staged writes: it waits for them, and is retryable if they roll back.
            refuse(id, error, route: route, dependsOnStaged: true)
        }
    }

    /// Refuses a write with a key the peer may not write.
    func checkWriteRights<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops) throws(Refusal) where Ops.Index == Int {
        if current.rights.write.isEverything { return }  // no policy: nothing to look up or copy
        let writable = current.rights.write
        for index in ops.indices where !writable.contains(key: ops[index].key) {
            var rejection = denied("write '\(ops[index].key)' (writable: \(writable))", key: ops[index].key)
            rejection.operationIndex = UInt32(index)
            throw rejection
        }
    }

    /// A write id or session as the daemon keeps it: in the namespace of the peer that sent it
    /// (its ZAP user id), so that no peer can replay, pre-claim, renew or end another's. Never sent
    /// back to clients; journaled like this so that the namespaces survive a restart.
    func ownedByCurrentPeer(_ id: [UInt8]) -> [UInt8] {
        Array(current.peer.utf8) + [0] + id
    }

    /// Refuses to start session `id` (already owned by the current peer) when the peer holds
    /// `sessions_per_peer` sessions. A session started by a write still staged is not counted
    /// yet, so a peer may go over by the writes of one commit.
    func checkSessionLimit(_ id: [UInt8]) throws(Refusal) {
        // Without rules or per-peer limits peers are not told apart: every one may end any session.
        let limit = access.needsPeerIdentity ? Int(access.limits.sessionsPerPeer) : 0
        guard limit > 0, !sessions.contains(id), sessions.count(ownedBy: current.peer) >= limit else { return }
        counters.quotaExceeded += 1
        throw Refusal(.quotaExceeded, "\(current.peer.isEmpty ? "this peer" : current.peer) holds \(limit) sessions (sessions_per_peer)")
    }

    /// Checks a write against the peer's limits, after its rights and before its preconditions:
    /// the value size limit, the write rate, and the journal size.
    func admit<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops) throws(Refusal) where Ops.Index == Int {
        let limits = access.limits
        // The protocol's own limit is checked with the value's structure (WriteOp).
        for index in ops.indices where limits.maxValueBytes < WireLimits.maxValueBytes {
            if case .put(let encoded, _, _, _) = ops[index].action, encoded.count > limits.maxValueBytes {
                var refusal = Refusal(.valueTooLarge, "value of '\(ops[index].key)' is \(encoded.count) bytes; this daemon's limit is \(limits.maxValueBytes) (max_value_bytes)",
                                      key: ops[index].key)
                refusal.operationIndex = UInt32(index)
                throw refusal
            }
        }
        if limits.writesPerSecond > 0, let wait = access.takeWrite(peer: current.peer, now: MonotonicTime.now().milliseconds) {
            counters.rateLimited += 1
            var refusal = Refusal(.rateLimited, "more than \(limits.writesPerSecond) writes per second from \(current.peer) (writes_per_second); retry in \(wait) ms")
            refusal.retryAfterMilliseconds = wait
            throw refusal
        }
        if limits.maxJournalBytes > 0, journalBytes >= limits.maxJournalBytes,
           ops.contains(where: { if case .put = $0.action { true } else { false } }) {
            counters.quotaExceeded += 1
            throw Refusal(.quotaExceeded, "the journal holds \(journalBytes) bytes, at its limit of \(limits.maxJournalBytes) (max_journal_bytes); deletes still work")
        }
    }

    /// Checks every operation's key, value and precondition against the current state and
    /// builds the changes of one revision; nothing is applied.
    func prepareChanges<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops, revision: UInt64, now: UInt64, writeID: [UInt8])
        throws(Refusal) -> [JournalChange] where Ops.Index == Int {
        if let problem = WriteOp.countProblem(ops.count) {
            throw Self.rejection(problem.code, problem.message, key: "", index: 0, current: 0, operations: ops.count)
        }
        // Later operations of a transaction see the effect of earlier ones on the same key.
        var pending: [String: SignalStore.Versions?] = [:]
        if ops.count == 1 {
            // An array literal allocates its one element directly; reserving capacity in an
            // empty array goes through the general growth path, twice the cost.
            return [try change(ops, at: 0, revision: revision, now: now, writeID: writeID, pending: &pending)]
        }
        var changes: [JournalChange] = []
        changes.reserveCapacity(ops.count)
        // By index: enumerating would copy each operation, its key and value retained.
        for index in ops.indices {
            changes.append(try change(ops, at: index, revision: revision, now: now, writeID: writeID, pending: &pending))
        }
        return changes
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
        _ ops: Ops, at index: Int, revision: UInt64, now: UInt64, writeID: [UInt8],
        pending: inout [String: SignalStore.Versions?]
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
            let ownedSession = session.isEmpty ? session : ownedByCurrentPeer(session)
            if !ownedSession.isEmpty { try checkSessionLimit(ownedSession) }
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

    /// Batches up to this size commit on the loop thread when the commit thread is idle: at low
    /// load that saves two thread hand-offs per write; under load batches grow and pipeline.
    static let inlineCommitLimit = 32

    /// Starts committing what is staged if no commit is in flight (the loop goes on reading).
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
    func flushWrites() {
        if let outcome = pipeline.waitForOutcome() { complete(outcome) }
        submitStagedIfIdle()
        if let outcome = pipeline.waitForOutcome() { complete(outcome) }
    }

    /// Finishes a batch: on success publish then answer; on failure undo it and everything
    /// staged on top of it, and refuse them all with READ_ONLY.
    private func complete(_ outcome: WritePipeline.Outcome) {
        switch outcome {
        case .committed(let batch):
            readOnlyReason = nil
            counters.commits += 1
            // Keep the commit thread busy: the next batch commits there while this one is
            // published and answered (it is published only when its own commit completes, after
            // this one). Never inline here: an inline commit publishes at once, before this batch.
            submitStagedIfIdle(inline: false)
            // Each diff on its key's topic and into the bundles it belongs to; the group's
            // bundles; then its commit markers, which a subscriber of bundles must receive after
            // the diffs they close (proto/PROTOCOL.md §5.4).
            publisher.beginGroup()
            var markers: [Beacon_V1_CommitMarker] = []
            // Indexing borrows each write; a for-in loop would copy (retain) every field.
            for index in batch.indices {
                publish(batch[index].changes, markers: &markers)  // the array alone: passing the write would copy all of it
                let revision = batch[index].changes[0].revision
                durableRevision = revision
                if let writeID = batch[index].writeID { remember(writeID: writeID, revision: revision) }
            }
            for (topic, error) in publisher.finishGroup() {
                logger.warning("publish failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
            }
            for marker in markers { publishCommitMarkers(marker) }
            if publisher.unsent.value > live.limits.publishBufferBytes { closeStalledSubscribers() }
            counters.writes += UInt64(batch.count)
            replies.release(durableRevision: durableRevision, deliver: deliver)
            if relay != nil { mirrorAdvanced() }
            submitStagedIfIdle()
        case .failed(let refused, let error):
            for write in refused.reversed() { store.undo(write.undo) }
            readOnlyReason = error.description
            readOnlyUntil = MonotonicTime.now().adding(milliseconds: 1000)
            logger.error("journal commit failed; refusing writes for 1 s", metadata: [
                "error": "\(error)", "writes": "\(refused.count)"])
            for write in refused where write.isDaemons && relay == nil {
                // An expiry or an ended session: try again once the journal accepts writes.
                for change in write.changes {
                    guard let entry = store.live(change.key) else { continue }
                    if entry.expiresAtMilliseconds > 0 {
                        scheduleExpiry(key: change.key, modRevision: entry.modRevision,
                                       expiresAtMilliseconds: entry.expiresAtMilliseconds, at: readOnlyUntil)
                    } else if !entry.session.isEmpty {
                        bind(change.key, toSession: entry.session, now: readOnlyUntil, ttl: 0)
                    }
                }
            }
            counters.rejected += UInt64(refused.count { !$0.isDaemons })
            // A relay's mirrored revisions that were not journaled are fetched again.
            relay?.link.resume(after: durableRevision, epoch: pipeline.epoch)
            // Every reply waiting on the rolled-back writes, refusals decided against them too.
            replies.rollBack(durableRevision: durableRevision, reason: error.description, deliver: deliver)
        }
    }

    private func replayWrite(_ route: ReplyRoute, _ id: UInt64, revision: UInt64) {
        flushWrites()  // the journal is the loop's to read only with no commit in flight
        var reply = Beacon_V1_Reply()
        reply.id = id
        let versions = (try? pipeline.journal.changes(prefix: "", from: revision, to: revision, limit: WireLimits.maxTxnOps))?.changes.map(\.version) ?? []
        reply.write = .with {
            $0.revision = revision
            $0.versions = versions
            $0.replayed = true
        }
        send(reply, to: route)
    }

    // MARK: Publishing

    /// Publishes the diffs of one revision's changes; adds its commit marker to `markers` if it
    /// has several.
    private func publish(_ changes: [JournalChange], markers: inout [Beacon_V1_CommitMarker]) {
        let epoch = pipeline.epoch
        var marks = publisher.tracker.record(revision: changes[0].revision, keys: changes.lazy.map(\.key))
        if access.policy.isEnabled {
            // Only what every reader of the key may read (the commit marker goes out per scope).
            for index in marks.perChange.indices where !marks.perChange[index].isEmpty {
                marks.perChange[index] = access.marks(marks.perChange[index], everyReaderOf: changes[index].key)
            }
        }
        for (topic, error) in publisher.publishDiffs(changes, epoch: epoch, marks: marks.perChange) {
            logger.warning("publish failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
        }
        if publisher.unsent.value > live.limits.publishBufferBytes { closeStalledSubscribers() }
        if changes.count > 1 {
            var marker = Beacon_V1_CommitMarker()
            marker.epoch = epoch
            marker.revision = changes[0].revision
            marker.parts = UInt32(changes.count)
            marker.marks = marks.touched
            markers.append(marker)
        }
    }

    func publish(topic: String, _ message: some SwiftProtobuf.Message) {
        do {
            try publisher.publish(topic: topic, body: try message.serializedBytes())
        } catch {
            logger.warning("publish failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
        }
    }

    func publishHeartbeat() {
        var heartbeat = Beacon_V1_Heartbeat()
        heartbeat.epoch = pipeline.epoch
        heartbeat.instance = instance
        // Only what subscribers could have received: a heartbeat is a bookmark (PROTOCOL.md §6).
        heartbeat.headRevision = durableRevision
        heartbeat.compactedRevision = pipeline.compactedRevision
        heartbeat.intervalMs = live.heartbeatIntervalMilliseconds
        heartbeat.timestampMs = Journal.nowMilliseconds()
        heartbeat.prefixes = publisher.tracker.heads
        if let upstream = upstreamStatusMessage { heartbeat.upstream = upstream }
        heartbeat.bundles = true
        publishHeartbeats(heartbeat)
    }

    // MARK: Expiry and sessions

    /// Sets the timer that deletes `key` at `time` if it still carries this expiry then.
    func scheduleExpiry(key: String, modRevision: UInt64, expiresAtMilliseconds: UInt64, at time: MonotonicTime) {
        timers.schedule(.expiry(key: key, modRevision: modRevision, expiresAtMilliseconds: expiresAtMilliseconds), at: time)
    }

    /// Binds `key` to `session`, setting the session's timer if it is new (`ttl`: the session's
    /// time to live; the configured one by default).
    func bind(_ key: String, toSession session: [UInt8], now: MonotonicTime, ttl: UInt64? = nil) {
        if let deadline = sessions.bind(key, to: session, now: now, ttl: ttl ?? live.sessionTTLMilliseconds) {
            timers.schedule(.sessionEnd(session: session), at: deadline)
        }
    }

    /// Deletes `key` in a revision of its own, journaled like any write, if it still carries the
    /// expiry a timer was set for.
    /// - Returns: whether a write was staged.
    func expire(key: String, modRevision: UInt64, expiresAtMilliseconds: UInt64) -> Bool {
        guard let entry = store.live(key), entry.modRevision == modRevision, entry.expiresAtMilliseconds == expiresAtMilliseconds
        else { return false }  // rewritten or deleted since
        let change = JournalChange(revision: store.headRevision + 1, kind: .expire, key: key,
                                   version: 0, createRevision: 0, timestampMilliseconds: Journal.nowMilliseconds())
        let undo = store.apply([change])
        access.recordOwnership(of: [change], peer: nil)
        pipeline.stage(StagedWrite(isDaemons: true, changes: [change], undo: undo, writeID: nil))
        return true
    }

    /// Deletes the keys still bound to an ended session, in one revision.
    /// - Returns: whether a write was staged.
    func endSession(_ id: [UInt8], keys: Set<String>) -> Bool {
        let bound = keys.filter { store.live($0)?.session == id }.sorted()
        guard !bound.isEmpty else { return false }
        let revision = store.headRevision + 1
        let now = Journal.nowMilliseconds()
        let changes = bound.enumerated().map { part, key in
            JournalChange(revision: revision, part: UInt32(part), parts: UInt32(bound.count), kind: .expire, key: key,
                          version: 0, createRevision: 0, timestampMilliseconds: now)
        }
        let undo = store.apply(changes)
        access.recordOwnership(of: changes, peer: nil)
        pipeline.stage(StagedWrite(isDaemons: true, changes: changes, undo: undo, writeID: nil))
        logger.debug("session ended", metadata: ["keys": "\(bound.count)", "revision": "\(revision)"])
        return true
    }
}
