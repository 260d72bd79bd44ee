import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import SwiftProtobuf

/// ZAP domains the daemon's endpoints authenticate under.
enum AccessDomain {
    static let local = "beacon-ipc"
    static let curve = "beacon-curve"
    static let insecure = "beacon-tcp"
}

/// Who sent the request being handled, and what they may do.
struct RequestContext {
    /// The ZAP user id (`Peer.description`); empty when unknown.
    var peer: String
    var rights: AccessRights
    /// A consistent read's read index, once its write authority learned it and this daemon's
    /// copy holds it (``ConsistentReads``); nil for every other request.
    var readIndex: UInt64?

    static let unrestricted = RequestContext(peer: "", rights: .everything)

    /// A write id or session as the daemon keeps it: in the namespace of the peer that sent it
    /// (its ZAP user id), so that no peer can replay, pre-claim, renew or end another's. Never sent
    /// back to clients; journaled like this so that the namespaces survive a restart.
    func owned(_ id: [UInt8]) -> [UInt8] {
        Array(peer.utf8) + [0] + id
    }
}

extension ServerLoop {
    // MARK: Authentication (ZAP, RFC 27)

    /// Answers every waiting ZAP request: which peers may connect, and under which user id.
    func drainAuthentication() {
        let zap = network.zap
        while let frames = try? zap.receiveMessage(flags: .dontWait) {
            // version, request id, domain, address, routing id, mechanism, credentials...
            let requestID = frames.count > 1 ? frames[1].bytes : []
            guard frames.count >= 6 else {
                // A REP socket must answer before it can read again; libzmq never sends this.
                _ = try? zap.send(frames: ["1.0"].map { ZMQMessage(string: $0) } + [ZMQMessage(bytes: requestID)]
                    + ["500", "malformed ZAP request", "", ""].map { ZMQMessage(string: $0) })
                continue
            }
            let peer = Self.peer(domain: frames[2].string, address: frames[3].string, mechanism: frames[5].string,
                                 credentials: frames.dropFirst(6).map(\.bytes))
            var reply: [String] = ["400", "no access rule admits this peer", ""]
            if let peer, access.admit(peer) != nil {
                reply = ["200", "OK", peer.description]
                logger.debug("peer admitted", metadata: ["peer": "\(peer)"])
            } else {
                stats.connectionsRefused += 1
                if let held = stats.logThrottle.admit("connection.refused", now: clock.now()) {
                    logger.notice("connection refused", metadata: [
                        "peer": "\(peer?.description ?? "unidentified")", "domain": "\(frames[2].string)",
                        "mechanism": "\(frames[5].string)", "held.back": "\(held)"])
                }
            }
            let out = [ZMQMessage(string: "1.0"), ZMQMessage(bytes: requestID)]
                + reply.map { ZMQMessage(string: $0) } + [ZMQMessage()]  // no metadata
            do {
                try zap.send(frames: out)
            } catch {
                logger.warning("ZAP reply not sent", metadata: ["error": "\(error)"])
            }
        }
    }

    /// The peer a ZAP request describes. For ipc, libzmq puts the kernel's credentials of the
    /// peer in the address as `:uid:gid:pid`.
    static func peer(domain: String, address: String, mechanism: String, credentials: [[UInt8]]) -> Peer? {
        switch (domain, mechanism) {
        case (AccessDomain.local, "NULL"):
            let fields = address.split(separator: ":", omittingEmptySubsequences: false).suffix(3)
            guard fields.count == 3, let uid = UInt32(fields[fields.startIndex]),
                  let gid = UInt32(fields[fields.startIndex + 1]) else { return nil }
            return .local(uid: uid, gid: gid)
        case (AccessDomain.curve, "CURVE"):
            guard let key = credentials.first.flatMap(ZMQCurveKeyPair.z85) else { return nil }
            return .curve(publicKey: key)
        case (AccessDomain.insecure, "NULL"):
            return .insecure(address: address)
        default:
            return nil
        }
    }

    // MARK: Requests

    /// Who sent a request body, from the user id its connection was admitted with.
    func requestContext(of body: ZMQMessage) -> RequestContext {
        guard access.needsPeerIdentity else { return .unrestricted }
        let userID = body.metadata("User-Id")
        return RequestContext(peer: userID ?? "", rights: access.rights(userID: userID))
    }

    /// A PERMISSION_DENIED refusal, counted.
    func denied(_ what: String, key: String, context: RequestContext) -> Refusal {
        stats.accessDenied += 1
        logger.debug("request denied", metadata: ["peer": "\(context.peer)", "what": "\(what)", "key": "\(key)"])
        return Refusal(.permissionDenied, "\(context.peer.isEmpty ? "this peer" : context.peer) may not \(what)", key: key)
    }

    /// Refuses a read of `key` the current peer may not read.
    func checkRead(key: String, context: RequestContext) throws(Refusal) {
        if !context.rights.read.contains(key: key) { throw denied("read '\(key)'", key: key, context: context) }
        if let refusal = authority.refusesRead(of: key, host: self) { throw refusal }
    }

    /// Refuses a read under `prefix` unless the current peer may read every key under it.
    func checkRead(prefix: String, context: RequestContext) throws(Refusal) {
        if !context.rights.read.covers(prefix: prefix) {
            throw denied("read under '\(prefix)' (readable: \(context.rights.read))", key: prefix, context: context)
        }
        if let refusal = authority.refusesRead(of: prefix, host: self) { throw refusal }
    }

    // MARK: Publish socket

    /// Counts a subscription (or cancellation) against what libzmq holds for its connection
    /// (``SubscriptionLedger``), and shuts the connection down when it holds too much.
    private func recordSubscription(_ topic: [UInt8], subscribe: Bool, frame: ZMQMessage) -> SubscriptionLedger.Verdict {
        guard let (fd, peer) = subscriberConnection(of: frame) else { return .keep }
        publisher.subscriptionLedger.perPeer = Int(access.limits.subscriptionsPerPeer)
        let verdict = publisher.subscriptionLedger.received(topic, subscribe: subscribe, fd: fd, peer: peer)
        if case .close = verdict { closeSubscriber(fd: fd, peer: peer) }
        return verdict
    }

    /// The subscriber connection a message read from the publish socket came from: its
    /// descriptor and peer, if libzmq says which and the connection is still known.
    private func subscriberConnection(of frame: ZMQMessage) -> (fd: Int32, peer: ConnectionPeer)? {
        guard let text = frame.metadata("__fd"), let fd = Int32(text) else { return nil }
        if connections.ledger.peer(of: fd, on: .subscribers) == nil { drainConnections(.subscribers) }
        guard let peer = connections.ledger.peer(of: fd, on: .subscribers) else { return nil }
        return (fd, peer)
    }

    /// Shuts down one subscriber connection: it reconnects and subscribes anew, the others go on.
    private func closeSubscriber(fd: Int32, peer: ConnectionPeer) {
        _ = connections.shutDown(fd: fd, on: .subscribers, from: peer,
                                 closed: { publisher.subscriptionLedger.closed(fd: $0) }, shed: { logShed($0) })
        publisher.subscriptionLedger.closed(fd: fd)
    }

    /// Applies every waiting subscription and unsubscription: checks it against the peer's read
    /// rights and limit, subscribes the peer (the XPUB is in manual mode), and sequences key
    /// prefixes while someone follows them. Who asked is read from each message's own metadata;
    /// a grant goes to the connection libzmq pairs with it, so none is made while that pairing
    /// is out of step (``SubscriptionPairing``): the subscription is refused, and its connection
    /// (each message names it) closed so that it subscribes again, in step; the connection that
    /// sent the frame that put the pairing out of step is closed too.
    func drainSubscriptions() {
        let now = clock.now()
        var refusedOutOfStep = 0
        /// Connections whose subscriptions were refused out of step: closed once the drain ends, so
        /// that they subscribe again (nil: one libzmq did not name, and only a reopening reaches it).
        var outOfStep: [(fd: Int32, peer: ConnectionPeer)?] = []
        while true {
            let received: (frames: [ZMQMessage], inStep: Bool)?
            do {
                received = try publisher.receive()
            } catch {
                logger.warning("reading subscriptions failed", metadata: ["error": "\(error)"])
                break
            }
            guard let (frames, inStep) = received else { break }
            let frame = frames[0]
            let bytes = frame.bytes
            let userID = frame.metadata("User-Id")
            guard let kind = bytes.first, kind <= 1 else {
                if let held = stats.logThrottle.admit("upstream", now: now) {
                    logger.notice("a subscriber sent a message that is not a subscription; its connection is closed, and subscriptions queued behind it are refused",
                                  metadata: ["peer": "\(userID ?? "")", "bytes": "\(bytes.count)", "held.back": "\(held)"])
                }
                // No subscriber sends anything else: that connection goes.
                if let (fd, peer) = subscriberConnection(of: frame) { closeSubscriber(fd: fd, peer: peer) }
                continue
            }
            let topic = Array(bytes.dropFirst())
            if case .close(let reason) = recordSubscription(topic, subscribe: kind == 1, frame: frame) {
                stats.subscriptionsRefused += kind == 1 ? 1 : 0
                if let held = stats.logThrottle.admit("subscription.connection", now: now) {
                    logger.notice("subscriber connection closed: \(reason)", metadata: ["peer": "\(userID ?? "")", "held.back": "\(held)"])
                }
                // Reading on would let libzmq take in more of what that connection sent before
                // its I/O thread sees it closed: the rest waits for the next pass.
                break
            }
            // A bundle subscription sequences its prefix as a subscription to the prefix does.
            let bundled = WireTopic.bundledPrefix(topic)
            let prefix = bundled ?? String(validating: topic, as: UTF8.self).flatMap { text in
                !text.hasPrefix(WireTopic.controlPrefix) && KeyPath.problem(prefix: text) == nil ? text : nil
            }
            if kind == 1 {
                guard inStep else {
                    stats.subscriptionsRefused += 1
                    refusedOutOfStep += 1
                    outOfStep.append(subscriberConnection(of: frame))
                    continue
                }
                if !grantSubscription(topic, prefix: prefix, bundled: bundled, userID: userID, now: now) { stats.subscriptionsRefused += 1 }
            } else {
                cancelSubscription(topic, prefix: prefix, bundled: bundled, userID: userID, inStep: inStep, now: now)
            }
        }
        if refusedOutOfStep > 0 {
            if let held = stats.logThrottle.admit("subscription.out-of-step", now: now) {
                logger.notice("subscriptions refused behind a message that is not one; their connections are closed to subscribe again",
                              metadata: ["subscriptions": "\(refusedOutOfStep)", "held.back": "\(held)"])
            }
            // Only those connections: every other subscriber, whose subscriptions were granted
            // in step, goes on receiving.
            for connection in outOfStep {
                if let connection { closeSubscriber(fd: connection.fd, peer: connection.peer) } else { resetPublisherSoon(now: now) }
            }
        }
    }

    /// Grants a subscription to `topic` if the peer may read it and holds fewer than its limit:
    /// its prefix (or bundle) is sequenced from then on.
    /// - Returns: whether it was granted.
    private func grantSubscription(_ topic: [UInt8], prefix: String?, bundled: String?, userID: String?, now: MonotonicTime) -> Bool {
        let rights = access.rights(userID: userID)
        // Checked before anything is counted or followed: a refused prefix is not sequenced.
        guard let granted = access.topics(forSubscription: topic, rights: rights) else {
            if let held = stats.logThrottle.admit("subscription.denied", now: now) {
                logger.notice("subscription refused: not readable", metadata: [
                    "peer": "\(userID ?? "")", "topic": "\(String(decoding: topic, as: UTF8.self))", "held.back": "\(held)"])
            }
            return false
        }
        guard access.countSubscription(topic, peer: userID ?? "") else {
            if let held = stats.logThrottle.admit("subscription.limit", now: now) {
                logger.notice("subscription refused: limit reached", metadata: [
                    "peer": "\(userID ?? "")", "limit": "\(access.limits.subscriptionsPerPeer)", "held.back": "\(held)"])
            }
            return false
        }
        if let prefix {
            // A prefix's last revision must count only published writes: commit and publish
            // what is pending before computing it.
            if !publisher.tracker.isTracked(prefix) { writes.flush() }
            publisher.tracker.subscribe(prefix) { initialRevision(prefix: prefix) }
        }
        if let bundled { publisher.subscribeBundles(of: bundled) }
        publisher.grant(granted)
        return true
    }

    /// Cancels a subscription to `topic` the peer held.
    private func cancelSubscription(_ topic: [UInt8], prefix: String?, bundled: String?, userID: String?, inStep: Bool,
                                    now: MonotonicTime) {
        guard access.releaseSubscription(topic, peer: userID) else { return }
        if let prefix { publisher.tracker.unsubscribe(prefix, nowMilliseconds: now.milliseconds) }
        if let bundled { publisher.unsubscribeBundles(of: bundled) }
        // A closed connection's subscriptions are gone already; a live peer's are removed,
        // from its own connection only while the pairing is in step.
        if inStep, let userID, let granted = access.topics(forSubscription: topic, rights: access.rights(userID: userID)) {
            publisher.revoke(granted)
        }
    }

    /// Opens the publish socket anew so that subscribers refused while the pairing was out of
    /// step subscribe again; at most once a second (a hostile peer can ask for it at will).
    func resetPublisherSoon(now: MonotonicTime) {
        guard !publisher.reopenPending else { return }
        let earliest = publisher.lastReopened.adding(milliseconds: 1000)
        if earliest <= now {
            reopenPublisher(reason: "subscriptions were refused while libzmq's pairing was out of step")
        } else {
            publisher.reopenPending = true
            timers.schedule(.publisherReset, at: earliest)
        }
    }

    /// Publishes a heartbeat to each read scope, listing the sequenced prefixes it may read.
    func publishHeartbeats(_ heartbeat: Beacon_V1_Heartbeat) {
        publishPerScope(heartbeat, topic: access.heartbeatTopic) { scoped, readable in
            scoped.prefixes = scoped.prefixes.filter { readable.covers(prefix: $0.prefix) }
            return true
        }
    }

    /// Publishes a commit marker to each read scope that may read a prefix it marks.
    func publishCommitMarkers(_ marker: Beacon_V1_CommitMarker) {
        publishPerScope(marker, topic: access.commitTopic) { scoped, readable in
            scoped.marks = scoped.marks.filter { readable.covers(prefix: $0.prefix) }
            return !scoped.marks.isEmpty
        }
    }

    /// Publishes `message` once, or with a policy once per read scope, narrowed by `narrow`
    /// (which says whether anything is left to send to that scope).
    private func publishPerScope<Message: SwiftProtobuf.Message>(
        _ message: Message, topic: (Int) -> String,
        narrow: (inout Message, PrefixSet) -> Bool
    ) {
        guard access.policy.isEnabled else { return publish(topic: topic(0), message) }
        for (scope, readable) in access.scopes.enumerated() {
            var scoped = message
            if narrow(&scoped, readable) { publish(topic: topic(scope), scoped) }
        }
    }
}
