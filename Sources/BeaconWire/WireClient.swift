import BeaconProtocol
import BeaconZMQ
import Foundation

/// What a client needs to reach a daemon's CURVE (tcp) endpoints.
public struct CurveCredentials: Sendable, Equatable {
    /// The daemon's public key (Z85).
    public var serverKey: String
    /// This client's key pair; its public key must be in the daemon's `allow = key:` rules.
    public var keys: ZMQCurveKeyPair

    public init(serverKey: String, keys: ZMQCurveKeyPair) {
        self.serverKey = serverKey
        self.keys = keys
    }

    /// A reason, naming the setting, why credentials could not be read.
    public struct LoadError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Reads credentials as an operator gives them: the daemon's public key, or a file holding
    /// it (`beacon keygen`'s `.pub` or `.key`), and this side's key file.
    /// - Parameters:
    ///   - serverKeySetting, keyFileSetting: the names the operator knows the two by, for errors.
    public static func load(serverKey: String, keyFile: String, serverKeySetting: String,
                            keyFileSetting: String) throws(LoadError) -> CurveCredentials {
        var serverPublic = serverKey
        if !ZMQCurveKeyPair.isValidKey(serverKey) {
            guard let parsed = try? CurveKeyFile(path: serverKey), let key = parsed.publicKey else {
                throw LoadError(description: "\(serverKeySetting): '\(serverKey)' is neither a CURVE public key nor a key file holding one")
            }
            serverPublic = key
        }
        let own: CurveKeyFile
        do {
            own = try CurveKeyFile(path: keyFile)
        } catch {
            throw LoadError(description: "\(keyFileSetting) \(keyFile): \(error)")
        }
        guard let secret = own.secretKey, let keys = try? ZMQCurveKeyPair(secretKey: secret) else {
            throw LoadError(description: "\(keyFileSetting) \(keyFile) holds no valid secret key (make one with `beacon keygen`)")
        }
        return CurveCredentials(serverKey: serverPublic, keys: keys)
    }
}

/// A blocking client of the wire protocol: one DEALER for requests (pipelining allowed), one SUB
/// for publications. Like its sockets, it belongs to one thread.
///
/// This is the protocol's plumbing for tools, tests and benchmarks; applications use the
/// reactive `Beacon` client library built on the same protocol.
public final class WireClient {
    /// Something the publish socket delivered.
    public enum Publication {
        case diff(Beacon_V1_Diff)
        case commit(Beacon_V1_CommitMarker)
        case heartbeat(Beacon_V1_Heartbeat)
    }

    /// The daemon's request endpoint.
    public let requestEndpoint: String
    /// The daemon's publish endpoint; empty when unknown (subscribing then fails, saying so).
    public let publishEndpoint: String
    /// How long a request waits for its reply when the call names no timeout.
    public let requestTimeoutMilliseconds: Int
    /// How long a snapshot, delta or history page waits when the call names no timeout: the
    /// request timeout, and at least 30 s (a large page takes the daemon longer to build).
    public var readTimeoutMilliseconds: Int { max(requestTimeoutMilliseconds, 30_000) }

    private let context: ZMQContext
    /// The request side: the DEALER, request ids, refusals and the connection's end.
    private let requests: RequestChannel
    private var subscriber: ZMQSocket?
    private let subscriberPoller = ZMQPoller()
    /// Publications of a message received but not yet returned (a bundle's diffs), in order.
    private var pending: [Publication] = []
    private var pendingNext = 0
    private let requestPoller = ZMQPoller()
    private let curve: CurveCredentials?

    /// Connects to explicit endpoints.
    /// - Parameters:
    ///   - curve: keys for a daemon's CURVE (tcp) endpoints; `nil` for ipc.
    ///   - replyQueueLimit: replies libzmq takes in ahead of ``receiveReply(timeoutMilliseconds:)``,
    ///     at most (its receive high-water mark); past it, they wait at the daemon.
    ///   - requestTimeoutMilliseconds: how long a call that names no timeout waits for its reply.
    ///   - reconnects: whether libzmq connects again by itself when the connection ends, and
    ///     sends what was queued meanwhile to whichever daemon answers then. With `false`, the
    ///     end of the connection is an error (``WireError/Kind/connectionLost``), nothing sent
    ///     afterwards goes anywhere, and the caller decides what to send again on a new client
    ///     (``ResumableWriter``).
    /// - Throws: ``WireError`` when the sockets cannot be created.
    public init(requestEndpoint: String, publishEndpoint: String, context: ZMQContext? = nil,
                curve: CurveCredentials? = nil, replyQueueLimit: Int32 = 100_000,
                requestTimeoutMilliseconds: Int = 5000, reconnects: Bool = true) throws(WireError) {
        self.requestEndpoint = requestEndpoint
        self.publishEndpoint = publishEndpoint
        self.requestTimeoutMilliseconds = requestTimeoutMilliseconds
        self.curve = curve
        do {
            if let context { self.context = context } else { self.context = try ZMQContext() }
            // A refused connection leaves no peer to queue for: a send then fails instead of waiting
            // forever (without reconnecting, within the request timeout: no connection may come).
            requests = try RequestChannel(endpoint: requestEndpoint, context: self.context, curve: curve, reconnects: reconnects,
                                          receiveHighWaterMark: replyQueueLimit,
                                          sendTimeoutMilliseconds: Int32(reconnects ? 10_000 : min(max(requestTimeoutMilliseconds, 1), 10_000)),
                                          name: "beacon-wire")
        } catch {
            throw WireError(error)
        }
        for socket in requests.pollable { requestPoller.add(socket) }
    }

    /// Connects to the daemon whose sockets are in `runtimeDirectory`.
    public convenience init(runtimeDirectory: String, requestTimeoutMilliseconds: Int = 5000) throws(WireError) {
        try self.init(requestEndpoint: WireEndpoint.request(inRuntimeDirectory: runtimeDirectory),
                      publishEndpoint: WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory),
                      requestTimeoutMilliseconds: requestTimeoutMilliseconds)
    }

    // MARK: Requests

    /// Sends a request without waiting; returns its id for ``receiveReply(timeoutMilliseconds:)``.
    @discardableResult
    public func send(_ op: Beacon_V1_Request.OneOf_Op) throws(WireError) -> UInt64 {
        try requests.send(op)
    }

    /// Sends raw bytes as a request body (for testing how the daemon treats bad input).
    public func send(rawBody: [UInt8]) throws(WireError) {
        try requests.send(rawBody: rawBody)
    }

    /// Waits up to `timeoutMilliseconds` for the next reply (-1: forever).
    /// - Returns: `nil` on timeout.
    /// - Throws: the daemon's refusal of this peer, or the end of a connection that does not reconnect.
    public func receiveReply(timeoutMilliseconds: Int) throws(WireError) -> Beacon_V1_Reply? {
        if let reply = requests.receiveReply() { return reply }
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(timeoutMilliseconds, 0)) * 1_000_000
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            let remaining = timeoutMilliseconds < 0 ? -1 : Int(deadline > now ? (deadline - now + 999_999) / 1_000_000 : 0)
            let ready: Int
            do {
                ready = try requestPoller.poll(timeoutMilliseconds: remaining)
            } catch {
                throw WireError(error)
            }
            if let reply = requests.receiveReply() { return reply }
            requests.readEvents()
            if let refusal = requests.refusal { throw refusal }
            if let lost = requests.lost { throw lost }
            // Woken by a connection event that is no error (a handshake, a reconnection): wait on.
            if ready == 0 || remaining == 0 { return nil }
        }
    }

    /// Decodes a reply's body: a `Delta` or `History` page read in place (``FastReply``), any
    /// other reply by SwiftProtobuf; `nil` when it does not decode.
    public static func decodeReply(body: ZMQMessage) -> Beacon_V1_Reply? {
        RequestChannel.decodeReply(body: body)
    }

    /// Sends a request and waits for its reply (replies to earlier ids are skipped).
    /// - Throws: ``WireError``: `.timeout`, `.transport`, or `.rejected` with the daemon's error.
    public func call(_ op: Beacon_V1_Request.OneOf_Op, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_Reply {
        try awaitReply(to: try send(op), timeoutMilliseconds: timeoutMilliseconds)
    }

    /// Waits for the reply to request `id`, sent already with ``send(_:)`` (replies to earlier
    /// ids are skipped): several requests can be in flight, and their answers awaited in order.
    /// - Throws: ``WireError``: `.timeout`, `.transport`, or `.rejected` with the daemon's error.
    public func awaitReply(to id: UInt64, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_Reply {
        let timeoutMilliseconds = timeoutMilliseconds ?? requestTimeoutMilliseconds
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(max(timeoutMilliseconds, 0)) * 1_000_000
        while true {
            let now = DispatchTime.now().uptimeNanoseconds
            let remaining = timeoutMilliseconds < 0 ? -1 : Int(deadline > now ? (deadline - now) / 1_000_000 : 0)
            guard let reply = try receiveReply(timeoutMilliseconds: remaining) else {
                let hint = requestEndpoint.hasPrefix("tcp://")
                    ? "is beacond running, and for a CURVE endpoint are the server key and key file right?" : "is beacond running?"
                throw WireError(kind: .timeout, message: "no reply from the daemon at \(requestEndpoint) within \(timeoutMilliseconds) ms (\(hint))")
            }
            if reply.id != id && reply.id != 0 { continue }
            if case .error(let error) = reply.result {
                throw WireError(kind: .rejected, message: error.message, reply: error)
            }
            return reply
        }
    }

    // MARK: Typed calls

    /// Writes `value` to `key`; returns the committed revision and versions.
    public func put(_ key: String, _ value: Beacon_V1_Value, ifVersion: UInt64? = nil, createOnly: Bool = false,
                    ttlMilliseconds: UInt64 = 0, writeID: [UInt8] = [], session: [UInt8] = [],
                    timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_WriteReply {
        var put = Beacon_V1_Put()
        put.session = Data(session)
        put.key = key
        put.value = value
        if let ifVersion { put.ifVersion = ifVersion }
        put.createOnly = createOnly
        put.ttlMs = ttlMilliseconds
        put.writeID = Data(writeID)
        return try expectWrite(call(.put(put), timeoutMilliseconds: timeoutMilliseconds))
    }

    /// Deletes `key`; returns the committed revision.
    public func delete(_ key: String, ifVersion: UInt64? = nil, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_WriteReply {
        var delete = Beacon_V1_Delete()
        delete.key = key
        if let ifVersion { delete.ifVersion = ifVersion }
        return try expectWrite(call(.delete(delete), timeoutMilliseconds: timeoutMilliseconds))
    }

    /// Commits `ops` as one revision.
    public func transaction(_ ops: [Beacon_V1_TxnOp], writeID: [UInt8] = [], timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_WriteReply {
        var txn = Beacon_V1_Txn()
        txn.ops = ops
        txn.writeID = Data(writeID)
        return try expectWrite(call(.txn(txn), timeoutMilliseconds: timeoutMilliseconds))
    }

    /// Sends `ops` as one `Batch` request: each is handled as if sent on its own, in order.
    /// - Returns: each operation's reply, in order; a refused one is an `error` reply.
    /// - Throws: ``WireError`` when the batch as a whole is refused (empty, too long) or times out.
    public func batch(_ ops: [Beacon_V1_Request.OneOf_Op], timeoutMilliseconds: Int? = nil) throws(WireError) -> [Beacon_V1_Reply] {
        var batch = Beacon_V1_Batch()
        batch.requests = ops.map { op in
            let id = requests.takeRequestID()
            return .with { $0.id = id; $0.op = op }
        }
        let reply = try call(.batch(batch), timeoutMilliseconds: timeoutMilliseconds)
        guard case .batch(let replies) = reply.result else { throw unexpected(reply) }
        return replies.replies
    }

    /// The current state of `key`.
    /// - Parameter consistent: see every write acknowledged anywhere before the request (at any
    ///   etcd front too), not only this daemon's (PROTOCOL.md §4.8).
    public func get(_ key: String, consistent: Bool = false, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_KeyValue {
        let reply = try call(.get(.with { $0.key = key; $0.consistent = consistent }), timeoutMilliseconds: timeoutMilliseconds)
        guard case .get(let get) = reply.result else { throw unexpected(reply) }
        return get.kv
    }

    /// Every live key under `prefix` at the head revision, with the sequencing bookmark.
    public func snapshot(prefix: String, revision: UInt64 = 0, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_SnapshotReply {
        let reply = try call(.snapshot(.with { $0.prefix = prefix; $0.revision = revision }), timeoutMilliseconds: timeoutMilliseconds ?? readTimeoutMilliseconds)
        guard case .snapshot(let snapshot) = reply.result else { throw unexpected(reply) }
        return snapshot
    }

    /// Changes under `prefix` after `revision`, one page.
    public func delta(prefix: String, since revision: UInt64, limit: UInt32 = 0, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_EventsReply {
        let reply = try call(.delta(.with { $0.prefix = prefix; $0.sinceRevision = revision; $0.limit = limit }), timeoutMilliseconds: timeoutMilliseconds ?? readTimeoutMilliseconds)
        guard case .events(let events) = reply.result else { throw unexpected(reply) }
        return events
    }

    /// History of a key (`exact`) or prefix between two revisions, one page.
    public func history(_ prefix: String, exact: Bool = false, from: UInt64 = 0, to: UInt64 = 0, limit: UInt32 = 0,
                        timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_EventsReply {
        let reply = try call(.history(.with {
            $0.prefix = prefix; $0.exact = exact; $0.fromRevision = from; $0.toRevision = to; $0.limit = limit
        }), timeoutMilliseconds: timeoutMilliseconds ?? readTimeoutMilliseconds)
        guard case .events(let events) = reply.result else { throw unexpected(reply) }
        return events
    }

    /// Every retained change of a key (`exact`) or prefix, oldest first, a page at a time.
    public func wholeHistory(_ prefix: String, exact: Bool = false) throws(WireError) -> [Beacon_V1_Event] {
        var events: [Beacon_V1_Event] = []
        var from: UInt64 = 0
        while true {
            let page = try history(prefix, exact: exact, from: from)
            events += page.events
            guard page.more else { return events }
            from = page.revision + 1
        }
    }

    /// The daemon's identity and head.
    public func ping(timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_PingReply {
        let reply = try call(.ping(.init()), timeoutMilliseconds: timeoutMilliseconds)
        guard case .ping(let ping) = reply.result else { throw unexpected(reply) }
        return ping
    }

    /// Keeps `session` alive for `ttlMilliseconds` more (0 ends it now, deleting its keys).
    public func keepAlive(session: [UInt8], ttlMilliseconds: UInt32, timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_KeepAliveReply {
        let reply = try call(.keepAlive(.with { $0.session = Data(session); $0.ttlMs = ttlMilliseconds }), timeoutMilliseconds: timeoutMilliseconds)
        guard case .keepAlive(let keepAlive) = reply.result else { throw unexpected(reply) }
        return keepAlive
    }

    /// The daemon's counters.
    public func stats(timeoutMilliseconds: Int? = nil) throws(WireError) -> Beacon_V1_StatsReply {
        let reply = try call(.stats(.init()), timeoutMilliseconds: timeoutMilliseconds)
        guard case .stats(let stats) = reply.result else { throw unexpected(reply) }
        return stats
    }

    private func expectWrite(_ reply: Beacon_V1_Reply) throws(WireError) -> Beacon_V1_WriteReply {
        guard case .write(let write) = reply.result else { throw unexpected(reply) }
        return write
    }

    private func unexpected(_ reply: Beacon_V1_Reply) -> WireError {
        WireError(kind: .malformedReply, message: "unexpected reply \(String(describing: reply.result))")
    }

    // MARK: Subscriptions

    /// Subscribes to diffs of keys under `prefix` (and to heartbeats and commit markers).
    /// - Parameters:
    ///   - bundled: take the diffs in bundles, a group commit's in one message (a daemon that
    ///     publishes them says so in its heartbeats and `PingReply`; an older one sends nothing
    ///     for this subscription). ``receivePublication(timeoutMilliseconds:)`` returns their diffs one by one.
    ///   - receiveHighWaterMark: messages queued before libzmq drops new ones.
    public func subscribe(_ prefix: String, bundled: Bool = false, receiveHighWaterMark: Int32 = 100_000) throws(WireError) {
        let isNew = subscriber == nil
        let socket = try subscriberSocket(receiveHighWaterMark: receiveHighWaterMark)
        do {
            if isNew { try socket.subscribe(Array(WireTopic.controlPrefix.utf8)) }
            try socket.subscribe(WireTopic.subscription(to: prefix, bundled: bundled))
        } catch {
            throw WireError(error)
        }
    }

    /// Subscribes to exactly `topic`, with no control subscription (for testing what the daemon
    /// lets through).
    public func subscribeRaw(_ topic: String) throws(WireError) {
        let socket = try subscriberSocket(receiveHighWaterMark: 100_000)
        do {
            try socket.subscribe(Array(topic.utf8))
        } catch {
            throw WireError(error)
        }
    }

    private func subscriberSocket(receiveHighWaterMark: Int32) throws(WireError) -> ZMQSocket {
        if let subscriber { return subscriber }
        guard !publishEndpoint.isEmpty else {
            throw WireError(kind: .transport, message: "no publish endpoint to subscribe to: \(requestEndpoint) implies none "
                + "(give --pub-endpoint, or $BEACON_PUB_ENDPOINT)")
        }
        do {
            let socket = try ZMQSocket(context, type: .sub, linger: 0)
            try socket.setReceiveHighWaterMark(receiveHighWaterMark)
            if let curve { try socket.enableCurveClient(serverKey: curve.serverKey, keys: curve.keys) }
            try socket.connect(publishEndpoint)
            subscriber = socket
            subscriberPoller.add(socket)
            return socket
        } catch {
            throw WireError(error)
        }
    }

    /// Waits up to `timeoutMilliseconds` for the next publication (-1: forever); `nil` on timeout.
    public func receivePublication(timeoutMilliseconds: Int) throws(WireError) -> Publication? {
        if pendingNext < pending.count {
            pendingNext += 1
            return pending[pendingNext - 1]
        }
        guard let subscriber else { return nil }
        do {
            var frames = try subscriber.receiveMessage(flags: .dontWait)
            if frames == nil {
                guard try subscriberPoller.poll(timeoutMilliseconds: timeoutMilliseconds) > 0 else { return nil }
                frames = try subscriber.receiveMessage(flags: .dontWait)
            }
            guard let frames else { return nil }
            pending = try Self.decodePublications(frames)
            pendingNext = 0
            return try receivePublication(timeoutMilliseconds: 0)
        } catch let error as ZMQError {
            throw WireError(error)
        } catch {
            throw WireError(kind: .malformedReply, message: "publication is not valid: \(error)")
        }
    }

    /// Decodes the frames of one message from a publish socket: one publication, or a bundle's
    /// diffs in order; none for a message that is not two frames (topic, body).
    /// - Throws: when the body does not decode.
    public static func decodePublications(_ frames: [ZMQMessage]) throws -> [Publication] {
        guard frames.count == 2 else { return [] }
        switch frames[0].withUnsafeBytes({ WireTopic.kind(of: $0) }) {
        case .heartbeat: return [.heartbeat(try Beacon_V1_Heartbeat(serializedBytes: frames[1].bytes))]
        case .commit: return [.commit(try Beacon_V1_CommitMarker(serializedBytes: frames[1].bytes))]
        case .diff: return [.diff(try Beacon_V1_Diff(frame: frames[1]))]
        case .bundle: return try Beacon_V1_Bundle.diffs(frame: frames[1]).map { .diff($0) }
        }
    }
}
