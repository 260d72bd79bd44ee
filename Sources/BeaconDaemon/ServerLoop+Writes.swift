import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import Logging
import SwiftProtobuf

extension ServerLoop {
    /// Stages a write decoded by SwiftProtobuf.
    func stageWrite(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext) {
        switch request.op {
        case .put(let put):
            stageWrite(id: request.id, [WriteOp(put)], writeID: Array(put.writeID), route: route, context: context)
        case .delete(let delete):
            stageWrite(id: request.id, [WriteOp(delete)], writeID: Array(delete.writeID), route: route, context: context)
        case .txn(let txn):
            var ops: [WriteOp] = []
            ops.reserveCapacity(txn.ops.count)
            for (index, op) in txn.ops.enumerated() {
                guard let converted = WriteOp(op) else {
                    return reject(route, request.id, .unknownRequest, "operation \(index): sets neither put nor delete")
                }
                ops.append(converted)
            }
            stageWrite(id: request.id, ops, writeID: Array(txn.writeID), route: route, context: context)
        default:
            preconditionFailure("not a write")
        }
    }

    /// Stages a put parsed by the fast path.
    func stageWrite(_ put: FastPut, route: ReplyRoute, context: RequestContext) {
        var op = WriteOp(key: put.key, action: .put(encodedValue: put.encodedValue, createOnly: put.createOnly,
                                                    ttlMilliseconds: put.ttlMilliseconds, session: []), ifVersion: put.ifVersion)
        if let problem = Beacon_V1_Value.sizeProblem(encodedBytes: put.encodedValue.count) {
            op.valueProblem = (.valueTooLarge, problem.description)
        }
        stageWrite(id: put.id, CollectionOfOne(op), writeID: put.writeID, route: route, context: context)
    }

    /// Generic so that a one-operation write passes its operation without allocating an array.
    private func stageWrite<Ops: RandomAccessCollection<WriteOp>>(id: UInt64, _ ops: Ops, writeID: [UInt8], route: ReplyRoute,
                                                                 context: RequestContext) where Ops.Index == Int {
        if writeID.count > WireLimits.maxWriteIDBytes {
            return reject(route, id, .invalidArgument, "write_id is \(writeID.count) bytes; the limit is \(WireLimits.maxWriteIDBytes)")
        }
        // Rights before the write id: a peer that may not make this write learns nothing of a
        // write with the same id.
        do throws(Refusal) {
            try checkWriteRights(ops, context: context)
        } catch {
            return refuse(id, error, route: route)
        }
        // Once: each read of a field of the class costs a retain and a release.
        let writes = self.writes
        // Ids are the writer's own: another peer's write with the same id is another write.
        let writeID = writeID.isEmpty ? writeID : context.owned(writeID)
        if !writeID.isEmpty, let revision = writes.committedRevision(ofWriteID: writeID) {
            return writes.answerRetry(id: id, revision: revision, route: route)
        }
        if let refusal = writes.readOnlyRefusal() {
            return refuse(id, refusal, route: route)
        }
        do throws(Refusal) {
            try admit(ops, context: context)
        } catch {
            return refuse(id, error, route: route)
        }
        do throws(Refusal) {
            let changes = try writes.prepare(ops, writeID: writeID, writer: context, sessionLimit: sessionLimit)
            var creates = 0
            for index in changes.indices where changes[index].kind == .put && changes[index].version == 1 { creates += 1 }
            if !access.mayCreate(creates, peer: context.peer) {
                throw Refusal(.quotaExceeded, "\(context.peer) may have at most \(access.limits.keysPerPeer) live keys it created (keys_per_peer)")
            }
            access.recordOwnership(of: changes, peer: context.peer)
            writes.stage(changes, of: ops, id: id, writeID: writeID, route: route)
        } catch {
            if error.code == .quotaExceeded { stats.quotaExceeded += 1 }
            // Decided against staged writes: it waits for them, and is retryable if they roll back.
            refuse(id, error, route: route, dependsOnStaged: true)
        }
    }

    /// Refuses a write with a key the peer may not write.
    func checkWriteRights<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops, context: RequestContext) throws(Refusal)
        where Ops.Index == Int {
        if context.rights.write.isEverything { return }  // no policy: nothing to look up or copy
        let writable = context.rights.write
        for index in ops.indices where !writable.contains(key: ops[index].key) {
            var rejection = denied("write '\(ops[index].key)' (writable: \(writable))", key: ops[index].key, context: context)
            rejection.operationIndex = UInt32(index)
            throw rejection
        }
    }

    /// How many sessions a peer may hold (`sessions_per_peer`); 0 when peers are not told apart
    /// (without rules or per-peer limits every peer may end any session).
    var sessionLimit: Int { access.needsPeerIdentity ? Int(access.limits.sessionsPerPeer) : 0 }

    /// Checks a write against the peer's limits, after its rights and before its preconditions:
    /// the value size limit, the write rate, and the journal size.
    func admit<Ops: RandomAccessCollection<WriteOp>>(_ ops: Ops, context: RequestContext) throws(Refusal) where Ops.Index == Int {
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
        if limits.writesPerSecond > 0, let wait = access.takeWrite(peer: context.peer, now: clock.now().milliseconds) {
            stats.rateLimited += 1
            var refusal = Refusal(.rateLimited, "more than \(limits.writesPerSecond) writes per second from \(context.peer) (writes_per_second); retry in \(wait) ms")
            refusal.retryAfterMilliseconds = wait
            throw refusal
        }
        if limits.maxJournalBytes > 0, stats.journalBytes >= limits.maxJournalBytes,
           ops.contains(where: { if case .put = $0.action { true } else { false } }) {
            stats.quotaExceeded += 1
            throw Refusal(.quotaExceeded, "the journal holds \(stats.journalBytes) bytes, at its limit of \(limits.maxJournalBytes) (max_journal_bytes); deletes still work")
        }
    }

    // MARK: Publishing

    /// Publishes the diffs of one revision's changes; adds its commit marker to `markers` if it
    /// has several.
    private func publish(_ changes: [JournalChange], markers: inout [Beacon_V1_CommitMarker], on publisher: Publisher) {
        let epoch = writes.epoch
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
        if publisher.mayHoldMore(than: live.limits.publishBufferBytes) { closeStalledSubscribers() }
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
        heartbeat.epoch = writes.epoch
        heartbeat.instance = stats.instance
        // Only what subscribers could have received: a heartbeat is a bookmark (PROTOCOL.md §6).
        heartbeat.headRevision = writes.durableRevision
        heartbeat.compactedRevision = writes.pipeline.compactedRevision
        heartbeat.intervalMs = live.heartbeatIntervalMilliseconds
        heartbeat.timestampMs = clock.wallMilliseconds()
        heartbeat.prefixes = publisher.tracker.heads
        if let upstream = authority.upstreamStatus { heartbeat.upstream = upstream }
        heartbeat.bundles = true
        publishHeartbeats(heartbeat)
    }
}

extension ServerLoop: WritePathDelegate {
    /// Publishes a committed batch: each diff on its key's topic and into the bundles it belongs
    /// to; the group's bundles; then its commit markers, which a subscriber of bundles must
    /// receive after the diffs they close (proto/PROTOCOL.md §5.4).
    func publish(_ batch: [StagedWrite]) {
        let publisher = self.publisher  // once: each read of the computed field is a retain and a release
        network.metrics?.recordCommit(nanoseconds: writes.pipeline.lastCommitNanoseconds)
        publisher.beginGroup()
        var markers: [Beacon_V1_CommitMarker] = []
        // Indexing borrows each write; a for-in loop would copy (retain) every field.
        for index in batch.indices {
            // The array alone: passing the write would copy all of it.
            publish(batch[index].changes, markers: &markers, on: publisher)
        }
        for (topic, error) in publisher.finishGroup() {
            logger.warning("publish failed", metadata: ["topic": "\(topic)", "error": "\(error)"])
        }
        for marker in markers { publishCommitMarkers(marker) }
        if publisher.mayHoldMore(than: live.limits.publishBufferBytes) { closeStalledSubscribers() }
    }

    func committed(_ batch: [StagedWrite]) {
        stats.commits += 1
        stats.writes += UInt64(batch.count)
        authority.committed(host: self)
    }

    func rolledBack(_ refused: [StagedWrite], _ error: JournalError) {
        stats.rejected += UInt64(refused.count { !$0.isDaemons })
        authority.rolledBack(host: self)
    }

    func removedByDaemon(_ changes: [JournalChange]) {
        access.recordOwnership(of: changes, peer: nil)
    }
}

extension ServerLoop: AuthorityHost {
    var perConnectionBytes: Int { network.replyFlows.limits.perConnection }

    /// Chooses who decides writes: the upstream this daemon relays, when one is configured.
    static func makeAuthority(for configuration: DaemonConfiguration, network: DaemonNetwork, writes: WritePath,
                          logger: Logger) throws(DaemonError) -> any WriteAuthority {
        if let etcd = configuration.etcd {
            #if Etcd
            return try EtcdFront(settings: etcd, writes: writes, sessionTTLMilliseconds: configuration.sessionTTLMilliseconds, logger: logger)
            #else
            _ = etcd
            throw DaemonError(.startup, DaemonConfiguration.EtcdSettings.notBuilt)
            #endif
        }
        guard let upstream = configuration.upstream else { return JournalAuthority() }
        return try Relay(settings: upstream, idKeyPath: configuration.stateDirectory + "/relay-ids.key", context: network.context,
                         writes: writes, logger: logger)
    }

    func checkWrite(_ ops: [WriteOp], context: RequestContext) throws(Refusal) {
        try checkWriteRights(ops, context: context)
        try admit(ops, context: context)
    }

    func closeConnection(_ connection: RoutingID, pilingUp held: Int, reason: String) {
        if let victim = network.replyFlows.victim(closing: connection, heldBytes: held, reason: reason) {
            closeConnection(victim, because: "it piles requests up behind writes the upstream has not answered")
        } else {
            network.replyFlows.close(connection, now: clock.now())
        }
    }

    func countRejected(_ count: UInt64) { stats.rejected += count }

    func countAccessDenied() { stats.accessDenied += 1 }

    func countQuotaExceeded() { stats.quotaExceeded += 1 }

    func historyReplaced(at revision: UInt64) {
        publisher.tracker.restart(at: revision)
        answerCompactionWaiters(removed: 0)  // what a compaction under way would have removed is gone
        publishHeartbeat()
    }
}
