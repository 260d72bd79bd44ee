import BeaconZMQ

extension ServerLoop {
    /// Replies queued in libzmq per request connection, at most. Small ones are not counted in
    /// bytes while libzmq holds them, so this bounds them: 16,384 of under 256 bytes, under
    /// 4 MiB (larger ones are counted by ``ReplyFlows``). A reply refused at this mark waits in
    /// ``ReplyFlows``, counted in the connection's, its peer's and everyone's bounds. (At 4,096,
    /// a client pipelining 20,000 writes lost a third of its rate to replies waiting there.)
    static let replyHighWaterMark: Int32 = 16_384

    /// The bounds of ``ReplyFlows`` from the configured limits.
    static func replyLimits(_ limits: DaemonLimits) -> ReplyFlows.Limits {
        ReplyFlows.Limits(perConnection: limits.replyBufferBytes, perPeer: limits.replyBufferPeerBytes,
                          total: limits.replyBufferTotalBytes)
    }

    /// Notes which connection a request message came from, the first time it sends one: the
    /// descriptor libzmq read it from and that descriptor's peer, so that its replies can be
    /// bounded (``ReplyFlows``).
    func noteConnection(of body: ZMQMessage, id: RoutingID) {
        if network.replyFlows.knowsDescriptor(of: id) { return }
        guard let text = body.metadata("__fd"), let fd = Int32(text) else { return }
        // The connection's accept may still wait in the monitor: requests and monitor events are
        // read in turn, and a pass can read many requests.
        if connections.ledger.peer(of: fd, on: .requests) == nil { drainConnections(.requests) }
        guard let peer = connections.ledger.peer(of: fd, on: .requests) else { return }
        network.replyFlows.connected(id, fd: fd, peer: peer)
    }

    /// Sends a reply (`envelope`, then `body`) now, or keeps it until libzmq has written what it
    /// holds for the connection (``ReplyFlows``).
    func send(body: [UInt8], to envelope: ReplyEnvelope) {
        // Most replies are small, with nothing waiting anywhere: they need no connection looked up.
        let offer = network.replyFlows.goesAtOnce(size: body.count) ? .send(nil)
            : network.replyFlows.offer(ReplyFlows.Reply(envelope: envelope, body: body), size: body.count, to: envelope.connection)
        switch offer {
        case .send(let tracking):
            if !hand(body: body, to: envelope, tracking: tracking) {
                network.replyFlows.putBack(ReplyFlows.Reply(envelope: envelope, body: body), to: envelope.connection)
            }
        case .kept:
            break
        case .keptClosing(let victim):
            closeConnection(victim, because: "it does not read its replies")
        }
    }

    /// Hands the replies kept for connections that libzmq has caught up with.
    func flushKeptReplies() {
        network.replyFlows.flush { reply, tracking in hand(body: reply.body, to: reply.envelope, tracking: tracking) }
    }

    /// Applies the waiting connection events of the socket of `role`: logs what was shed, and
    /// forgets the replies kept for request connections that are gone.
    func drainConnections(_ role: ConnectionLedger.Socket) {
        logShed(connections.drain(role) { fd in
            switch role {
            case .requests:
                if let id = network.replyFlows.connection(withDescriptor: fd) {
                    // Gone: nothing more is done for it.
                    turns.drop(id)
                    releaseBackups(of: id)
                }
                network.replyFlows.disconnected(fd: fd)
            case .subscribers: publisher.subscriptionLedger.closed(fd: fd)
            }
        })
    }

    /// Closes a request connection that holds too much in the daemon: one that does not read its
    /// replies (or holds the most when its peer's or everyone's unread replies pass their bound),
    /// or a relay's client piling requests up behind its forwarded writes. What is kept for it
    /// is dropped.
    func closeConnection(_ victim: ReplyFlows.Victim, because what: String) {
        let closed = victim.fd >= 0 && connections.shutDown(fd: victim.fd, on: .requests, from: victim.peer,
                                                            closed: { network.replyFlows.disconnected(fd: $0) }, shed: { logShed($0) })
        network.replyFlows.close(victim.id, now: clock.now())
        turns.drop(victim.id)
        guard closed, let held = stats.logThrottle.admit("connection.slow", now: clock.now()) else { return }
        logger.notice("connection closed: \(what)", metadata: [
            "peer": "\(victim.peer)", "unread.bytes": "\(victim.heldBytes)", "reason": "\(victim.reason)",
            "held.back": "\(held)"])
    }

    /// Hands one reply to libzmq; counted in `tracking` until libzmq lets go of it.
    /// - Returns: `false` when libzmq refused it because the connection's queue is full (it is
    ///   to wait and be offered again); a reply to a connection that is gone is dropped.
    private func hand(body: [UInt8], to envelope: ReplyEnvelope, tracking: BytesInFlight?) -> Bool {
        let router = self.router
        do {
            // The first frame picks the connection; a full queue refuses it, and nothing is sent.
            // libzmq also says "unreachable" for a connection whose queue was full until it takes
            // in that the queue has room again: so only a connection known to be open waits.
            do {
                let handed = try envelope.connection.withBytes { id in
                    Result { () throws(ZMQError) in try router.send(copying: id, flags: [.sendMore, .dontWait]) }
                }.get()
                guard handed else { return false }
            } catch where error.hostUnreachable && network.replyFlows.knowsDescriptor(of: envelope.connection) {
                return false
            }
            for frame in envelope.inner {
                try router.send(frame, flags: [.sendMore, .dontWait])
            }
            if let tracking {
                try router.send(ZMQMessage(bytes: body, released: tracking.hand(body.count)), flags: .dontWait)
            } else {
                try router.send(body, flags: .dontWait)
            }
        } catch {
            // A peer that went away (the socket is mandatory about routing); the reply is lost,
            // nothing else is.
            logger.debug("reply not sent", metadata: ["error": "\(error)"])
        }
        return true
    }
}
