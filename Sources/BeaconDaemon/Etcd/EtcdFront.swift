#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconJournal
import BeaconProtocol
import Foundation
import Logging

/// An etcd front's write authority: etcd decides every write, and the front's journal is a copy
/// of what etcd holds under the front's prefix, filled by one watch (``EtcdLink``).
///
/// A write becomes one etcd transaction (``EtcdWritePlan``); the front answers it once etcd has
/// committed it and the front's own journal shows its revision, so that its client reads its
/// write here. A connection's writes go to etcd one at a time, in the order sent (etcd applies
/// concurrent transactions in any order); its later requests wait behind them, bounded in bytes
/// (``ForwardingOrder`` without pipelining).
///
/// A consistent read takes the commit clock's revision from etcd by a linearizable read: every
/// front's acknowledged write wrote the clock at or below it (``ConsistentReads``). It is answered
/// once the watch has brought this front through that revision and the journal holds it. Loop
/// thread only.
final class EtcdFront: ForwardingAuthority {
    /// What a write or `KeepAlive` on its way to etcd is.
    enum Work {
        case write(EtcdWritePlan)
        /// A session (in its writer's namespace) renewed for a time, or ended (0).
        case keepAlive(session: [UInt8], ttlMilliseconds: UInt64)
    }

    typealias Pending = ForwardedRequest<Work>

    /// A key that expires: when (wall-clock Unix ms, as `expires_at_ms` says), and its write.
    struct Expiry {
        var key: String
        var modRevision: UInt64
        var expiresAtMilliseconds: UInt64
    }

    let link: EtcdLink
    private let logger: Logger
    private let clock: any DaemonClock
    private var reachable = false
    private var etcdHead: UInt64 = 0
    private var lastHeardMilliseconds: UInt64 = 0
    /// Writes sent, by token; at most one per connection.
    private var sent: [UInt64: Pending] = [:]
    private var nextToken: UInt64 = 1
    /// Requests behind writes to etcd, write fences, consistent reads (against etcd revisions).
    let gate: ForwardingGate
    private var awaitingJournal = MirrorWaiters<HeldAnswer>()
    /// Keys with a time to live, by expiry. Keyed by wall-clock milliseconds, not monotonic ones:
    /// `expires_at_ms` is the same at every front, and any of them may expire the key.
    private var expiries = TimerQueue<Expiry>()
    private(set) var writesForwarded: UInt64 = 0

    /// Connects to the cluster of `settings`, resuming from what `writes`' journal holds of it
    /// (when it holds this prefix of this cluster's epoch), or taking the cluster's state anew.
    /// - Parameter sessionTTLMilliseconds: how long a session lives that a put starts (`session_ttl_ms`).
    init(settings: DaemonConfiguration.EtcdSettings, writes: WritePath, sessionTTLMilliseconds: UInt64, logger: Logger) throws(DaemonError) {
        let layout = EtcdLayout(prefix: settings.prefix)
        let journal = writes.journal
        let resumable = journal.contentScope == layout.scope && journal.headRevision > 0
        if !resumable && journal.headRevision > 0 {
            logger.notice("the journal holds no copy of this etcd prefix: the front takes it anew", metadata: [
                "prefix": "\(settings.prefix)", "journal.head": "\(journal.headRevision)"])
        }
        var lastCommit: UInt64 = 0
        if resumable, let last = try? journal.changes(prefix: "", exact: false, from: journal.headRevision, to: journal.headRevision,
                                                     limit: 1).changes.last {
            lastCommit = last.timestampMilliseconds
        }
        link = try EtcdLink(settings: settings, after: resumable ? journal.headRevision : 0, journalEpoch: writes.epoch,
                            lastCommitMilliseconds: lastCommit, sessionTTLMilliseconds: sessionTTLMilliseconds, logger: logger)
        self.logger = logger
        clock = writes.clock
        gate = ForwardingGate(pipelinesForwarded: false, forwardedWhat: "its writes to etcd", clock: writes.clock)
        if resumable { scheduleExpiries(of: writes.store) }
    }

    /// Sets an expiry for every key of `store` that has a time to live.
    private func scheduleExpiries(of store: SignalStore) {
        expiries = TimerQueue()
        store.forEachExpiringOrBound { key, entry in
            if entry.expiresAtMilliseconds > 0 { schedule(Expiry(key: key, modRevision: entry.modRevision, expiresAtMilliseconds: entry.expiresAtMilliseconds)) }
        }
    }

    private func schedule(_ expiry: Expiry) {
        expiries.schedule(expiry, at: MonotonicTime(milliseconds: expiry.expiresAtMilliseconds))
    }

    var stagesWritesHere: Bool { false }

    // MARK: The loop

    func register(in registry: inout PollRegistry, host: some AuthorityHost) {
        registry.onReadable(fileDescriptor: link.wake.fileDescriptor) { [unowned self, unowned host] in service(host: host) }
    }

    /// Takes what the link reported: revisions, the cluster's state, answers, status.
    private func service(host: some AuthorityHost) {
        var staged = false
        for event in link.take() {
            switch event {
            case .revisions(let revisions):
                for changes in revisions where changes[0].revision > host.writes.headRevision {
                    host.writes.stageMirrored(changes)
                    staged = true
                    for change in changes where change.kind == .put && change.expiresAtMilliseconds > 0 {
                        schedule(Expiry(key: change.key, modRevision: change.revision, expiresAtMilliseconds: change.expiresAtMilliseconds))
                    }
                }
            case .reset(let epoch, let revision, let entries):
                staged = false  // committed first: the journal is replaced behind them
                takeState(epoch: epoch, revision: revision, entries: entries, host: host)
            case .answered(let token, let result):
                answer(token: token, result, host: host)
            case .keptAlive(let token, let result):
                answerKeepAlive(token: token, result, host: host)
            case .expiryNotSent(let key, let modRevision):
                // Tried again in half a second.
                schedule(Expiry(key: key, modRevision: modRevision, expiresAtMilliseconds: host.writes.clock.wallMilliseconds() + 500))
            case .status(let reachable, let head):
                self.reachable = reachable
                if reachable {
                    etcdHead = max(etcdHead, head)
                    lastHeardMilliseconds = host.writes.clock.wallMilliseconds()
                }
            case .followed(let through):
                gate.followed(through: through, stagedHead: host.writes.headRevision)
            case .readIndex(let token, let result):
                learnedReadIndex(token: token, result, host: host)
            }
        }
        if staged { host.writes.submitStagedIfIdle() }
        journalAdvanced(host: host)
    }

    /// Hands back, in order, the requests of connections whose writes were all answered; sends
    /// the expiries that are due.
    func finishPass(host: some AuthorityHost) {
        gate.handBack(expired: Refusal(.upstreamUnavailable, "this front's copy did not reach etcd's revision within "
            + "\(ForwardingGate.readPatienceMilliseconds) ms: retry, or read without consistent"), host: host)
        let now = host.writes.clock.wallMilliseconds()
        while let (expiry, _) = expiries.popDue(at: MonotonicTime(milliseconds: now)) {
            // Only as of the key's write now: a later write set another expiry, or none.
            guard reachable, host.writes.store.live(expiry.key)?.modRevision == expiry.modRevision else {
                if !reachable { schedule(Expiry(key: expiry.key, modRevision: expiry.modRevision, expiresAtMilliseconds: now + 500)) }
                continue
            }
            link.expire(expiry.key, modRevision: expiry.modRevision, nowMilliseconds: now)
        }
    }

    /// Until the next expiry or a consistent read's deadline, at most.
    var pollTimeoutMilliseconds: Int? {
        var timeout: Int?
        if let next = expiries.nextDeadline?.milliseconds {
            let now = clock.wallMilliseconds()
            timeout = next > now ? Int(min(next - now, 60_000)) : 0
        }
        guard let reads = gate.pollTimeoutMilliseconds else { return timeout }
        return min(timeout ?? .max, reads)
    }

    func committed(host: some AuthorityHost) { journalAdvanced(host: host) }

    func rolledBack(host: some AuthorityHost) {
        // Revisions the journal did not take are read again from etcd.
        let writes = host.writes
        let last = (try? writes.journal.changes(prefix: "", exact: false, from: writes.durableRevision, to: writes.durableRevision,
                                                limit: 1))?.changes.last
        link.resume(after: writes.durableRevision, journalEpoch: writes.epoch, lastCommitMilliseconds: last?.timestampMilliseconds ?? 0)
    }

    /// Answers every write still waiting (it may have been applied), then the requests behind them.
    func shutDown(host: some AuthorityHost) {
        while !sent.isEmpty || !awaitingJournal.isEmpty || gate.holdsRequests {
            gate.refuseEveryRead(Refusal(.upstreamUnavailable, "the front stopped before it could answer a consistent read: retry"), host: host)
            for token in sent.keys.sorted() {
                if case .keepAlive = sent[token]?.work {
                    answerKeepAlive(token: token, .failure(.etcd(EtcdError(.closed, "the front stopped"))), host: host)
                } else {
                    answer(token: token, .failure(.etcd(EtcdError(.closed, "the front stopped"))), host: host)
                }
            }
            gate.refuse(awaitingJournal.takeAll(), host: host) { revision in
                Refusal(.upstreamUnavailable, "the front stopped before its journal showed revision \(revision), which etcd applied; "
                    + "retry with the same write_id")
            }
            finishPass(host: host)
        }
        link.close()
    }

    // MARK: Mirroring

    /// Replaces the journal and the store with the cluster's state at `revision`.
    private func takeState(epoch: UInt64, revision: UInt64, entries: [JournalEntry], host: some AuthorityHost) {
        let writes = host.writes
        let previousEpoch = writes.epoch
        do {
            try writes.journal.replaceContents(epoch: epoch, revision: revision, entries: entries, scope: link.layout.scope)
            try writes.load()
        } catch {
            logger.critical("the cluster's state could not be journaled", metadata: ["error": "\(error)"])
            return
        }
        writes.forgetWriteIDs()
        scheduleExpiries(of: writes.store)
        gate.journalReplaced(at: revision)
        logger.notice("the front took the cluster's state", metadata: [
            "epoch": "\(epoch)", "epoch.before": "\(previousEpoch)", "revision": "\(revision)", "keys": "\(writes.store.count)"])
        host.historyReplaced(at: revision)
        journalAdvanced(host: host)
    }

    /// The journal advanced: applied writes it now shows are answered, and consistent reads
    /// whose read index it now holds are handed back.
    private func journalAdvanced(host: some AuthorityHost) {
        let writes = host.writes
        gate.journalDurable(through: writes.durableRevision)
        for var entry in awaitingJournal.takeShown(journalEpoch: writes.epoch, upstreamEpoch: writes.epoch,
                                                   durableRevision: writes.durableRevision) {
            if let revision = entry.replayedRevision {
                let versions = (try? writes.journal.changes(prefix: "", exact: false, from: revision, to: revision,
                                                            limit: WireLimits.maxTxnOps))?.changes.map(\.version) ?? []
                entry.reply.write.versions = versions
            }
            writes.fill(entry.ticket, with: entry.reply)
            gate.answered(entry.connection)
        }
    }

    // MARK: Requests

    // MARK: Consistent reads

    /// Asks for `read`'s read index (etcd's commit clock, shared with the reads that arrive while
    /// it is asked for), unless no member with a leader answers.
    func startConsistentRead(_ read: ForwardingGate.WaitingRequest, host: some AuthorityHost) {
        let unreachable = reachable ? nil : Refusal(.upstreamUnavailable, "no member of \(link.clusterName) with a leader "
            + "answers this front, so it cannot tell which writes other fronts acknowledged: retry, or read without consistent")
        gate.start(read, unlessRefused: unreachable, host: host, askReadIndex: askReadIndex)
    }

    private func askReadIndex() {
        let token = nextToken
        nextToken += 1
        gate.askingReadIndex(token: token)
        link.readIndex(token: token)
    }

    private func learnedReadIndex(token: UInt64, _ result: Result<UInt64, EtcdError>, host: some AuthorityHost) {
        guard gate.isReadIndex(token) else { return }
        let refusal = { () -> Refusal in
            guard case .failure(let error) = result else { return Refusal(.upstreamUnavailable, "etcd gave no revision: retry") }
            return Refusal(.upstreamUnavailable, "etcd did not tell this front its revision (\(error.message)): retry, or read without consistent")
        }
        if gate.learnedReadIndex(try? result.get(), refusal: refusal(), host: host) { askReadIndex() }
    }

    /// Sends a write to etcd once this front's rules and limits allow it; its reply keeps its
    /// connection's place until etcd answers and this front's journal shows it.
    func decide(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext, host: some AuthorityHost) {
        guard let op = request.op else { return }
        let connection = route.connection
        let work: Work
        let clientWriteID: Data
        do throws(Refusal) {
            if case .keepAlive(let keepAlive) = op {
                clientWriteID = Data()
                guard !context.rights.write.isEmpty else {
                    throw host.denied("keep sessions alive (needs some write right)", key: "", context: context)
                }
                guard (1...WireLimits.maxSessionBytes).contains(keepAlive.session.count) else {
                    throw Refusal(.invalidArgument, "session is \(keepAlive.session.count) bytes; it must be 1 to \(WireLimits.maxSessionBytes)")
                }
                guard keepAlive.ttlMs <= WireLimits.maxSessionTTLMilliseconds else {
                    throw Refusal(.invalidArgument, "ttl_ms is \(keepAlive.ttlMs); the limit is \(WireLimits.maxSessionTTLMilliseconds)")
                }
                guard reachable else { throw unreachable() }
                work = .keepAlive(session: context.owned(Array(keepAlive.session)), ttlMilliseconds: UInt64(keepAlive.ttlMs))
                return send(Pending(connection: connection, ticket: host.writes.hold(route), id: request.id,
                                    clientWriteID: clientWriteID, work: work), host: host)
            }
            var (ops, writeID) = try Self.operations(of: op)
            clientWriteID = writeID
            try check(ops, writeID: writeID, context: context, host: host)
            if let fenced = gate.fenceRefusal(connection, writeID: writeID) { throw fenced }
            guard reachable else { throw unreachable() }
            for index in ops.indices {
                if case .put(let value, let createOnly, let ttl, let session) = ops[index].action, !session.isEmpty {
                    ops[index].action = .put(encodedValue: value, createOnly: createOnly, ttlMilliseconds: ttl, session: context.owned(session))
                }
            }
            work = .write(try EtcdWritePlan(ops: ops, writeID: writeID.isEmpty ? [] : context.owned(Array(writeID)), layout: link.layout))
        } catch {
            if error.code == .upstreamUnavailable, let id = ForwardingGate.writeID(of: op) { gate.answeredUnavailable(connection, writeID: id) }
            return host.refuse(request.id, error, route: route, dependsOnStaged: false)
        }
        send(Pending(connection: connection, ticket: host.writes.hold(route), id: request.id, clientWriteID: clientWriteID, work: work),
             host: host)
    }

    private func unreachable() -> Refusal {
        Refusal(.upstreamUnavailable, "no member of \(link.clusterName) with a leader answers this front; "
            + "reads are served from its copy, writes are refused: retry later")
    }

    /// Sends `pending` (the connection's only one in flight: its later writes wait in `order`).
    private func send(_ pending: Pending, host: some AuthorityHost) {
        gate.forwarded(by: pending.connection)
        writesForwarded += 1
        let token = nextToken
        nextToken += 1
        sent[token] = pending
        let now = host.writes.clock.wallMilliseconds()
        switch pending.work {
        case .write(let plan):
            link.send(plan, token: token, nowMilliseconds: now, sessionLimit: host.sessionLimit)
        case .keepAlive(let session, let ttl):
            link.keepAlive(session, ttlMilliseconds: ttl, token: token, nowMilliseconds: now, sessionLimit: host.sessionLimit)
        }
    }

    /// A write's operations and write id.
    private static func operations(of op: Beacon_V1_Request.OneOf_Op) throws(Refusal) -> ([WriteOp], Data) {
        switch op {
        case .put(let put):
            return ([WriteOp(put)], put.writeID)
        case .delete(let delete):
            return ([WriteOp(delete)], delete.writeID)
        case .txn(let txn):
            var ops: [WriteOp] = []
            for (index, item) in txn.ops.enumerated() {
                guard let converted = WriteOp(item) else {
                    throw Refusal(.unknownRequest, "operation \(index): sets neither put nor delete")
                }
                ops.append(converted)
            }
            return (ops, txn.writeID)
        default:
            preconditionFailure("only writes and KeepAlive are decided by the write authority")
        }
    }

    /// This front's rights and limits, and the protocol's own limits, as a primary checks them.
    private func check(_ ops: [WriteOp], writeID: Data, context: RequestContext, host: some AuthorityHost) throws(Refusal) {
        if writeID.count > WireLimits.maxWriteIDBytes {
            throw Refusal(.invalidArgument, "write_id is \(writeID.count) bytes; the limit is \(WireLimits.maxWriteIDBytes)")
        }
        try host.checkWrite(ops, context: context)
        try ForwardingGate.checkLimits(of: ops)
    }

    /// Answers a write with etcd's outcome: applied (once the journal shows it), refused, or —
    /// when no member answered — `UPSTREAM_UNAVAILABLE`, which says it may have been applied;
    /// the connection's later writes are then turned away (``WriteFences``) until it sends this
    /// one again.
    private func answer(token: UInt64, _ result: Result<Etcdserverpb_TxnResponse, EtcdLinkFailure>, host: some AuthorityHost) {
        guard let pending = sent.removeValue(forKey: token) else { return }
        let writes = host.writes
        var reply = Beacon_V1_Reply()
        reply.id = pending.id
        switch result {
        case .success(let response):
            guard case .write(let plan) = pending.work else { return }
            switch plan.outcome(of: response) {
            case .applied(let revision, let versions):
                reply.write = .with {
                    $0.revision = revision
                    $0.versions = versions
                }
                awaitingJournal.add(HeldAnswer(connection: pending.connection, ticket: pending.ticket, reply: reply), epoch: writes.epoch,
                                    revision: revision)
            case .replayed(let revision):
                reply.write = .with {
                    $0.revision = revision
                    $0.replayed = plan.isClientsWriteID
                }
                awaitingJournal.add(HeldAnswer(connection: pending.connection, ticket: pending.ticket, reply: reply, replayedRevision: revision),
                                    epoch: writes.epoch, revision: revision)
            case .refused(let refusal):
                host.countRejected(1)
                reply.error = refusal.wire(headRevision: writes.durableRevision)
                writes.fill(pending.ticket, with: reply)
                gate.answered(pending.connection)
            }
            journalAdvanced(host: host)
        case .failure(let failure):
            host.countRejected(1)
            let refusal: Refusal = switch failure {
            case .sessionLimit(let limit):
                Self.sessionLimitRefusal(limit, host: host)
            case .etcd(let error) where error.code == .rejected:
                Refusal(.invalidArgument, "etcd refused the write: \(error.message)")
            case .etcd(let error):
                Refusal(.upstreamUnavailable, "etcd did not answer (\(error.message)): the write may or may not have been applied; "
                    + "retry with the same write_id to find out")
            }
            reply.error = refusal.wire(headRevision: writes.durableRevision)
            writes.fill(pending.ticket, with: reply)
            if refusal.code == .upstreamUnavailable { gate.answeredUnavailable(pending.connection, writeID: pending.clientWriteID) }
            gate.answered(pending.connection)
        }
    }

    /// Answers a `KeepAlive` with the session's keys and end, or `UPSTREAM_UNAVAILABLE`.
    private func answerKeepAlive(token: UInt64, _ result: Result<Beacon_V1_KeepAliveReply, EtcdLinkFailure>, host: some AuthorityHost) {
        guard let pending = sent.removeValue(forKey: token) else { return }
        var reply = Beacon_V1_Reply()
        reply.id = pending.id
        switch result {
        case .success(let kept):
            reply.keepAlive = kept
        case .failure(.sessionLimit(let limit)):
            host.countRejected(1)
            reply.error = Self.sessionLimitRefusal(limit, host: host).wire(headRevision: host.writes.durableRevision)
        case .failure(.etcd(let error)):
            host.countRejected(1)
            reply.error = Refusal(.upstreamUnavailable, "etcd did not renew the session (\(error.message)): retry")
                .wire(headRevision: host.writes.durableRevision)
        }
        host.writes.fill(pending.ticket, with: reply)
        gate.answered(pending.connection)
    }

    private static func sessionLimitRefusal(_ limit: Int, host: some AuthorityHost) -> Refusal {
        host.countQuotaExceeded()
        return Refusal(.quotaExceeded, "this peer holds \(limit) sessions in etcd (sessions_per_peer)")
    }

    // MARK: Reporting

    var upstreamStatus: Beacon_V1_UpstreamStatus? {
        .with {
            $0.endpoint = link.clusterName
            $0.reachable = reachable
            $0.headRevision = etcdHead
            $0.lastHeardMs = lastHeardMilliseconds
        }
    }

    func statusLine(headRevision: UInt64) -> String {
        ", front of \(link.clusterName): "
            + (reachable ? "etcd revision \(etcdHead)" : "ETCD UNREACHABLE, serving what it has")
    }
}
#endif
