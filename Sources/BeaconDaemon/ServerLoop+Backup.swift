import BeaconJournal
import BeaconProtocol

extension ServerLoop {
    /// Answers a `Backup` request. A new copy (empty token) is made in steps between other
    /// requests (``backupStep()``) and the request answered with its first chunk once it is
    /// made; a chunk of a made copy is answered at once.
    func requestBackup(_ request: Beacon_V1_Backup, id: UInt64, route: ReplyRoute, context: RequestContext) throws(Refusal) {
        guard context.rights.read.isEverything else { throw denied("back up the journal (needs read=*)", key: "", context: context) }
        let now = clock.now()
        guard request.token.isEmpty else {
            var reply = Beacon_V1_Reply()
            reply.id = id
            reply.backup = try maintenance.backups.chunk([UInt8](request.token), at: request.offset, now: now, owner: route.connection)
            send(reply, to: route)
            return
        }
        guard request.offset == 0 else { throw Refusal(.invalidArgument, "a new backup starts at offset 0") }
        writes.flush()  // the journal is the loop's to use only with no commit in flight
        try maintenance.backups.begin(from: writes.journal, now: now, ticket: { writes.hold(route) }, requestID: id,
                                      owner: route.connection)
        maintenance.backupPacer.start()
        logger.info("journal backup started", metadata: ["journal.bytes": "\(writes.pipeline.sizeInBytes)"])
    }

    /// Lets go of the backups connection `id` asked for: it closed, and nobody reads them.
    func releaseBackups(of id: RoutingID) {
        guard let stopped = maintenance.backups.release(owner: id) else { return }
        logger.info("journal backup stopped: the connection that asked for it closed")
        var reply = Beacon_V1_Reply()
        reply.id = stopped.requestID
        reply.error = Refusal(.notFound, "the backup was stopped: its connection closed").wire(headRevision: writes.headRevision)
        writes.fill(stopped.ticket, with: reply)
    }

    /// Nanoseconds until the loop should copy the next pages of a backup (0: now), or `nil` when
    /// no copy is being made (paced by ``StepPacer``, like compaction).
    func backupStepWait(busy: Bool) -> UInt64? {
        guard maintenance.backups.making != nil else { return nil }
        return maintenance.backupPacer.wait(busy: busy)
    }

    /// Copies the next pages of the backup being made; once it is made, answers its request with
    /// the first chunk (or with the error that ended it).
    func backupStep() {
        writes.flush()  // steps use the journal's connection: no commit may be in flight
        let started = StepPacer.monotonicNanoseconds()
        let progress = maintenance.backups.step(pages: maintenance.backupPacer.size, revision: writes.journal.headRevision, now: clock.now())
        maintenance.backupPacer.stepped(startedAt: started)
        var reply = Beacon_V1_Reply()
        switch progress {
        case .copying:
            return
        case .made(let making):
            reply.id = making.requestID
            do {
                reply.backup = try maintenance.backups.chunk(making.token, at: 0, now: clock.now())
                logger.info("journal backup made", metadata: [
                    "revision": "\(reply.backup.revision)", "bytes": "\(reply.backup.size)",
                    "seconds": "\(Double(StepPacer.monotonicNanoseconds() - started) / 1e9)"])
            } catch {
                stats.rejected += 1
                reply.error = error.wire(headRevision: writes.headRevision)
            }
            writes.fill(making.ticket, with: reply)
        case .failed(let making, let refusal):
            logger.error("journal backup failed", metadata: ["error": "\(refusal.message)"])
            stats.rejected += 1
            reply.id = making.requestID
            reply.error = refusal.wire(headRevision: writes.headRevision)
            writes.fill(making.ticket, with: reply)
        }
    }
}
