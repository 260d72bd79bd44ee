import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Logging

/// What a relay's link tells the loop, in the order it happened.
enum UpstreamEvent {
    /// Whole revisions of the upstream, in order, each as its events.
    case revisions(epoch: UInt64, [[Beacon_V1_Event]])
    /// Snapshots of some or all of the carried prefixes, with the revisions between them, up to
    /// the last snapshot's `revision`: applied in order to what the relay holds (nothing of it
    /// when `epoch` is new), they give the upstream's state at `revision` of everything carried,
    /// which replaces the relay's journal (history below `revision` is gone).
    case reset(epoch: UInt64, revision: UInt64, steps: [FollowerCore.Step])
    /// The upstream's answer to a forwarded request; `nil` when none came in time, or none came
    /// before the connection it was sent on ended (then nothing of it reaches the upstream later).
    case answered(token: UInt64, Beacon_V1_Reply?)
    /// The link came up or went stale, or the upstream's head moved.
    case status(UpstreamLink.Status)
}

/// A relay's connection to the daemon it mirrors: follows the prefixes it carries (or every key)
/// by the protocol's subscriber rules (one `FollowerCore` in ordered mode: whole revisions,
/// strictly in the upstream's order, across all of them) and forwards the writes of the relay's
/// clients.
///
/// Part of the loop's state: its sockets are polled by the loop with the daemon's own, and
/// ``service(into:)`` does what they and the clock call for without ever blocking, so that an
/// upstream revision goes from libzmq's I/O thread to the loop and out to the relay's
/// subscribers with no other thread between them.
final class UpstreamLink {
    /// Where the upstream is, how to reach it, and what of it to follow.
    struct Endpoint: Sendable, Equatable {
        var request: String
        var publish: String
        var curve: CurveCredentials?
        /// The keys followed: those under these prefixes, none under another (`[""]`: every key).
        var prefixes = [""]

        /// Whether every key is followed.
        var carriesEverything: Bool { prefixes == [""] }

        /// Whether `keyOrPrefix` lies under a followed prefix.
        func carries(_ keyOrPrefix: String) -> Bool {
            prefixes.contains { keyOrPrefix.isUnder($0) }
        }

        /// The followed prefixes as one number, kept in the journal with what was copied
        /// (``Journal/contentScope``): a relay started with other prefixes takes new snapshots.
        var scope: UInt64 {
            // FNV-1a, 64 bits, over the prefixes each followed by a 0 byte: stable across builds.
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            for prefix in prefixes {
                for byte in Array(prefix.utf8) + [0] { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
            }
            return hash
        }
    }

    /// The link as the relay reports it (`Ping`, heartbeats, `Stats`, systemd's status).
    struct Status: Sendable, Equatable {
        /// Whether the upstream was heard from lately: a stale relay refuses writes.
        var reachable = false
        /// The upstream's head as last heard.
        var headRevision: UInt64 = 0
        /// Unix ms of the last message from the upstream; 0: never.
        var lastHeardMilliseconds: UInt64 = 0
    }

    /// How long a forwarded request waits for the upstream's answer.
    static let forwardTimeoutMilliseconds: UInt64 = 5000
    /// How long a snapshot or delta waits before it is asked again.
    static let fetchTimeoutMilliseconds: UInt64 = 10_000

    let endpoint: Endpoint
    private let logger: Logger
    /// What was last passed on as ``Status``.
    private var reported = Status()
    /// Requests and their answers, one connection at a time.
    let requests: UpstreamRequests
    let subscriber: ZMQSocket
    private var core: FollowerCore
    private var nextID: UInt64 = 1
    /// The fetch sent and not yet answered, with its request id and deadline.
    private var fetch: (id: UInt64, fetch: FollowerCore.Fetch, deadline: UInt64)?
    /// Forwarded requests by request id: the loop's token and the deadline (all sent on the
    /// current connection: those of an ended one are answered as it ends).
    private var forwarded: [UInt64: (token: UInt64, deadline: UInt64)] = [:]
    private var forwardOrder: [(id: UInt64, deadline: UInt64)] = []
    private var lastHeard: UInt64 = 0
    private var lastHeardWall: UInt64 = 0
    private var upstreamHead: UInt64 = 0
    /// The upstream's epoch as last heard (0: not yet).
    private(set) var upstreamEpoch: UInt64 = 0
    private var upstreamInstance: UInt64 = 0
    /// Whether the prefixes are followed through their bundles (the upstream's heartbeat offers them).
    private var bundled = false
    private var heartbeatInterval: UInt64 = 1000
    private var lastRefusedRetry: UInt64 = 0

    /// Connects to the upstream (in `context`, the daemon's) and starts following: by a delta
    /// after `revision` if the relay holds the upstream's state through it in `epoch`, else
    /// (revision 0) by a snapshot.
    init(endpoint: Endpoint, context: ZMQContext, after revision: UInt64, epoch: UInt64, logger: Logger) throws(ZMQError) {
        self.endpoint = endpoint
        self.logger = logger
        requests = try UpstreamRequests(endpoint: endpoint, context: context, now: Self.now(), logger: logger)
        subscriber = try ZMQSocket(context, type: .sub, linger: 0)
        // No message is dropped on the relay's side while it keeps up; a burst past this is
        // repaired by a delta like any gap.
        try subscriber.setReceiveHighWaterMark(1_000_000)
        if let curve = endpoint.curve {
            try subscriber.enableCurveClient(serverKey: curve.serverKey, keys: curve.keys)
        }
        try subscriber.subscribe(Array(WireTopic.controlPrefix.utf8))
        for prefix in endpoint.prefixes { try subscriber.subscribe(Array(prefix.utf8)) }
        try subscriber.connect(endpoint.publish)
        core = FollowerCore(mode: .ordered, epoch: epoch)
        follow(after: revision, epoch: epoch)
        logger.info("following the upstream", metadata: [
            "upstream": "\(endpoint.request)", "prefixes": "\(endpoint.prefixes)", "resume.after": "\(revision)",
            "curve": "\(endpoint.curve != nil)"])
    }

    private func follow(after revision: UInt64, epoch: UInt64) {
        for prefix in endpoint.prefixes {
            if revision > 0 {
                core.follow(prefix, resumingAfter: revision, epoch: epoch)
            } else {
                core.follow(prefix)
            }
        }
    }

    func close() {
        requests.close()
        subscriber.close()
    }

    private static func now() -> UInt64 { MonotonicTime.now().milliseconds }

    /// How long the loop may wait before ``service(into:)`` has something to do by the clock.
    var timeoutMilliseconds: Int {
        let now = Self.now()
        var deadline = now + 250  // reachability is looked at this often at least
        if let fetch { deadline = min(deadline, fetch.deadline) }
        if let first = forwardOrder.first { deadline = min(deadline, first.deadline) }
        if let connecting = requests.nextDeadline { deadline = min(deadline, connecting) }
        return Int(deadline > now ? deadline - now : 0)
    }

    /// Reads what the upstream sent, gives up on what waited too long, sends the fetches the
    /// core needs, and appends what happened: released revisions and snapshots, answers, status.
    func service(into events: inout [UpstreamEvent]) {
        drainPublications()
        drainReplies(into: &events)
        expire(into: &events)
        if requests.service(now: Self.now()) { connectionLost(into: &events) }
        sendFetches()
        takeReleased(into: &events)
        let status = Status(reachable: lastHeard > 0 && Self.now() - lastHeard <= 3 * heartbeatInterval + 500,
                            headRevision: upstreamHead, lastHeardMilliseconds: lastHeardWall)
        // The time last heard is passed on a few times a second, not with every message.
        if status.reachable != reported.reachable || status.headRevision != reported.headRevision
            || status.lastHeardMilliseconds >= reported.lastHeardMilliseconds + 250 {
            if status.reachable != reported.reachable {
                logger.notice(status.reachable ? "the upstream is reachable" : "the upstream is not heard from: serving what the relay has, refusing writes",
                              metadata: ["upstream": "\(endpoint.request)", "upstream.head": "\(status.headRevision)"])
            }
            reported = status
            events.append(.status(status))
        }
    }

    /// The request connection ended: what was sent on it and not answered is lost, or was
    /// applied in the order sent; nothing of it reaches the upstream later.
    private func connectionLost(into events: inout [UpstreamEvent]) {
        var lost = 0
        for (id, _) in forwardOrder {
            guard let forward = forwarded.removeValue(forKey: id) else { continue }
            events.append(.answered(token: forward.token, nil))
            lost += 1
        }
        forwardOrder.removeAll()
        if let pending = fetch {
            core.complete(pending.fetch, with: nil)
            fetch = nil
        }
        logger.notice("the request connection to the upstream ended: requests it carried that were not answered are answered UPSTREAM_UNAVAILABLE",
                      metadata: ["upstream": "\(endpoint.request)", "unanswered": "\(lost)"])
    }

    private func heard() {
        lastHeard = Self.now()
        lastHeardWall = UInt64(Date().timeIntervalSince1970 * 1000)
    }

    /// Every upstream change this relay carries at or below this revision has been reported
    /// (``FollowerCore/completeThrough``).
    var completeThrough: UInt64 { core.completeThrough }

    /// Sends `op` to the upstream; its answer comes back from ``service(into:)`` as
    /// `.answered(token:_:)`. Returns false when it cannot even be queued.
    func forward(token: UInt64, _ op: Beacon_V1_Request.OneOf_Op) -> Bool {
        guard let id = send(op) else { return false }
        let deadline = Self.now() + Self.forwardTimeoutMilliseconds
        forwarded[id] = (token, deadline)
        forwardOrder.append((id, deadline))
        return true
    }

    /// Sends `op` to the upstream under the next request id; `nil` when it cannot be queued.
    private func send(_ op: Beacon_V1_Request.OneOf_Op) -> UInt64? {
        // Ids count up across the connection's generations: an answer is never taken for another's.
        let id = nextID
        nextID += 1
        return requests.send(id: id, op) ? id : nil
    }

    /// Follows again after `revision` of `epoch`: the relay could not journal what it was given.
    func resume(after revision: UInt64, epoch: UInt64) {
        core = FollowerCore(mode: .ordered, epoch: epoch)
        follow(after: revision, epoch: epoch)
        fetch = nil
    }

    private func drainPublications() {
        // Bounded, so that requests and the loop's other work interleave with a long burst.
        for _ in 0..<10_000 {
            guard let frames = try? subscriber.receiveMessage(flags: .dontWait) else { return }
            heard()
            guard let publications = try? WireClient.decodePublications(frames), !publications.isEmpty else {
                logger.warning("a publication from the upstream does not decode; it is repaired like a lost one")
                continue
            }
            for publication in publications { take(publication) }
        }
    }

    /// Notes what `publication` says of the upstream's head, epoch and instance, and hands it to the core.
    private func take(_ publication: WireClient.Publication) {
        switch publication {
        case .diff(let diff) where diff.epoch == upstreamEpoch:
            upstreamHead = max(upstreamHead, diff.event.revision)
        case .commit(let marker) where marker.epoch == upstreamEpoch && endpoint.carriesEverything:
            upstreamHead = max(upstreamHead, marker.revision)
        case .heartbeat(let heartbeat):
            // The last revision that concerns this relay: under its prefixes, when it has some.
            let head = endpoint.carriesEverything ? heartbeat.headRevision
                : heartbeat.prefixes.filter { endpoint.prefixes.contains($0.prefix) }.map(\.revision).max() ?? upstreamHead
            // A heartbeat queued before later diffs never moves the head back.
            upstreamHead = heartbeat.epoch == upstreamEpoch ? max(upstreamHead, head) : head
            upstreamEpoch = heartbeat.epoch
            heartbeatInterval = UInt64(max(heartbeat.intervalMs, 10))
            setBundled(heartbeat.bundles)
            if heartbeat.instance != upstreamInstance {
                // The upstream restarted: a fetch sent to the old one is not answered.
                if upstreamInstance != 0, let pending = fetch {
                    core.complete(pending.fetch, with: nil)
                    fetch = nil
                }
                upstreamInstance = heartbeat.instance
            }
        default:
            break
        }
        core.receive(publication)
    }

    /// Moves the prefixes' subscriptions to their bundles or back (PROTOCOL.md §5.4): each old
    /// one goes first; a group missed in between is repaired, one received twice applied once.
    private func setBundled(_ on: Bool) {
        guard on != bundled else { return }
        for prefix in endpoint.prefixes { try? subscriber.unsubscribe(WireTopic.subscription(to: prefix, bundled: bundled)) }
        bundled = on
        for prefix in endpoint.prefixes { try? subscriber.subscribe(WireTopic.subscription(to: prefix, bundled: bundled)) }
        logger.info("following the upstream's \(on ? "bundles" : "diffs, one message each")")
    }

    private func drainReplies(into events: inout [UpstreamEvent]) {
        while let reply = requests.receive() {
            heard()
            if let pending = fetch, pending.id == reply.id {
                fetch = nil
                switch reply.result {
                case .snapshot(let snapshot):
                    if snapshot.epoch != upstreamEpoch { (upstreamEpoch, upstreamHead) = (snapshot.epoch, 0) }
                    upstreamHead = max(upstreamHead, snapshot.revision)
                case .events(let page):
                    if page.epoch != upstreamEpoch { (upstreamEpoch, upstreamHead) = (page.epoch, 0) }
                    upstreamHead = max(upstreamHead, page.revision)
                case .error(let error) where error.code != .compacted && error.code != .futureRevision:
                    // Nothing is passed on while a prefix is refused; it is asked again every few seconds.
                    logger.error("the upstream refused to let this relay follow it: nothing more is mirrored until it does", metadata: [
                        "code": "\(error.code)", "message": "\(error.message)",
                        "needs": "read of \(endpoint.carriesEverything ? "every key" : endpoint.prefixes.joined(separator: ", ")) for this relay's key there"])
                default:
                    break
                }
                core.complete(pending.fetch, with: reply)
            } else if let forward = forwarded.removeValue(forKey: reply.id) {
                if case .write(let write) = reply.result { upstreamHead = max(upstreamHead, write.revision) }
                events.append(.answered(token: forward.token, reply))
            }
        }
    }

    /// Answers forwarded requests that waited too long, and gives up on a fetch that did.
    private func expire(into events: inout [UpstreamEvent]) {
        let now = Self.now()
        while let first = forwardOrder.first, first.deadline <= now {
            forwardOrder.removeFirst()
            if let forward = forwarded.removeValue(forKey: first.id) { events.append(.answered(token: forward.token, nil)) }
        }
        if let pending = fetch, pending.deadline <= now {
            logger.notice("the upstream did not answer a fetch in time; asking again", metadata: ["fetch": "\(pending.fetch.kind)"])
            core.complete(pending.fetch, with: nil)
            fetch = nil
        }
        if now - lastRefusedRetry >= 5000 {
            lastRefusedRetry = now
            core.retryRefused()  // the upstream's rules may have changed
        }
    }

    private func sendFetches() {
        guard fetch == nil, requests.isConnected, let next = core.nextFetch() else { return }
        guard let id = send(next.request) else {
            core.complete(next, with: nil)
            return
        }
        fetch = (id, next, Self.now() + Self.fetchTimeoutMilliseconds)
    }

    private func takeReleased(into events: inout [UpstreamEvent]) {
        while let release = core.takeRelease() {
            var rest = release.steps[...]
            // Everything up to the last snapshot becomes one state, journaled anew.
            if let last = rest.lastIndex(where: { if case .snapshot = $0 { true } else { false } }),
               case .snapshot(_, let epoch, let revision, _) = rest[last] {
                events.append(.reset(epoch: epoch, revision: revision, steps: Array(rest[...last])))
                rest = rest[(last + 1)...]
            }
            for case .revisions(let epoch, let stream) in rest {
                events.append(.revisions(epoch: epoch, PrefixSequencer.revisions(in: stream)))
            }
        }
    }
}
