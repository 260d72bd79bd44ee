import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import SwiftProtobuf

extension ServerLoop {
    /// Handles one message from the request socket: its body, and the routing envelope that
    /// came before it, which the reply goes back with.
    /// - Returns: how many requests it carried (a batch carries several).
    @discardableResult
    func handle(_ body: ZMQMessage, envelope: ReplyEnvelope) -> Int {
        stats.requests += 1
        let connection = envelope.connection
        // Sent before its connection was closed for not reading its replies: nobody reads the answer.
        if network.replyFlows.isClosed(connection, now: clock.now()) { return 1 }
        noteConnection(of: body, id: connection)
        let context = requestContext(of: body)
        if turns.mustWait(connection, peer: context.peer) {
            // Its peer has used its turn, or earlier work of its connection waits: it waits too, in order.
            turns.park(.message(body: body.bytes, envelope: envelope, context: context), of: connection, peer: context.peer,
                       now: clock.now())
            return 1
        }
        return body.withUnsafeBytes { handle(message: $0, envelope: envelope, context: context) }
    }

    /// Handles one request message's body.
    /// - Returns: how many requests it carried.
    private func handle(message bytes: UnsafeRawBufferPointer, envelope: ReplyEnvelope, context: RequestContext) -> Int {
        if let batch = FastBatch.parse(bytes) {
            guard let replies = startBatch(id: batch.id, count: batch.requests.count, envelope: envelope, peer: context.peer) else { return 1 }
            handleBatch(bytes, requests: batch.requests, from: 0, replies: replies, context: context)
            return batch.requests.count
        }
        return handle(bytes, route: .peer(envelope), inBatch: false, context: context)
    }

    /// Handles the requests of a batch from `start` on, until its peer's turn is used up; the
    /// rest waits, first in its connection's line, for the peer's next turn.
    private func handleBatch(_ bytes: UnsafeRawBufferPointer, requests: [Range<Int>], from start: Int, replies: BatchReplies,
                             context: RequestContext) {
        for slot in start..<requests.count {
            if slot > start, turns.isSpent(context.peer) {
                turns.parkContinuation(.batchRest(body: Array(bytes), requests: requests, next: slot, replies: replies, context: context),
                                       of: replies.envelope.connection, peer: context.peer, now: clock.now())
                return
            }
            handle(UnsafeRawBufferPointer(rebasing: bytes[requests[slot]]), route: .batch(replies, slot: slot), inBatch: true,
                   context: context)
        }
    }

    /// The same for a batch the full decoder read.
    private func handleBatch(_ requests: [Beacon_V1_Request], from start: Int, replies: BatchReplies, context: RequestContext) {
        for slot in start..<requests.count {
            if slot > start, turns.isSpent(context.peer) {
                turns.parkContinuation(.decodedBatchRest(requests: requests, next: slot, replies: replies, context: context),
                                       of: replies.envelope.connection, peer: context.peer, now: clock.now())
                return
            }
            handle(requests[slot], route: .batch(replies, slot: slot), inBatch: true, context: context)
        }
    }

    /// Serves the requests that wait for their peer's turn, a turn per peer, until every peer
    /// with work has used its turn in this pass or nothing waits. Work of a connection closed
    /// for not reading its replies is dropped.
    func serveWaitingRequests() {
        let now = clock.now()
        while let (id, work) = turns.next(now: now) {
            if network.replyFlows.isClosed(id, now: now) {
                turns.drop(id)
                continue
            }
            switch work {
            case .message(let body, let envelope, let context):
                _ = body.withUnsafeBytes { handle(message: $0, envelope: envelope, context: context) }
            case .batchRest(let body, let requests, let next, let replies, let context):
                body.withUnsafeBytes { handleBatch($0, requests: requests, from: next, replies: replies, context: context) }
            case .decodedBatchRest(let requests, let next, let replies, let context):
                handleBatch(requests, from: next, replies: replies, context: context)
            }
        }
        writes.completeCommitIfReady()
    }

    /// Handles one encoded request.
    /// - Returns: how many requests it carried.
    @discardableResult
    private func handle(_ bytes: UnsafeRawBufferPointer, route: ReplyRoute, inBatch: Bool, context: RequestContext) -> Int {
        if authority.stagesWritesHere, let put = FastPut.parse(bytes) {
            stageWrite(put, route: route, context: context)
            return 1
        }
        let request: Beacon_V1_Request
        do {
            // Decoded in place: the Data borrows the frame's bytes for the call only.
            guard let base = bytes.baseAddress else { return handle(Beacon_V1_Request(), route: route, inBatch: inBatch, context: context) }
            request = try Beacon_V1_Request(serializedBytes: Data(
                bytesNoCopy: UnsafeMutableRawPointer(mutating: base), count: bytes.count, deallocator: .none))
        } catch {
            logger.debug("malformed request", metadata: ["bytes": "\(bytes.count)"])
            reject(route, 0, .malformed, "the body is not a beacon.v1.Request: \(error)")
            return 1
        }
        return handle(request, route: route, inBatch: inBatch, context: context)
    }

    /// Handles one decoded request (`replaying`: one the write authority held back, handed back now).
    /// - Returns: how many requests it carried.
    @discardableResult
    func handle(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool = false,
                context: RequestContext) -> Int {
        if request.op.map({ if case .batch = $0 { false } else { true } }) ?? true,
           authority.holdsBack(request, route: route, inBatch: inBatch, replaying: replaying, context: context, host: self) {
            return 1
        }
        switch request.op {
        case .put, .delete, .txn, .keepAlive:
            authority.decide(request, route: route, context: context, host: self)
        case .batch(let batch):
            // Reached when the fast path could not read the batch (unknown fields, say).
            guard !inBatch else {
                reject(route, request.id, .invalidArgument, "a batch cannot hold another batch")
                return 1
            }
            guard case .peer(let envelope) = route,
                  let replies = startBatch(id: request.id, count: batch.requests.count, envelope: envelope, peer: context.peer) else { return 1 }
            handleBatch(batch.requests, from: 0, replies: replies, context: context)
            return batch.requests.count
        case .compact(let compact):
            do {
                try requestCompaction(compact, id: request.id, route: route, context: context)
            } catch {
                refuse(request.id, error, route: route)
            }
        case .backup(let backup):
            do {
                try requestBackup(backup, id: request.id, route: route, context: context)
            } catch {
                refuse(request.id, error, route: route)
            }
        case .delta, .history:
            // Read from the journal: commit what is staged first.
            let started = readStarted()
            writes.flush()
            do {
                writes.queue(try changesAnswer(request.op!, id: request.id, context: context), to: route)
            } catch {
                refuse(request.id, error, route: route)
            }
            readAnswered(since: started)
        case nil:
            reject(route, request.id, .unknownRequest, "the request sets no operation this daemon knows (protocol version \(WireLimits.protocolVersion))")
        case .get(let get):
            let started = readStarted()
            answerGet(get, id: request.id, route: route, context: context)
            readAnswered(since: started)
        case .ping where writes.durableRevision < writes.headRevision && mayAnswerAtDurableRevision(route):
            var reply = Beacon_V1_Reply()
            reply.id = request.id
            reply.ping = ping(request.ping, headRevision: writes.durableRevision, context: context)
            writes.queue(.answer(reply, dependsOnStaged: false), to: route, decidedAt: writes.durableRevision)
        case .some(let op):
            // Reads see only committed state: commit what is staged first.
            let started = readStarted()
            defer { readAnswered(since: started) }
            writes.flush()
            var cost = ReadCost(allowance: readAllowance(for: route, context: context))
            do {
                var reply = try answer(op, context: context, cost: &cost)
                reply.id = request.id
                send(reply, to: route)
            } catch {
                refuse(request.id, error, route: route)
            }
            spend(cost, on: route, context: context)
        }
        return 1
    }

    /// When a read started, for the metrics' read latency (0 when no metrics are served).
    @inline(__always)
    private func readStarted() -> UInt64 { network.metrics == nil ? 0 : StepPacer.monotonicNanoseconds() }

    /// Times a read that started at `started` (``readStarted()``).
    @inline(__always)
    private func readAnswered(since started: UInt64) {
        guard started > 0, let metrics = network.metrics else { return }
        metrics.recordRead(nanoseconds: StepPacer.monotonicNanoseconds() &- started)
    }

    /// Bytes the reply to a read on `route` may take: the rest of its batch's allowance, or what
    /// its connection may still have unread (``ReplyFlows/allowance(for:)``).
    private func readAllowance(for route: ReplyRoute, context: RequestContext) -> Int {
        network.replyFlows.allowance(for: route.connection, building: turns.bytesBuilding(for: context.peer))
    }

    /// Counts what a read cost against its peer's allowance (while its batch is unfinished) and turn.
    private func spend(_ cost: ReadCost, on route: ReplyRoute, context: RequestContext) {
        if case .batch(let replies, _) = route {
            replies.builtBytes += cost.bytes
            turns.build(cost.bytes, for: replies.peer)
        }
        turns.charge(context.peer, bytes: cost.bytes + ReadCost.perRequestBytes)
        if cost.refused { stats.quotaExceeded += 1 }
    }

    /// Answers request `id` with `rejection`'s error (and the head revision), counting it.
    /// - Parameter dependsOnStaged: whether the refusal was decided against staged writes (a
    ///   version conflict, say), so that it is answered as retryable if they roll back.
    func refuse(_ id: UInt64, _ rejection: Refusal, route: ReplyRoute, dependsOnStaged: Bool = false) {
        stats.rejected += 1
        stats.refusals[rejection.code, default: 0] += 1
        var reply = Beacon_V1_Reply()
        reply.id = id
        reply.error = rejection.wire(headRevision: writes.headRevision)
        writes.queue(.answer(reply, dependsOnStaged: dependsOnStaged), to: route)
    }

    /// The collector of a batch's replies, or `nil` after refusing a batch that is empty or
    /// too long.
    private func startBatch(id: UInt64, count: Int, envelope: ReplyEnvelope, peer: String) -> BatchReplies? {
        guard count > 0 else {
            reject(.peer(envelope), id, .invalidArgument, "the batch holds no requests")
            return nil
        }
        guard count <= WireLimits.maxBatchRequests else {
            reject(.peer(envelope), id, .tooManyOperations, "the batch holds \(count) requests; the limit is \(WireLimits.maxBatchRequests)")
            return nil
        }
        stats.requests += UInt64(count - 1)  // the batch counts as each request it holds
        stats.batches += 1
        return BatchReplies(envelope: envelope, id: id, count: count, peer: peer)
    }


    private func checkPrefix(_ prefix: String) throws(Refusal) {
        if let problem = KeyPath.problem(prefix: prefix) {
            throw Refusal(.invalidKey, "prefix: \(problem)", key: prefix)
        }
    }

    private func journalFailure(_ error: JournalError) -> Refusal {
        logger.error("journal read failed", metadata: ["error": "\(error)"])
        return Refusal(.internal, error.description)
    }

    private func compactedFailure(_ revision: UInt64) -> Refusal {
        var rejection = Refusal(.compacted, "history at revision \(revision) was compacted (through \(writes.pipeline.compactedRevision)); resync from a snapshot")
        rejection.compactedRevision = writes.pipeline.compactedRevision
        return rejection
    }

    /// Whether a read of `route`'s connection may be answered now from durable state, at the
    /// durable revision, though writes are staged or committing: nothing of its connection waits
    /// ahead of it. No client has been told of a revision above the durable one (replies and
    /// publications name none), so such an answer is linearizable, and the read need not wait for
    /// a commit (one that checkpoints SQLite's log takes tens of milliseconds).
    private func mayAnswerAtDurableRevision(_ route: ReplyRoute) -> Bool {
        let durable = writes.durableRevision
        return writes.replies.mayLeaveAtOnce(to: route, decidedAt: durable, durableRevision: durable)
    }

    /// Answers a `Get` from memory, never waiting on the loop for a commit: at the durable
    /// revision when no write in flight changes the key and nothing of its connection waits
    /// (``mayAnswerAtDurableRevision(_:)``); otherwise against the staged head, its reply leaving
    /// once that is journaled — or, if those writes roll back, answered as retryable.
    private func answerGet(_ get: Beacon_V1_Get, id: UInt64, route: ReplyRoute, context: RequestContext) {
        let durable = writes.durableRevision, head = writes.headRevision
        // Decided against writes not yet journaled: it must not outlive their rollback.
        var dependsOnStaged = false
        do throws(Refusal) {
            if let problem = KeyPath.problem(key: get.key) { throw Refusal(.invalidKey, problem.description, key: get.key) }
            try checkRead(key: get.key, context: context)
            let entry = writes.store.live(get.key)
            let atDurable = durable == head || (entry.map { $0.modRevision <= durable } ?? false) && mayAnswerAtDurableRevision(route)
            dependsOnStaged = !atDurable
            guard let entry else { throw Refusal(.notFound, "key '\(get.key)' does not exist", key: get.key) }
            var result = Beacon_V1_GetReply()
            result.kv = try keyValue(get.key, entry)
            result.revision = atDurable ? durable : head
            var reply = Beacon_V1_Reply()
            reply.id = id
            reply.get = result
            writes.queue(.answer(reply, dependsOnStaged: dependsOnStaged), to: route, decidedAt: atDurable ? durable : head)
        } catch {
            refuse(id, error, route: route, dependsOnStaged: dependsOnStaged)
        }
    }

    /// A `sync` is answered with the head it is answered at: where writes are decided here,
    /// every write acknowledged is at or below it; elsewhere the write authority handed the
    /// `Ping` back once the journal held its read index, so every write acknowledged anywhere
    /// before it that this daemon carries is.
    private func ping(_ request: Beacon_V1_Ping, headRevision: UInt64, context: RequestContext) -> Beacon_V1_PingReply {
        .with {
            if request.sync { $0.readRevision = headRevision }
            $0.consistentReads = authority.servesConsistentReads
            $0.protocolVersion = WireLimits.protocolVersion
            $0.epoch = writes.epoch
            $0.instance = stats.instance
            $0.headRevision = headRevision
            $0.compactedRevision = writes.pipeline.compactedRevision
            $0.heartbeatIntervalMs = live.heartbeatIntervalMilliseconds
            $0.daemonVersion = BeaconVersion.string
            if let upstream = authority.upstreamStatus { $0.upstream = upstream }
            $0.bundles = true
        }
    }

    /// Answers a read, snapshot, history, stats or admin request.
    private func answer(_ op: Beacon_V1_Request.OneOf_Op, context: RequestContext, cost: inout ReadCost) throws(Refusal) -> Beacon_V1_Reply {
        var reply = Beacon_V1_Reply()
        let now = clock.now()
        switch op {
        case .ping(let request):
            reply.ping = ping(request, headRevision: writes.headRevision, context: context)

        case .list(let list):
            try checkPrefix(list.prefix)
            try checkRead(prefix: list.prefix, context: context)
            var result = Beacon_V1_ListReply()
            result.revision = writes.headRevision
            let limit = list.limit == 0 ? Int.max : Int(list.limit)
            var failed: Refusal?
            writes.store.forEach(prefix: list.prefix, after: list.startAfter) { key, entry in
                guard !entry.isDeleted else { return true }
                if result.kvs.count == limit { result.more = true; return false }
                do throws(Refusal) {
                    try cost.add(ReadCost.estimate(key: key, value: list.keysOnly ? 0 : entry.value.count))
                    result.kvs.append(try keyValue(key, entry, includingValue: !list.keysOnly))
                } catch {
                    failed = error
                    return false
                }
                return true
            }
            if let failed { throw failed }
            reply.list = result

        case .snapshot(let request):
            try checkPrefix(request.prefix)
            try checkRead(prefix: request.prefix, context: context)
            reply.snapshot = try snapshot(request, now: now, context: context, cost: &cost)

        case .delta, .history:
            preconditionFailure("answered by changesAnswer(_:id:)")

        case .stats:
            guard context.rights.read.isEverything else {
                throw denied("read the daemon's statistics (needs read=*)", key: "", context: context)
            }
            reply.stats = statsReply(now: now)

        case .get:
            preconditionFailure("answered by answerGet(_:id:route:context:)")
        case .put, .delete, .txn, .keepAlive, .batch, .compact, .backup:
            preconditionFailure("writes and KeepAlives go to the write authority, batches are unpacked, compactions and backups scheduled")
        }
        return reply
    }

    /// The daemon's counters and state, as `Stats` reports them.
    func statsReply(now: MonotonicTime) -> Beacon_V1_StatsReply {
        .with {
            $0.epoch = writes.epoch
            $0.instance = stats.instance
            $0.headRevision = writes.headRevision
            $0.compactedRevision = writes.pipeline.compactedRevision
            $0.keys = UInt64(writes.store.liveCount)
            $0.tombstones = UInt64(writes.store.tombstoneCount)
            $0.journalBytes = writes.pipeline.sizeInBytes
            $0.writes = stats.writes
            $0.rejected = stats.rejected
            $0.published = publisher.published
            $0.requests = stats.requests
            $0.commits = stats.commits
            $0.trackedPrefixes = UInt32(publisher.tracker.tracked.count)
            $0.uptimeMs = stats.startedAt.milliseconds(until: now)
            $0.readOnly = writes.isReadOnly
            $0.requestConnections = UInt32(connections.ledger.count(.requests))
            $0.subscriberConnections = UInt32(connections.ledger.count(.subscribers))
            $0.writesPerSecond = stats.writeRate.perSecond
            $0.publicationsPerSecond = stats.publicationRate.perSecond
            $0.connectionsRefused = stats.connectionsRefused
            $0.accessDenied = stats.accessDenied
            $0.rateLimited = stats.rateLimited
            $0.quotaExceeded = stats.quotaExceeded
            $0.subscriptionsRefused = stats.subscriptionsRefused
            $0.batches = stats.batches
            $0.connectionsShed = connections.ledger.shed + connections.refusedAtAccept
            $0.sessions = UInt32(writes.sessions.count)
            $0.leasesRefused = stats.leasesRefused
            $0.replyBytesKept = UInt64(network.replyFlows.waitingBytes)
            $0.slowReadersClosed = network.replyFlows.closedConnections
            $0.publishBytesUnsent = UInt64(max(publisher.unsent.value, 0))
            $0.slowSubscribersClosed = stats.slowSubscribersClosed
            if let upstream = authority.upstreamStatus { $0.upstream = upstream }
            $0.writesForwarded = authority.writesForwarded
        }
    }

    /// Renews or ends a writer's session here (a primary's sessions).
    func keepAlive(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext) {
        writes.flush()  // answered against committed state, like a read
        do throws(Refusal) {
            var reply = Beacon_V1_Reply()
            reply.id = request.id
            reply.keepAlive = try sessionRenewal(request.keepAlive, context: context)
            send(reply, to: route)
        } catch {
            refuse(request.id, error, route: route)
        }
    }

    /// Renews session `keepAlive.session` of `context`'s peer, or ends it (a time to live of 0).
    private func sessionRenewal(_ keepAlive: Beacon_V1_KeepAlive, context: RequestContext) throws(Refusal) -> Beacon_V1_KeepAliveReply {
        guard !context.rights.write.isEmpty else { throw denied("keep sessions alive (needs some write right)", key: "", context: context) }
        guard (1...WireLimits.maxSessionBytes).contains(keepAlive.session.count) else {
            throw Refusal(.invalidArgument, "session is \(keepAlive.session.count) bytes; it must be 1 to \(WireLimits.maxSessionBytes)")
        }
        // The peer's own session of that name: another's is out of its reach.
        let id = context.owned(Array(keepAlive.session))
        guard keepAlive.ttlMs <= WireLimits.maxSessionTTLMilliseconds else {
            throw Refusal(.invalidArgument, "ttl_ms is \(keepAlive.ttlMs); the limit is \(WireLimits.maxSessionTTLMilliseconds)")
        }
        guard keepAlive.ttlMs > 0 else {
            // Ended now: its keys go in one revision, which this reply waits for.
            writes.endSession(id)
            return Beacon_V1_KeepAliveReply()
        }
        do throws(Refusal) {
            try writes.checkSessionLimit(id, writer: context, limit: sessionLimit)
        } catch {
            stats.quotaExceeded += 1
            throw error
        }
        let ttl = UInt64(keepAlive.ttlMs)
        let keys = writes.keepAlive(id, ttlMilliseconds: ttl)
        return .with {
            $0.keys = UInt32(keys)
            $0.expiresAtMs = clock.wallMilliseconds() + ttl  // as users read it: wall time
        }
    }

    /// Sequences `prefix` for a while for `holder` (closing the subscribe/snapshot race)
    /// and returns its last revision; over `leases_per_peer`, only the revision (counted).
    private func lease(_ prefix: String, now: MonotonicTime, holder: String) -> UInt64 {
        let limit = access.needsPeerIdentity ? Int(access.limits.leasesPerPeer) : 0
        let (revision, leased) = publisher.tracker.lease(prefix, until: now.adding(milliseconds: configuration.prefixLeaseMilliseconds).milliseconds,
                                               holder: holder, limit: limit) { initialRevision(prefix: prefix) }
        if !leased { stats.leasesRefused += 1 }
        return revision
    }

    private func snapshot(_ request: Beacon_V1_Snapshot, now: MonotonicTime, context: RequestContext, cost: inout ReadCost) throws(Refusal)
        -> Beacon_V1_SnapshotReply {
        var result = Beacon_V1_SnapshotReply()
        result.epoch = writes.epoch
        result.compactedRevision = writes.pipeline.compactedRevision
        let limit = request.limit == 0 ? Int.max : Int(request.limit)
        let head = writes.headRevision
        if request.revision == 0 || request.revision == head {
            // Head: from memory. Registering the prefix here closes the subscribe/snapshot race.
            result.revision = head
            result.prefixRevision = lease(request.prefix, now: now, holder: context.peer)
            var failed: Refusal?
            writes.store.forEach(prefix: request.prefix, after: request.startAfter) { key, entry in
                guard !entry.isDeleted else { return true }
                if result.kvs.count == limit { result.more = true; return false }
                do throws(Refusal) {
                    try cost.add(ReadCost.estimate(key: key, value: entry.value.count))
                    result.kvs.append(try keyValue(key, entry))
                } catch {
                    failed = error
                    return false
                }
                return true
            }
            if let failed { throw failed }
            return result
        }
        if request.revision > head { throw Refusal(.futureRevision, "revision \(request.revision) is above head \(head)") }
        if request.revision < writes.pipeline.compactedRevision { throw compactedFailure(request.revision) }
        var entries: [JournalEntry]
        do {
            let fetchLimit = limit == Int.max ? 0 : limit + 1
            entries = try writes.journal.snapshot(prefix: request.prefix, at: request.revision,
                                           startAfter: request.startAfter, limit: fetchLimit)
            result.prefixRevision = max(try writes.journal.lastRevision(prefix: request.prefix, atOrBelow: request.revision),
                                        writes.pipeline.compactedRevision)
        } catch {
            throw journalFailure(error)
        }
        if entries.count > limit {
            entries.removeLast(entries.count - limit)
            result.more = true
        }
        result.revision = request.revision
        result.kvs.reserveCapacity(entries.count)
        for entry in entries {
            try cost.add(ReadCost.estimate(key: entry.key, value: entry.value.count))
            result.kvs.append(try keyValue(entry.key, .init(
                value: entry.value, version: entry.version, createRevision: entry.createRevision,
                modRevision: entry.modRevision, expiresAtMilliseconds: entry.expiresAtMilliseconds, isDeleted: false,
                modTimeMilliseconds: entry.modTimeMilliseconds)))
        }
        return result
    }

    /// Answers a `Delta` or `History` request from the journal: a page of changes, encoded as it
    /// is read (the stored values go out as they are), or — for a `Delta` with
    /// `snapshot_if_smaller` that outgrew the prefix's state — a snapshot.
    private func changesAnswer(_ op: Beacon_V1_Request.OneOf_Op, id: UInt64, context: RequestContext) throws(Refusal) -> PendingReply {
        let now = clock.now()
        switch op {
        case .delta(let delta):
            try checkPrefix(delta.prefix)
            try checkRead(prefix: delta.prefix, context: context)
            if delta.sinceRevision < writes.pipeline.compactedRevision { throw compactedFailure(delta.sinceRevision) }
            if delta.sinceRevision > writes.headRevision {
                throw Refusal(.futureRevision, "revision \(delta.sinceRevision) is above head \(writes.headRevision)")
            }
            if delta.snapshotIfSmaller, try deltaOutgrowsState(prefix: delta.prefix, since: delta.sinceRevision) {
                var reply = Beacon_V1_Reply()
                reply.id = id
                var cost = ReadCost(allowance: .max)  // a mirror's resync: bounded by the prefix's state
                reply.snapshot = try snapshot(.with { $0.prefix = delta.prefix }, now: now, context: context, cost: &cost)
                return .answer(reply, dependsOnStaged: false)
            }
            let prefixRevision = lease(delta.prefix, now: now, holder: context.peer)
            let page = try changes(prefix: delta.prefix, exact: false, from: delta.sinceRevision + 1,
                                   to: writes.headRevision, limit: delta.limit)
            return .encoded(try eventsReply(id: id, page, prefixRevision: prefixRevision))

        case .history(let history):
            if history.exact {
                if let problem = KeyPath.problem(key: history.prefix) { throw Refusal(.invalidKey, problem.description, key: history.prefix) }
                try checkRead(key: history.prefix, context: context)
            } else {
                try checkPrefix(history.prefix)
                try checkRead(prefix: history.prefix, context: context)
            }
            if history.fromRevision != 0 && history.fromRevision <= writes.pipeline.compactedRevision {
                throw compactedFailure(history.fromRevision)
            }
            let to = history.toRevision == 0 ? writes.headRevision : min(history.toRevision, writes.headRevision)
            let page = try changes(prefix: history.prefix, exact: history.exact, from: max(history.fromRevision, 1),
                                   to: to, limit: history.limit)
            return .encoded(try eventsReply(id: id, page, prefixRevision: 0))

        default:
            preconditionFailure("only Delta and History are answered with changes")
        }
    }

    /// Whether the changes under `prefix` after `since` outnumber its keys, so that a snapshot is
    /// the cheaper answer for a mirror. Costs at most one pass over the keys and as many changes.
    private func deltaOutgrowsState(prefix: String, since: UInt64) throws(Refusal) -> Bool {
        let keys = writes.store.keyCount(prefix: prefix)
        guard writes.headRevision - since > UInt64(keys) else { return false }  // fewer revisions than keys
        let probe = try changes(prefix: prefix, exact: false, from: since + 1, to: writes.headRevision,
                                limit: UInt32(clamping: keys + 1))
        return probe.more || probe.changes.count > keys
    }

    /// One page of journaled changes between `from` and `to`, and the revision it is complete through.
    private struct ChangesPage {
        var changes: [JournalChange]
        var more: Bool
        var revision: UInt64
    }

    private func changes(prefix: String, exact: Bool, from: UInt64, to: UInt64, limit: UInt32) throws(Refusal) -> ChangesPage {
        do {
            let page = try writes.journal.changes(prefix: prefix, exact: exact, from: from, to: to,
                                                    limit: limit == 0 ? WireLimits.defaultEventLimit : Int(limit))
            return ChangesPage(changes: page.changes, more: page.more,
                               revision: page.more ? (page.changes.last?.revision ?? to) : to)
        } catch {
            throw journalFailure(error)
        }
    }

    /// `page` as an encoded `EventsReply` to request `id`; a stored value that does not decode
    /// is an `INTERNAL` error, logged (never a page a client cannot read).
    private func eventsReply(id: UInt64, _ page: ChangesPage, prefixRevision: UInt64) throws(Refusal) -> [UInt8] {
        var events: [WireEncoder.Event] = []
        events.reserveCapacity(page.changes.count)
        for change in page.changes {
            if change.kind == .put && !EncodedValue.isWellFormed(change.value) {
                // Not certainly well formed: the decoder decides, as for any other read.
                do {
                    _ = try StoredValueCodec.value(change.value, key: change.key, revision: change.revision)
                } catch {
                    throw undecodable(error)
                }
            }
            events.append(WireEncoder.Event(
                revision: change.revision, part: change.part, parts: change.parts, kind: StoredValueCodec.kind(change.kind),
                key: change.key, encodedValue: change.value, version: change.version, createRevision: change.createRevision,
                expiresAtMilliseconds: change.expiresAtMilliseconds, timestampMilliseconds: change.timestampMilliseconds))
        }
        return WireEncoder.eventsReply(id: id, events: events, revision: page.revision, epoch: writes.epoch,
                                       prefixRevision: prefixRevision, compactedRevision: writes.pipeline.compactedRevision, more: page.more)
    }

    /// A stored entry as a wire key-value; a value that does not decode is an `INTERNAL` error, logged.
    func keyValue(_ key: String, _ entry: SignalStore.Entry, includingValue: Bool = true) throws(Refusal) -> Beacon_V1_KeyValue {
        do {
            return try StoredValueCodec.keyValue(key, entry, includingValue: includingValue)
        } catch {
            throw undecodable(error)
        }
    }

    private func undecodable(_ error: UndecodableValue) -> Refusal {
        logger.error("a stored value does not decode; the journal may be damaged", metadata: [
            "key": "\(error.key)", "revision": "\(error.revision)", "error": "\(error.reason)"])
        return Refusal(.internal, error.description, key: error.key)
    }

    // MARK: Replies

    /// Refuses request `id` with `code` and `message`.
    func reject(_ route: ReplyRoute, _ id: UInt64, _ code: Refusal.Code, _ message: String) {
        refuse(id, Refusal(code, message), route: route)
    }

    /// Answers with `reply` once the state it was decided against is durable, in request order.
    func send(_ reply: Beacon_V1_Reply, to route: ReplyRoute) {
        writes.queue(.answer(reply, dependsOnStaged: false), to: route)
    }

    /// Sends a reply the queue released.
    func deliver(_ route: ReplyRoute, _ reply: PendingReply) {
        switch reply {
        case .oneKeyWrite(let id, let revision, let version):
            sendOneKeyWriteReply(id: id, revision: revision, version: version, to: route)
        case .write(let id, let revision, let versions):
            send(body: WireEncoder.writeReply(id: id, revision: revision, versions: versions), to: route)
        case .answer(let answer, _):
            guard let body: [UInt8] = try? answer.serializedBytes() else {
                logger.error("reply not encoded", metadata: ["reply.id": "\(answer.id)"])
                return
            }
            send(body: body, to: route)
        case .encoded(let body):
            send(body: body, to: route)
        case .held:
            assertionFailure("a held place is released only once filled")
        }
    }

    private func send(body: [UInt8], to route: ReplyRoute) {
        switch route {
        case .peer(let envelope):
            send(body: body, to: envelope)
        case .batch(let replies, let slot):
            if let whole = replies.fill(slot, with: .encoded(body)) {
                // Answered whole: what it built is held as its reply from now on.
                if replies.builtBytes > 0 { turns.build(-replies.builtBytes, for: replies.peer) }
                send(body: whole, to: replies.envelope)
            }
        }
    }

    /// Answers a write that changed one key; in a batch, without encoding a reply of its own.
    private func sendOneKeyWriteReply(id: UInt64, revision: UInt64, version: UInt64, to route: ReplyRoute) {
        switch route {
        case .peer(let envelope):
            send(body: WireEncoder.writeReply(id: id, revision: revision, version: version), to: envelope)
        case .batch(let replies, let slot):
            if let whole = replies.fill(slot, with: .oneKeyWrite(id: id, revision: revision, version: version)) {
                if replies.builtBytes > 0 { turns.build(-replies.builtBytes, for: replies.peer) }
                send(body: whole, to: replies.envelope)
            }
        }
    }

}

/// The version of this build of Beacon.
public enum BeaconVersion {
    /// Semantic version of the daemon and protocol implementation.
    public static let string = "0.1.0"
}
