import BeaconJournal
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Logging

/// A relay's write authority: it mirrors what it carries of an upstream into its own journal
/// (revisions and snapshots from its ``UpstreamLink``), forwards its clients' writes and
/// `KeepAlive`s there, and answers a forwarded write once its own journal shows it — so that a
/// client of the relay reads its writes — keeping each connection's later requests behind its
/// forwarded ones (``ForwardingOrder``).
///
/// A consistent read learns its read index from the upstream (a `Ping` with `sync`, which the
/// upstream answers once it holds every write acknowledged anywhere before it) and is answered
/// once the relay's journal holds everything it carries through that revision
/// (``ConsistentReads``). Loop thread only.
final class Relay: ForwardingAuthority {
    let link: UpstreamLink
    /// Client write ids and sessions, as sent upstream.
    private let ids: ForwardedIDs
    /// What the link last reported.
    private var status = UpstreamLink.Status()
    /// Forwarded requests by token.
    private var forwarded: [UInt64: ForwardedRequest<Void>] = [:]
    private var nextToken: UInt64 = 1
    /// Requests behind forwarded ones, write fences, consistent reads (against upstream revisions).
    let gate: ForwardingGate
    private var awaitingMirror = MirrorWaiters<HeldAnswer>()
    private(set) var writesForwarded: UInt64 = 0
    /// What the link last reported complete (``UpstreamLink/completeThrough``).
    private var lastCompleteThrough: UInt64 = 0

    /// Opens the link to `settings`' upstream, resuming from what `writes`' journal holds of it
    /// (the link finds out with its first delta whether it is the same), or taking it anew.
    /// - Parameters:
    ///   - idKeyPath: the file that keeps the key naming forwarded write ids (``ForwardedIDs``).
    init(settings: DaemonConfiguration.UpstreamSettings, idKeyPath: String, context: ZMQContext, writes: WritePath,
         logger: Logger) throws(DaemonError) {
        guard let publish = settings.resolvedPublishEndpoint else {
            throw DaemonError(.startup, "upstream_publish is needed for \(settings.requestEndpoint)")
        }
        gate = ForwardingGate(pipelinesForwarded: true, forwardedWhat: "its forwarded writes", clock: writes.clock)
        do {
            ids = try ForwardedIDs(keyFile: idKeyPath)
        } catch {
            throw DaemonError(.startup, "cannot keep the relay's write id key at \(idKeyPath): \(error)")
        }
        do {
            // What the journal holds is the upstream's through its head if it copied the same
            // prefixes and the epochs match (the link finds out with its first delta); otherwise
            // the link starts with snapshots.
            let endpoint = UpstreamLink.Endpoint(request: settings.requestEndpoint, publish: publish, curve: settings.curve,
                                                 prefixes: settings.carriedPrefixes)
            let journal = writes.journal
            let resumable = journal.contentScope == endpoint.scope
            if !resumable && journal.headRevision > 0 {
                logger.notice("the journal holds no copy of these upstream prefixes: the relay takes them anew", metadata: [
                    "prefixes": "\(endpoint.prefixes)", "journal.head": "\(journal.headRevision)"])
            }
            link = try UpstreamLink(endpoint: endpoint, context: context, after: resumable ? journal.headRevision : 0,
                                    epoch: writes.epoch, logger: logger)
        } catch {
            throw DaemonError(.startup, "cannot open the upstream link: \(error)")
        }
    }

    var stagesWritesHere: Bool { false }

    // MARK: The loop

    /// Its upstream's sockets wake the loop; each pass, it services them and its deadlines.
    func register(in registry: inout PollRegistry, host: some AuthorityHost) {
        registry.wakes(on: link.subscriber)
        for socket in link.requests.pollable { registry.wakes(on: socket) }
        registry.everyPass { [unowned self, unowned host] in service(host: host) }
    }

    var socketGeneration: Int { link.requests.socketChanges }

    var pollTimeoutMilliseconds: Int? {
        min(link.timeoutMilliseconds, gate.pollTimeoutMilliseconds ?? .max)
    }

    /// Does what the link's sockets and deadlines call for, and takes what it reported:
    /// mirrored revisions and snapshots, answers, status.
    private func service(host: some AuthorityHost) {
        var events: [UpstreamEvent] = []
        link.service(into: &events)
        guard !events.isEmpty else { return }
        var staged = false
        for event in events {
            switch event {
            case .revisions(let epoch, let revisions):
                staged = stageMirrored(epoch: epoch, revisions, host: host) || staged
            case .reset(let epoch, let revision, let steps):
                replaceWithUpstream(epoch: epoch, revision: revision, steps: steps, host: host)
            case .answered(let token, let reply) where gate.isReadIndex(token):
                learnedReadIndex(reply, host: host)
            case .answered(let token, let reply):
                answerForwarded(token: token, reply, host: host)
            case .status(let status):
                self.status = status
                mirrorAdvanced(host: host)  // the upstream's epoch may be known now
            }
        }
        if staged { host.writes.submitStagedIfIdle() }
        let complete = link.completeThrough
        if complete > lastCompleteThrough {
            lastCompleteThrough = complete
            gate.followed(through: complete, stagedHead: host.writes.headRevision)
            mirrorAdvanced(host: host)
        }
    }

    /// Hands back, in order, the requests of the connections whose forwarded requests were all
    /// answered, until one of them must wait again.
    func finishPass(host: some AuthorityHost) {
        gate.handBack(expired: Refusal(.upstreamUnavailable, "this relay's copy did not reach its upstream's revision within "
            + "\(ForwardingGate.readPatienceMilliseconds) ms: retry, or read without consistent"), host: host)
    }

    func committed(host: some AuthorityHost) { mirrorAdvanced(host: host) }

    func rolledBack(host: some AuthorityHost) {
        // Mirrored revisions that were not journaled are fetched again.
        link.resume(after: host.writes.durableRevision, epoch: host.writes.epoch)
    }

    /// Answers every forwarded request still waiting, and then the requests that waited behind
    /// them (which may forward more: answered the same way); closes the link.
    func shutDown(host: some AuthorityHost) {
        while !forwarded.isEmpty || !awaitingMirror.isEmpty || gate.holdsRequests {
            gate.refuseEveryRead(Refusal(.upstreamUnavailable, "the relay stopped before it could answer a consistent read: retry"), host: host)
            for token in forwarded.keys.sorted() { answerForwarded(token: token, nil, host: host) }
            gate.refuse(awaitingMirror.takeAll(), host: host) { revision in
                Refusal(.upstreamUnavailable, "the relay stopped before it received revision \(revision), which the upstream applied; "
                    + "retry with the same write_id")
            }
            finishPass(host: host)
        }
        link.close()
    }

    // MARK: Mirroring

    /// Applies whole upstream revisions to the store and stages them for the journal, with the
    /// upstream's revisions and versions; they are published and answered like any commit.
    /// - Returns: whether anything was staged.
    private func stageMirrored(epoch: UInt64, _ revisions: [[Beacon_V1_Event]], host: some AuthorityHost) -> Bool {
        let writes = host.writes
        guard epoch == writes.epoch else {
            // Never expected: the link takes a snapshot before revisions of another epoch.
            host.logger.error("the upstream link released revisions of another epoch; following again", metadata: [
                "epoch": "\(epoch)", "journal.epoch": "\(writes.epoch)"])
            writes.flush()
            link.resume(after: writes.durableRevision, epoch: writes.epoch)
            return false
        }
        var staged = false
        for events in revisions {
            guard let first = events.first, first.revision > writes.headRevision else { continue }
            // Parts are numbered within what this relay carries (a prefix relay gets some of a
            // revision's changes), so that its own diffs, markers and deltas are whole.
            let changes = events.enumerated().map { part, event in
                Self.mirroredChange(event, part: UInt32(part), parts: UInt32(events.count))
            }
            writes.stageMirrored(changes)
            staged = true
        }
        return staged
    }

    /// An upstream key's state as the journal keeps it.
    private static func journalEntry(_ kv: Beacon_V1_KeyValue) -> JournalEntry {
        JournalEntry(key: kv.key, value: (try? kv.value.serializedBytes()) ?? [], version: kv.version, createRevision: kv.createRevision,
                     modRevision: kv.modRevision, expiresAtMilliseconds: kv.expiresAtMs, isDeleted: false, modTimeMilliseconds: kv.modTimeMs)
    }

    private static func mirroredChange(_ event: Beacon_V1_Event, part: UInt32, parts: UInt32) -> JournalChange {
        let change = event.change
        let kind: ChangeKind = switch change.kind {
        case .put: .put
        case .expire: .expire
        default: .delete
        }
        return JournalChange(
            revision: event.revision, part: part, parts: parts, kind: kind, key: change.key,
            value: kind == .put ? ((try? change.value.serializedBytes()) ?? []) : [],
            version: change.version, createRevision: change.createRevision,
            expiresAtMilliseconds: change.expiresAtMs, timestampMilliseconds: event.timestampMs)
    }

    /// Replaces the journal and the store with the upstream's state at `revision` of everything
    /// carried (first sync, a new upstream epoch, history the upstream compacted away, other
    /// prefixes than the journal copied): what the relay holds (nothing of it in a new epoch), with
    /// `steps` — snapshots and the revisions between them — applied in order. Local clients learn
    /// of it by the next heartbeat, sent at once: a new epoch makes them resync, a head past their
    /// position makes them ask for a delta, which is answered COMPACTED, and they resync.
    private func replaceWithUpstream(epoch: UInt64, revision: UInt64, steps: [FollowerCore.Step], host: some AuthorityHost) {
        let writes = host.writes
        let endpoint = link.endpoint
        let previousEpoch = writes.epoch
        do {
            let journal = writes.journal
            var state: [String: JournalEntry] = [:]
            if epoch == previousEpoch {
                for entry in try journal.loadState() where !entry.isDeleted && endpoint.carries(entry.key) {
                    state[entry.key] = entry
                }
            }
            for step in steps {
                switch step {
                case .revisions(_, let events):
                    for event in events { state[event.change.key] = Beacon_V1_KeyValue(after: event).map(Self.journalEntry) }
                case .snapshot(let prefix, _, _, let kvs):
                    state = state.filter { !$0.key.isUnder(prefix) }
                    for kv in kvs { state[kv.key] = Self.journalEntry(kv) }
                case .resumed:
                    break
                }
            }
            try journal.replaceContents(epoch: epoch, revision: revision, entries: Array(state.values), scope: endpoint.scope)
            try writes.load()
        } catch {
            host.logger.error("the upstream's snapshot could not be journaled; following again", metadata: ["error": "\(error)"])
            link.resume(after: 0, epoch: 0)
            return
        }
        writes.forgetWriteIDs()
        gate.journalReplaced(at: revision)
        lastCompleteThrough = 0
        host.logger.notice("the relay took the upstream's state", metadata: [
            "epoch": "\(epoch)", "epoch.before": "\(previousEpoch)", "revision": "\(revision)", "keys": "\(writes.store.count)"])
        host.historyReplaced(at: revision)
        mirrorAdvanced(host: host)
    }

    /// The relay's journal advanced, or the upstream's epoch changed: acknowledged writes it now
    /// shows are answered.
    private func mirrorAdvanced(host: some AuthorityHost) {
        gate.journalDurable(through: host.writes.durableRevision)
        let shown = awaitingMirror.takeShown(journalEpoch: host.writes.epoch, upstreamEpoch: link.upstreamEpoch,
                                             durableRevision: host.writes.durableRevision)
        for entry in shown {
            host.writes.fill(entry.ticket, with: entry.reply)
            gate.answered(entry.connection)
        }
    }

    // MARK: Requests

    // MARK: Consistent reads

    /// Asks for `read`'s read index (the upstream's `Ping{sync}`, shared with the reads that arrive while
    /// it is asked for), unless the upstream is out of reach.
    func startConsistentRead(_ read: ForwardingGate.WaitingRequest, host: some AuthorityHost) {
        let unreachable = status.reachable ? nil : Refusal(.upstreamUnavailable, "this relay cannot reach its upstream, "
            + "\(link.endpoint.request), so it cannot tell which writes were acknowledged there: retry, or read without consistent")
        gate.start(read, unlessRefused: unreachable, host: host) { askReadIndex(host: host) }
    }

    private func askReadIndex(host: some AuthorityHost) {
        let token = nextToken
        nextToken += 1
        gate.askingReadIndex(token: token)
        if !link.forward(token: token, .ping(.with { $0.sync = true })) { learnedReadIndex(nil, host: host) }
    }

    /// The upstream's answer to the read index asked for: its `read_revision` (its head, from a
    /// primary that predates consistent reads: a primary's reads all are).
    private func learnedReadIndex(_ reply: Beacon_V1_Reply?, host: some AuthorityHost) {
        var refusal = Refusal(.upstreamUnavailable, "no read index from this relay's upstream within \(UpstreamLink.forwardTimeoutMilliseconds) ms: retry")
        var readIndex: UInt64?
        switch reply?.result {
        case .ping(let ping) where ping.consistentReads:
            readIndex = ping.readRevision
        case .ping(let ping) where !ping.hasUpstream:
            readIndex = ping.headRevision
        case .ping(let ping):
            refusal = Refusal(.invalidArgument, "this relay's upstream, beacond \(ping.daemonVersion) at \(link.endpoint.request), mirrors "
                + "another daemon and cannot serve a consistent read: read without consistent")
        case .error(let error):
            refusal = Refusal(.upstreamUnavailable, "the upstream did not give a read index (\(error.code): \(error.message)): retry")
        default:
            break
        }
        if gate.learnedReadIndex(readIndex, refusal: refusal, host: host) { askReadIndex(host: host) }
        mirrorAdvanced(host: host)
    }

    func refusesRead(of keyOrPrefix: String, host: some AuthorityHost) -> Refusal? {
        link.endpoint.carries(keyOrPrefix) ? nil : outside(keyOrPrefix, host: host)
    }

    /// The refusal of a key or prefix outside what this relay carries.
    private func outside(_ keyOrPrefix: String, host: some AuthorityHost) -> Refusal {
        host.countAccessDenied()
        let carried = link.endpoint.prefixes.map { "'\($0)'" }.joined(separator: ", ")
        return Refusal(.permissionDenied, "this relay carries only the keys under \(carried); "
            + "'\(keyOrPrefix)' is not among them (ask its upstream, \(link.endpoint.request))", key: keyOrPrefix)
    }

    /// Forwards a write or `KeepAlive` to the upstream, after this relay's own rules and limits
    /// allow it. Its reply keeps its connection's place until the upstream answers and, for a
    /// write, until this relay's journal holds the write's revision.
    ///
    /// Once a write of a connection is answered `UPSTREAM_UNAVAILABLE`, its later writes are
    /// answered so too until it sends one of those again, or for five seconds (``WriteFences``).
    func decide(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext, host: some AuthorityHost) {
        guard var op = request.op else { return }
        let connection = route.connection
        let writeID = ForwardingGate.writeID(of: op)
        do throws(Refusal) {
            try checkForwardable(&op, context: context, host: host)
            if let writeID, let fenced = gate.fenceRefusal(connection, writeID: writeID) { throw fenced }
        } catch {
            if let writeID, error.code == .upstreamUnavailable { gate.answeredUnavailable(connection, writeID: writeID) }
            return host.refuse(request.id, error, route: route, dependsOnStaged: false)
        }
        let ticket = host.writes.hold(route)
        let token = nextToken
        nextToken += 1
        forwarded[token] = ForwardedRequest(connection: connection, ticket: ticket, id: request.id, clientWriteID: writeID ?? Data(), work: ())
        gate.forwarded(by: connection)
        writesForwarded += 1
        if !link.forward(token: token, op) { answerForwarded(token: token, nil, host: host) }
    }

    /// Checks `op` against this relay's rules, limits and the protocol's own limits, and puts the
    /// client's write id and session in the client's namespace, as sent upstream.
    private func checkForwardable(_ op: inout Beacon_V1_Request.OneOf_Op, context: RequestContext,
                                  host: some AuthorityHost) throws(Refusal) {
        let ids = self.ids
        func forwarded(_ id: Data) -> Data {
            Data(ids.forwarded(id.isEmpty ? [] : context.owned(Array(id))))
        }
        var writeID = Data()
        var ops: [WriteOp] = []
        var isWrite = true
        switch op {
        case .put(var put):
            ops = [WriteOp(put)]
            writeID = put.writeID
            put.writeID = forwarded(put.writeID)
            put.session = forwarded(put.session)
            op = .put(put)
        case .delete(var delete):
            ops = [WriteOp(delete)]
            writeID = delete.writeID
            delete.writeID = forwarded(delete.writeID)
            op = .delete(delete)
        case .txn(var txn):
            for (index, item) in txn.ops.enumerated() {
                guard let converted = WriteOp(item) else {
                    throw Refusal(.unknownRequest, "operation \(index): sets neither put nor delete")
                }
                ops.append(converted)
                if case .put(var put) = item.op, !put.session.isEmpty {
                    put.session = forwarded(put.session)
                    txn.ops[index].put = put
                }
            }
            writeID = txn.writeID
            txn.writeID = forwarded(txn.writeID)
            op = .txn(txn)
        case .keepAlive(var keepAlive):
            guard !context.rights.write.isEmpty else {
                throw host.denied("keep sessions alive (needs some write right)", key: "", context: context)
            }
            guard (1...WireLimits.maxSessionBytes).contains(keepAlive.session.count) else {
                throw Refusal(.invalidArgument, "session is \(keepAlive.session.count) bytes; it must be 1 to \(WireLimits.maxSessionBytes)")
            }
            keepAlive.session = forwarded(keepAlive.session)
            op = .keepAlive(keepAlive)
            isWrite = false
        default:
            preconditionFailure("only writes and KeepAlive are forwarded")
        }
        if writeID.count > WireLimits.maxWriteIDBytes {
            throw Refusal(.invalidArgument, "write_id is \(writeID.count) bytes; the limit is \(WireLimits.maxWriteIDBytes)")
        }
        if isWrite { try checkWrite(ops, context: context, host: host) }
        guard status.reachable else {
            let heard = status.lastHeardMilliseconds
            let since = heard == 0 ? "has not been reached since this relay started"
                : "was last heard from \((host.writes.clock.wallMilliseconds() &- heard) / 1000) s ago"
            throw Refusal(.upstreamUnavailable, "this relay's upstream \(link.endpoint.request) \(since); "
                + "reads are served from the relay's copy, writes are refused: retry later")
        }
    }

    /// Refuses here what the upstream would refuse whatever its state, the same way (the
    /// session's length as the client sent it, before it is named for the upstream), and what
    /// this relay's rights, limits and prefixes do not allow.
    private func checkWrite(_ ops: [WriteOp], context: RequestContext, host: some AuthorityHost) throws(Refusal) {
        try host.checkWrite(ops, context: context)
        for (index, item) in ops.enumerated() where !link.endpoint.carries(item.key) {
            var refusal = outside(item.key, host: host)
            refusal.operationIndex = UInt32(index)
            throw refusal
        }
        try ForwardingGate.checkLimits(of: ops)
    }

    /// Answers a forwarded request with the upstream's reply, or — when none came in time — with
    /// `UPSTREAM_UNAVAILABLE`, which says the write may have been applied.
    private func answerForwarded(token: UInt64, _ upstreamReply: Beacon_V1_Reply?, host: some AuthorityHost) {
        guard let forwarded = forwarded.removeValue(forKey: token) else { return }
        let writes = host.writes
        guard var reply = upstreamReply else {
            host.countRejected(1)
            var answer = Beacon_V1_Reply()
            answer.id = forwarded.id
            answer.error = Refusal(.upstreamUnavailable, "no answer from this relay's upstream (none within \(UpstreamLink.forwardTimeoutMilliseconds) ms, or its connection ended): "
                + "the write may or may not have been applied; retry with the same write_id to find out").wire(headRevision: writes.durableRevision)
            writes.fill(forwarded.ticket, with: answer)
            gate.answeredUnavailable(forwarded.connection, writeID: forwarded.clientWriteID)
            return gate.answered(forwarded.connection)
        }
        reply.id = forwarded.id
        switch reply.result {
        case .write(let write) where write.revision > writes.durableRevision || link.upstreamEpoch != writes.epoch:
            // In revision order (the upstream answers one connection in order; a refusal between
            // two writes is answered at once).
            awaitingMirror.add(HeldAnswer(connection: forwarded.connection, ticket: forwarded.ticket, reply: reply),
                               epoch: link.upstreamEpoch, revision: write.revision)
            mirrorAdvanced(host: host)
            return
        case .error(var error):
            host.countRejected(1)
            // Never a revision this relay's clients cannot read yet.
            error.headRevision = min(error.headRevision, writes.durableRevision)
            reply.error = error
        default:
            break
        }
        writes.fill(forwarded.ticket, with: reply)
        gate.answered(forwarded.connection)
    }

    // MARK: Reporting

    var upstreamStatus: Beacon_V1_UpstreamStatus? {
        .with {
            $0.endpoint = link.endpoint.request
            $0.reachable = status.reachable
            $0.headRevision = status.headRevision
            $0.lastHeardMs = status.lastHeardMilliseconds
        }
    }

    func statusLine(headRevision: UInt64) -> String {
        let lag = status.headRevision > headRevision ? status.headRevision - headRevision : 0
        return ", relay of \(link.endpoint.request): "
            + (status.reachable ? "upstream head \(status.headRevision), \(lag) behind" : "UPSTREAM UNREACHABLE, serving what it has")
    }
}
