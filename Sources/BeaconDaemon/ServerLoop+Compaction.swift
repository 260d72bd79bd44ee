import BeaconJournal
import BeaconProtocol
import Foundation

/// The loop's share of a compaction under way: the pace of its steps, and the `Compact`
/// requests waiting for it to finish.
struct CompactionSchedule {
    /// Change records a step examines, sized to hold the loop about 8 ms.
    var pacer = StepPacer(initialSize: 4096, sizes: 256...1_048_576)
    /// When the compaction under way started (monotonic nanoseconds).
    var startedAt: UInt64 = 0
    /// `Compact` requests answered when the compaction under way finishes, in the places their
    /// connections' replies keep for them.
    var waiters: [(ticket: HoldTicket, id: UInt64)] = []
}

extension ServerLoop {
    /// Starts a compaction through `revision` (announced at once; done in steps by
    /// ``compactionStepIfDue(busy:)``).
    func beginCompaction(through revision: UInt64) throws(JournalError) {
        writes.flush()  // the journal is the loop's to use only with no commit in flight
        guard try writes.journal.beginCompaction(through: revision) else { return }
        writes.dropTombstones()
        maintenance.compaction.startedAt = StepPacer.monotonicNanoseconds()
        maintenance.compaction.pacer.start()
        logger.info("journal compaction started", metadata: ["journal.compacted": "\(writes.pipeline.compactedRevision)"])
    }

    /// Starts the compaction the retention policy asks for, if any.
    func compactByPolicy() {
        writes.flush()  // the journal is the loop's to use only with no commit in flight
        do {
            let target = try writes.journal.compactionTarget(for: live.retention, nowMilliseconds: clock.wallMilliseconds())
            if target > writes.pipeline.compactedRevision { try beginCompaction(through: target) }
        } catch {
            logger.warning("compaction failed", metadata: ["error": "\(error)"])
        }
    }

    /// Nanoseconds until the loop should run the next compaction step (0: now), or `nil` when no
    /// compaction is under way (paced by ``StepPacer``).
    func compactionStepWait(busy: Bool) -> UInt64? {
        guard writes.pipeline.isCompacting else { return nil }
        return maintenance.compaction.pacer.wait(busy: busy)
    }

    /// Runs one step of the compaction under way, and answers its waiters when it finishes.
    func compactionStep() {
        writes.flush()
        let started = StepPacer.monotonicNanoseconds()
        let progress: CompactionProgress?
        do {
            progress = try writes.journal.continueCompaction(rows: maintenance.compaction.pacer.size)
        } catch {
            logger.warning("compaction step failed; retrying in 1 s", metadata: ["error": "\(error)"])
            maintenance.compaction.pacer.failed()
            return
        }
        maintenance.compaction.pacer.stepped(startedAt: started)
        guard let progress, progress.isFinished else { return }
        let seconds = Double(StepPacer.monotonicNanoseconds() - maintenance.compaction.startedAt) / 1e9
        logger.info("journal compacted", metadata: [
            "journal.compacted": "\(progress.target)", "removed": "\(progress.removed)",
            "seconds": "\((seconds * 1000).rounded() / 1000)"])
        answerCompactionWaiters(removed: UInt64(progress.removed))
    }

    /// Answers the `Compact` requests waiting for the compaction that finished (or, on a relay,
    /// was overtaken by the upstream's state).
    func answerCompactionWaiters(removed: UInt64) {
        let waiters = maintenance.compaction.waiters
        maintenance.compaction.waiters.removeAll()
        for waiter in waiters {
            var reply = Beacon_V1_Reply()
            reply.id = waiter.id
            reply.compact = .with {
                $0.compactedRevision = writes.pipeline.compactedRevision
                $0.removed = removed
            }
            writes.fill(waiter.ticket, with: reply)
        }
    }

    /// Answers a `Compact` request: at once when there is nothing to compact, else when the
    /// compaction it starts (or one under way that reaches as far) finishes.
    func requestCompaction(_ compact: Beacon_V1_Compact, id: UInt64, route: ReplyRoute, context: RequestContext) throws(Refusal) {
        guard context.rights.write.isEverything else { throw denied("compact the journal (needs write=*)", key: "", context: context) }
        if compact.revision > writes.headRevision {
            throw Refusal(.futureRevision, "revision \(compact.revision) is above head \(writes.headRevision)")
        }
        do {
            try beginCompaction(through: compact.revision)
        } catch {
            logger.error("compaction failed", metadata: ["error": "\(error)"])
            throw Refusal(.internal, error.description)
        }
        if writes.pipeline.isCompacting {
            maintenance.compaction.waiters.append((writes.hold(route), id))
            return
        }
        var reply = Beacon_V1_Reply()
        reply.id = id
        reply.compact = .with {
            $0.compactedRevision = writes.pipeline.compactedRevision
            $0.removed = 0
        }
        send(reply, to: route)
    }
}
