import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation

/// A relay's state, the loop's: the link to the upstream, the requests forwarded and waiting for
/// its answer, and the answered writes waiting for the relay's own mirror to show them.
struct RelayState {
    let link: UpstreamLink
    /// What the link last reported.
    var status = UpstreamLink.Status()
    /// Forwarded requests by token: where the answer goes, and the place it holds.
    var forwarded: [UInt64: Forwarded] = [:]
    var nextToken: UInt64 = 1
    /// Writes the upstream acknowledged at a revision (of its epoch) this relay has not journaled
    /// yet, in revision order: answered once it has (read-your-writes through the relay); their
    /// connections' later replies wait.
    var awaitingMirror: [AwaitingMirror] = []
    /// Client write ids and sessions, as sent upstream.
    let ids: ForwardedIDs
    var writesForwarded: UInt64 = 0
    /// Per connection, the forwarded requests not yet answered (and, for writes, shown here).
    var unanswered: [RoutingID: Int] = [:]
    /// Per connection, requests that came after a forwarded one and are decided only once it is
    /// answered: a read sent after a write sees it, and nothing sent later is applied before.
    var deferred: [RoutingID: DeferredRequests] = [:]
    /// Connections whose forwarded requests were all answered, with requests deferred.
    var replayDue: Set<RoutingID> = []

    struct Deferred {
        var request: Beacon_V1_Request
        var bytes: Int
        var route: ReplyRoute
        var inBatch: Bool
        var context: RequestContext
    }

    /// One connection's deferred requests, in order, and their encoded size: bounded by
    /// `reply_buffer_bytes`, like the replies it does not read.
    struct DeferredRequests {
        var requests: [Deferred] = []
        var bytes = 0
    }

    struct AwaitingMirror {
        var connection: RoutingID
        var epoch: UInt64
        var revision: UInt64
        var ticket: HoldTicket
        var reply: Beacon_V1_Reply
    }

    struct Forwarded {
        var connection: RoutingID
        var ticket: HoldTicket
        /// The client's request id.
        var id: UInt64
    }
}

extension BeaconServer {
    /// Opens the link to the upstream; called once the journal and sockets are open.
    func startRelay() throws(DaemonError) {
        guard let settings = configuration.upstream else { return }
        guard let publish = settings.resolvedPublishEndpoint else {
            throw DaemonError(.startup, "upstream_publish is needed for \(settings.requestEndpoint)")
        }
        let ids: ForwardedIDs
        do {
            ids = try ForwardedIDs(keyFile: configuration.stateDirectory + "/relay-ids.key")
        } catch {
            throw DaemonError(.startup, "cannot keep the relay's write id key in \(configuration.stateDirectory): \(error)")
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
            let link = try UpstreamLink(endpoint: endpoint, context: context, after: resumable ? journal.headRevision : 0,
                                        epoch: writes.epoch, logger: logger)
            relay = RelayState(link: link, ids: ids)
        } catch {
            throw DaemonError(.startup, "cannot open the upstream link: \(error)")
        }
    }

    /// Does what the link's sockets and deadlines call for, and takes what it reported:
    /// mirrored revisions and snapshots, answers, status.
    func serviceUpstream() {
        guard let link = relay?.link else { return }
        var events: [UpstreamEvent] = []
        link.service(into: &events)
        guard !events.isEmpty else { return }
        var staged = false
        for event in events {
            switch event {
            case .revisions(let epoch, let revisions):
                staged = stageMirrored(epoch: epoch, revisions) || staged
            case .reset(let epoch, let revision, let steps):
                replaceWithUpstream(epoch: epoch, revision: revision, steps: steps)
            case .answered(let token, let reply):
                answerForwarded(token: token, reply)
            case .status(let status):
                relay!.status = status
                mirrorAdvanced()  // the upstream's epoch may be known now
            }
        }
        if staged { writes.submitStagedIfIdle() }
    }

    /// Applies whole upstream revisions to the store and stages them for the journal, with the
    /// upstream's revisions and versions; they are published and answered like any commit.
    /// - Returns: whether anything was staged.
    private func stageMirrored(epoch: UInt64, _ revisions: [[Beacon_V1_Event]]) -> Bool {
        guard epoch == writes.epoch else {
            // Never expected: the link takes a snapshot before revisions of another epoch.
            logger.error("the upstream link released revisions of another epoch; following again", metadata: [
                "epoch": "\(epoch)", "journal.epoch": "\(writes.epoch)"])
            writes.flush()
            relay!.link.resume(after: writes.durableRevision, epoch: writes.epoch)
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
    private func replaceWithUpstream(epoch: UInt64, revision: UInt64, steps: [FollowerCore.Step]) {
        writes.flush()
        let endpoint = relay!.link.endpoint
        let previousEpoch = writes.epoch
        do {
            var state: [String: JournalEntry] = [:]
            if epoch == writes.epoch {
                for entry in try writes.journal.loadState() where !entry.isDeleted && endpoint.carries(entry.key) {
                    state[entry.key] = entry
                }
            }
            for step in steps {
                switch step {
                case .revisions(_, let events):
                    for event in events { state[event.change.key] = Beacon_V1_KeyValue(after: event).map(Self.journalEntry) }
                case .snapshot(let prefix, _, _, let kvs):
                    state = state.filter { !$0.key.hasPrefix(prefix) }
                    for kv in kvs { state[kv.key] = Self.journalEntry(kv) }
                case .resumed:
                    break
                }
            }
            try writes.journal.replaceContents(epoch: epoch, revision: revision, entries: Array(state.values), scope: endpoint.scope)
            try loadState()
        } catch {
            logger.error("the upstream's snapshot could not be journaled; following again", metadata: ["error": "\(error)"])
            relay!.link.resume(after: 0, epoch: 0)
            return
        }
        let keys = writes.store.count
        writes.forgetWriteIDs()
        publisher.tracker.restart(at: revision)
        answerCompactionWaiters(removed: 0)  // what a compaction under way would have removed is gone
        logger.notice("the relay took the upstream's state", metadata: [
            "epoch": "\(epoch)", "epoch.before": "\(previousEpoch)", "revision": "\(revision)", "keys": "\(keys)"])
        mirrorAdvanced()
        publishHeartbeat()
    }

    /// The relay's journal reached `writes.durableRevision`, or the upstream's epoch changed:
    /// acknowledged writes it now shows are answered. Only while the relay holds the upstream's
    /// current epoch: then a write acknowledged in an earlier one is gone with that journal, and
    /// one of this epoch is shown once its revision is durable here.
    func mirrorAdvanced() {
        let epoch = writes.epoch
        guard let link = relay?.link, link.upstreamEpoch == epoch,
              let count = relay?.awaitingMirror.prefix(while: { $0.epoch != epoch || $0.revision <= writes.durableRevision }).count,
              count > 0 else { return }
        let shown = Array(relay!.awaitingMirror[..<count])  // its own copy: the removal below stays in place
        relay!.awaitingMirror.removeFirst(count)
        for entry in shown {
            writes.fill(entry.ticket, with: entry.reply)
            forwardedAnswered(entry.connection)
        }
    }

    /// One forwarded request of `connection` was answered; its deferred requests are decided
    /// once none is left (``replayDeferred()``, at the end of the loop's pass: not in the middle
    /// of handling another peer's request).
    private func forwardedAnswered(_ connection: RoutingID) {
        guard let left = relay!.unanswered[connection] else { return }
        if left > 1 {
            relay!.unanswered[connection] = left - 1
            return
        }
        relay!.unanswered[connection] = nil
        if relay!.deferred[connection] != nil { relay!.replayDue.insert(connection) }
    }

    /// Whether `request` must wait behind `route`'s connection's forwarded requests: anything
    /// but another forwarded write while some are unanswered, and everything behind what waits.
    func deferIfBehindForwarded(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool) -> Bool {
        guard let connection = route.connection else { return false }
        let unanswered = relay!.unanswered[connection] ?? 0
        let waiting = !replaying && relay!.deferred[connection] != nil
        guard unanswered > 0 || waiting else { return false }
        if !waiting && Self.isForwarded(request) { return false }  // writes pipeline behind writes
        let bytes = ((try? request.serializedBytes()) as [UInt8]?)?.count ?? 0
        let held = (relay!.deferred[connection]?.bytes ?? 0) + bytes
        guard held <= replyFlows.limits.perConnection else {
            closeDeferring(connection, held: held)
            return true
        }
        relay!.deferred[connection, default: .init()].requests.append(
            .init(request: request, bytes: bytes, route: route, inBatch: inBatch, context: current))
        relay!.deferred[connection]!.bytes = held
        return true
    }

    /// Closes a connection whose requests waiting behind its forwarded writes passed
    /// `reply_buffer_bytes`; they are dropped, and whatever it sends until it is closed too.
    private func closeDeferring(_ connection: RoutingID, held: Int) {
        relay!.deferred[connection] = nil
        relay!.replayDue.remove(connection)
        let reason = "requests waiting behind its forwarded writes passed reply_buffer_bytes (\(replyFlows.limits.perConnection))"
        if let victim = replyFlows.victim(closing: connection, heldBytes: held, reason: reason) {
            closeConnection(victim, because: "it piles requests up behind writes the upstream has not answered")
        } else {
            replyFlows.close(connection, now: clock.now())
        }
    }

    static func isForwarded(_ request: Beacon_V1_Request) -> Bool {
        switch request.op {
        case .put, .delete, .txn, .keepAlive: true
        default: false
        }
    }

    /// Decides the deferred requests of the connections whose forwarded requests were all
    /// answered, in order, until one of them must wait again.
    func replayDeferred() {
        while let connection = relay?.replayDue.popFirst() {
            while let next = relay!.deferred[connection]?.requests.first {
                if (relay!.unanswered[connection] ?? 0) > 0 && !Self.isForwarded(next.request) { break }
                relay!.deferred[connection]!.requests.removeFirst()
                relay!.deferred[connection]!.bytes -= next.bytes
                if relay!.deferred[connection]!.requests.isEmpty { relay!.deferred[connection] = nil }
                current = next.context
                handle(next.request, route: next.route, inBatch: next.inBatch, replaying: true)
            }
        }
    }

    // MARK: Writes through the relay

    /// Forwards a write or `KeepAlive` to the upstream, after this relay's own rules and limits
    /// allow it. Its reply keeps its connection's place until the upstream answers and, for a
    /// write, until this relay's journal holds the write's revision.
    func forwardToUpstream(_ request: Beacon_V1_Request, route: ReplyRoute) {
        guard var op = request.op else { return }
        do throws(Refusal) {
            try checkForwardable(&op)
        } catch {
            return refuse(request.id, error, route: route)
        }
        guard let connection = route.connection else { return }  // a ROUTER always gives one
        let ticket = writes.hold(route)
        let token = relay!.nextToken
        relay!.nextToken += 1
        relay!.forwarded[token] = .init(connection: connection, ticket: ticket, id: request.id)
        relay!.unanswered[connection, default: 0] += 1
        relay!.writesForwarded += 1
        if !relay!.link.forward(token: token, op) { answerForwarded(token: token, nil) }
    }

    /// Checks `op` against this relay's rules, limits and the protocol's own limits, and puts the
    /// client's write id and session in the client's namespace, as sent upstream.
    private func checkForwardable(_ op: inout Beacon_V1_Request.OneOf_Op) throws(Refusal) {
        let ids = relay!.ids
        func forwarded(_ id: Data) -> Data {
            Data(ids.forwarded(id.isEmpty ? [] : ownedByCurrentPeer(Array(id))))
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
            guard !current.rights.write.isEmpty else { throw denied("keep sessions alive (needs some write right)", key: "") }
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
        if isWrite {
            try checkWriteRights(ops)
            for (index, item) in ops.enumerated() where !relay!.link.endpoint.carries(item.key) {
                var refusal = outsideRelay(item.key)
                refusal.operationIndex = UInt32(index)
                throw refusal
            }
            // What the upstream would refuse whatever its state, refused here the same way (the
            // session's length as the client sent it, before it is named for the upstream).
            if let problem = WriteOp.countProblem(ops.count) {
                throw WritePath.rejection(problem.code, problem.message, key: "", index: 0, current: 0, operations: ops.count)
            }
            for index in ops.indices {
                if let problem = ops[index].inputProblem ?? ops[index].limitProblem {
                    throw WritePath.rejection(problem.code, problem.message, key: ops[index].key, index: index, current: 0, operations: ops.count)
                }
            }
            try admit(ops)
        }
        guard let status = relay?.status, status.reachable else {
            let heard = relay?.status.lastHeardMilliseconds ?? 0
            let since = heard == 0 ? "has not been reached since this relay started"
                : "was last heard from \((clock.wallMilliseconds() &- heard) / 1000) s ago"
            throw Refusal(.upstreamUnavailable, "this relay's upstream \(configuration.upstream?.requestEndpoint ?? "") \(since); "
                + "reads are served from the relay's copy, writes are refused: retry later")
        }
    }

    /// Answers a forwarded request with the upstream's reply, or — when none came in time — with
    /// `UPSTREAM_UNAVAILABLE`, which says the write may have been applied.
    private func answerForwarded(token: UInt64, _ upstreamReply: Beacon_V1_Reply?) {
        guard let forwarded = relay?.forwarded.removeValue(forKey: token) else { return }
        guard var reply = upstreamReply else {
            counters.rejected += 1
            var answer = Beacon_V1_Reply()
            answer.id = forwarded.id
            answer.error = Refusal(.upstreamUnavailable, "no answer from this relay's upstream within \(UpstreamLink.forwardTimeoutMilliseconds) ms: "
                + "the write may or may not have been applied; retry with the same write_id to find out").wire(headRevision: writes.durableRevision)
            writes.fill(forwarded.ticket, with: answer)
            return forwardedAnswered(forwarded.connection)
        }
        reply.id = forwarded.id
        switch reply.result {
        case .write(let write) where write.revision > writes.durableRevision || relay!.link.upstreamEpoch != writes.epoch:
            // In revision order (the upstream answers one connection in order; a refusal between
            // two writes is answered at once).
            let entry = RelayState.AwaitingMirror(connection: forwarded.connection, epoch: relay!.link.upstreamEpoch,
                                                  revision: write.revision, ticket: forwarded.ticket, reply: reply)
            let place = relay!.awaitingMirror.lastIndex { $0.epoch != entry.epoch || $0.revision <= entry.revision }.map { $0 + 1 } ?? 0
            relay!.awaitingMirror.insert(entry, at: place)
            mirrorAdvanced()
            return
        case .error(var error):
            counters.rejected += 1
            // Never a revision this relay's clients cannot read yet.
            error.headRevision = min(error.headRevision, writes.durableRevision)
            reply.error = error
        default:
            break
        }
        writes.fill(forwarded.ticket, with: reply)
        forwardedAnswered(forwarded.connection)
    }

    /// Answers every forwarded request still waiting, at shutdown, and then the requests that
    /// waited behind them (which may forward more: answered the same way).
    func abandonForwarded() {
        while let relay, !relay.forwarded.isEmpty || !relay.awaitingMirror.isEmpty || !relay.replayDue.isEmpty {
            for token in relay.forwarded.keys.sorted() { answerForwarded(token: token, nil) }
            for entry in relay.awaitingMirror {
                var answer = Beacon_V1_Reply()
                answer.id = entry.reply.id
                answer.error = Refusal(.upstreamUnavailable, "the relay stopped before it received revision \(entry.revision), "
                    + "which the upstream applied; retry with the same write_id").wire(headRevision: writes.durableRevision)
                writes.fill(entry.ticket, with: answer)
                forwardedAnswered(entry.connection)
            }
            self.relay!.awaitingMirror.removeAll()
            replayDeferred()
        }
    }

    /// The refusal of a key or prefix outside what this relay carries.
    func outsideRelay(_ keyOrPrefix: String) -> Refusal {
        counters.accessDenied += 1
        let carried = relay!.link.endpoint.prefixes.map { "'\($0)'" }.joined(separator: ", ")
        return Refusal(.permissionDenied, "this relay carries only the keys under \(carried); "
            + "'\(keyOrPrefix)' is not among them (ask its upstream, \(relay!.link.endpoint.request))", key: keyOrPrefix)
    }

    /// The link's state as the protocol reports it; `nil` on a primary.
    var upstreamStatusMessage: Beacon_V1_UpstreamStatus? {
        guard let relay else { return nil }
        return .with {
            $0.endpoint = relay.link.endpoint.request
            $0.reachable = relay.status.reachable
            $0.headRevision = relay.status.headRevision
            $0.lastHeardMs = relay.status.lastHeardMilliseconds
        }
    }
}

extension BeaconServer {
    /// What systemd's status line says of the upstream; empty on a primary.
    var relayStatusLine: String {
        guard let relay else { return "" }
        let status = relay.status
        let lag = status.headRevision > writes.headRevision ? status.headRevision - writes.headRevision : 0
        return ", relay of \(relay.link.endpoint.request): "
            + (status.reachable ? "upstream head \(status.headRevision), \(lag) behind" : "UPSTREAM UNREACHABLE, serving what it has")
    }
}
