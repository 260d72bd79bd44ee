import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// The client's I/O thread: owns the ZeroMQ sockets, follows prefixes by the protocol's
/// subscriber rules, sends writes (retrying with the same write id), and hands whole revisions
/// to the graph through `deliver`.
///
/// Everything but ``submit(_:)`` and ``stop()`` runs on the I/O thread.
final class ClientEngine: @unchecked Sendable {
    let configuration: BeaconConfiguration
    private let deliver: @Sendable (GraphUpdate) -> Void
    // NSLock rather than Mutex: ThreadSanitizer sees pthread locks, not the stdlib's futex.
    private let commandLock = NSLock()
    private var commands: [EngineCommand] = []
    /// False once the I/O thread has ended: later commands are refused at once.
    private var acceptsCommands = true
    private let stopping = Atomic<Bool>(false)
    private let wakePipe: WakePipe
    private let finished = DispatchSemaphore(value: 0)
    /// Counters for ``BeaconClient/statistics``.
    let repairCount = Atomic<Int>(0)
    let resyncCount = Atomic<Int>(0)
    let revisionCount = Atomic<Int>(0)
    let snapshotCount = Atomic<Int>(0)
    let resumeCount = Atomic<Int>(0)
    let bundleCount = Atomic<Int>(0)
    /// The local journal, if configured: resumes from its bookmarks, saves what is applied.
    let localJournal: LocalJournal?
    private var savedBookmarks: [String: UInt64] = [:]
    private var nextSave: UInt64 = 0
    private var thread: Thread?

    // I/O-thread state.
    var context: ZMQContext!
    /// The request side: the DEALER, request ids, and the daemon refusing this peer.
    var requests: RequestChannel!
    var subscriber: ZMQSocket!
    /// The mirrors' follower core: every followed prefix, released as whole revisions.
    var mirrors: FollowerCore
    /// History streams by id, each with a core of its own.
    var histories: [Int: HistoryFollower] = [:]
    /// The SUB socket's subscriptions, counted: mirrors and history streams may share a prefix.
    private var subscriptionCounts: [String: Int] = [:]
    /// Whether the subscriptions are to bundles (the daemon's heartbeat said it publishes them).
    private var bundled = false
    /// Released steps not yet handed to the graph (one update per loop iteration).
    var outgoing: [FollowerCore.Step] = []
    /// The counters of history streams that ended.
    var retiredHistoryStatistics = FollowerCore.Statistics()
    /// When refused followers ask again.
    var nextRefusedRetry: UInt64 = 0
    /// Writes sent and not answered, by request id.
    var pendingWrites: [UInt64: PendingWrite] = [:]
    /// Reads sent and not answered, by request id.
    var pendingReads: [UInt64: PendingRead] = [:]
    /// Writes answered and waiting for their mirrors to catch up.
    var awaitingMirror: [PendingWrite] = []
    /// When the daemon was last heard from (a publication or a reply), in ms of uptime.
    var lastHeard: UInt64 = 0
    /// Whether the last blocking request timed out (then syncs wait for a sign of life).
    var daemonSilent = false
    var nextSyncAttempt: UInt64 = 0
    /// The client's session id: keys written with it vanish when the client stops renewing it.
    let sessionID: Data
    /// When to renew the session next; 0 while no session-bound key was written.
    var nextKeepAlive: UInt64 = 0
    /// Blocking requests that timed out in a row (resets on an answer).
    var consecutiveTimeouts = 0
    var heartbeatIntervalMs: UInt64 = 1000
    /// The daemon is a relay whose last heartbeat said its upstream is unreachable.
    var upstreamUnreachable = false
    private var connection = ConnectionState.connecting

    init(configuration: BeaconConfiguration, sessionID: Data, localJournal: LocalJournal?,
         deliver: @escaping @Sendable (GraphUpdate) -> Void) throws(BeaconError) {
        self.configuration = configuration
        self.sessionID = sessionID
        self.localJournal = localJournal
        mirrors = FollowerCore(mode: .mirror, epoch: localJournal?.contents.epoch ?? 0)
        self.deliver = deliver
        do {
            wakePipe = try WakePipe()
        } catch {
            throw BeaconError(.unreachable, "cannot create the client's wake pipe: \(error)")
        }
    }

    /// Starts the I/O thread.
    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "beacon-client-io"
        thread.stackSize = 1 << 20
        self.thread = thread
        thread.start()
    }

    /// Queues a command for the I/O thread; safe from any thread.
    func submit(_ command: EngineCommand) {
        let accepted = commandLock.withLock {
            if !acceptsCommands { return false }
            commands.append(command)
            return true
        }
        if accepted {
            wakePipe.wake()
        } else {
            Self.refuse(command, BeaconError(.closed, "the client was closed"))
        }
    }

    private static func refuse(_ command: EngineCommand, _ error: BeaconError) {
        switch command {
        case .write(let request): request.complete(.failure(error))
        case .read(let request): request.complete(.failure(error))
        case .history(let request): request.feed.finish(throwing: error)
        default: break
        }
    }

    /// Stops the I/O thread and waits for it; pending writes fail with `.closed`.
    func stop() {
        guard thread != nil, !stopping.exchange(true, ordering: .acquiringAndReleasing) else { return }
        wakePipe.wake()
        finished.wait()
    }

    // MARK: Loop

    private func run() {
        do {
            try openSockets()
        } catch {
            failEverything(BeaconError(.unreachable, "cannot open sockets: \(error)"))
            return
        }
        let poller = ZMQPoller()
        let dealerIndex = poller.add(requests.socket)
        let requestEventsIndex = poller.add(requests.events.reader)
        let subscriberIndex = poller.add(subscriber)
        let wakeIndex = poller.add(fileDescriptor: wakePipe.fileDescriptor)
        while !stopping.load(ordering: .acquiring) {
            do {
                try poller.poll(timeoutMilliseconds: pollTimeout())
            } catch {
                break
            }
            if poller.readyEvents(wakeIndex).contains(.readable) { wakePipe.drain() }
            runCommands()
            if poller.readyEvents(dealerIndex).contains(.readable) { drainReplies() }
            if poller.readyEvents(requestEventsIndex).contains(.readable) { readConnectionEvents() }
            if poller.readyEvents(subscriberIndex).contains(.readable) { drainPublications() }
            let now = Self.now()
            syncFollowers(now: now)
            takeReleased()
            flushOutgoing()
            serviceWrites(now: now)
            serviceReads(now: now)
            if nextKeepAlive > 0 && now >= nextKeepAlive { keepSessionAlive(now: now) }
            if localJournal != nil && now >= nextSave {
                saveLocalJournal()
                nextSave = now + 250
            }
            updateConnection(now: now)
        }
        failEverything(BeaconError(.closed, "the client was closed"))
        endSession()
        saveLocalJournal()
        localJournal?.close()
        requests.close()
        subscriber.close()
        requests = nil
        subscriber = nil
        context = nil  // terminates the context: libzmq's threads are joined here, not at exit
    }

    private func openSockets() throws {
        context = try ZMQContext()
        requests = try RequestChannel(endpoint: configuration.requestEndpoint, context: context, curve: configuration.curve,
                                      reconnects: true, name: "beacon-client")
        subscriber = try ZMQSocket(context, type: .sub, linger: 0)
        try subscriber.setReceiveHighWaterMark(configuration.receiveHighWaterMark)
        if let curve = configuration.curve { try subscriber.enableCurveClient(serverKey: curve.serverKey, keys: curve.keys) }
        try subscriber.connect(configuration.publishEndpoint)
        try subscriber.subscribe(Array(WireTopic.controlPrefix.utf8))
    }

    private func pollTimeout() -> Int {
        let now = Self.now()
        var deadline = now + 250
        if hasDueFetch { deadline = min(deadline, max(nextSyncAttempt, now)) }
        for write in pendingWrites.values { deadline = min(deadline, write.nextAttempt) }
        for read in pendingReads.values { deadline = min(deadline, read.nextAttempt) }
        if nextKeepAlive > 0 { deadline = min(deadline, nextKeepAlive) }
        if !awaitingMirror.isEmpty { deadline = min(deadline, now + 20) }
        return Int(deadline > now ? deadline - now : 0)
    }

    /// Runs the commands queued since the last wake-up. Writes queued one after another go out
    /// as one batch request.
    private func runCommands() {
        var writes: [WriteRequest] = []
        for command in takeCommands() {
            if case .write(let request) = command {
                writes.append(request)
                continue
            }
            send(writes)
            writes.removeAll()
            switch command {
            case .follow(let prefix): follow(prefix)
            case .unfollow(let prefix): unfollow(prefix)
            case .write: break
            case .read(let request): send(request)
            case .history(let request): startHistory(request)
            case .cancelHistory(let id): stopHistory(id)
            }
        }
        send(writes)
    }

    private func takeCommands() -> [EngineCommand] {
        commandLock.withLock {
            defer { commands.removeAll() }
            return commands
        }
    }

    /// Milliseconds of monotonic time.
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds / 1_000_000 }

    // MARK: Connection state

    /// Whether heartbeats are overdue: three intervals, and at least a second, so that a busy
    /// machine's scheduling jitter is not reported as a lost daemon.
    var isSilent: Bool {
        lastHeard == 0 || Self.now() > lastHeard + max(3 * heartbeatIntervalMs, 1000)
    }

    private func updateConnection(now: UInt64) {
        let state: ConnectionState
        if lastHeard == 0 {
            state = .connecting
        } else if isSilent || daemonSilent || upstreamUnreachable {
            state = .stale
        } else if mirrors.isSyncing {
            state = .syncing
        } else {
            state = .live
        }
        if state != connection {
            connection = state
            deliver(.connection(state))
        }
    }

    func heard() {
        lastHeard = Self.now()
        daemonSilent = false
    }

    func post(_ update: GraphUpdate) { deliver(update) }

    // MARK: Subscriptions

    func addSubscription(_ prefix: String) {
        subscriptionCounts[prefix, default: 0] += 1
        if subscriptionCounts[prefix] == 1 { try? subscriber.subscribe(topic(of: prefix)) }
    }

    func removeSubscription(_ prefix: String) {
        guard let count = subscriptionCounts[prefix] else { return }
        if count <= 1 {
            subscriptionCounts[prefix] = nil
            try? subscriber.unsubscribe(topic(of: prefix))
        } else {
            subscriptionCounts[prefix] = count - 1
        }
    }

    /// The subscription that brings the diffs under `prefix`: the prefix itself, or its bundles.
    private func topic(of prefix: String) -> [UInt8] { WireTopic.subscription(to: prefix, bundled: bundled) }

    /// Moves every subscription to bundles or back. Each old subscription goes before its new
    /// one (the daemon may cap subscriptions per peer); a group published in between is missed
    /// and repaired, one received both ways is applied once (PROTOCOL.md §6).
    func setBundled(_ on: Bool) {
        guard on != bundled else { return }
        for prefix in subscriptionCounts.keys { try? subscriber.unsubscribe(topic(of: prefix)) }
        bundled = on
        for prefix in subscriptionCounts.keys { try? subscriber.subscribe(topic(of: prefix)) }
    }

    // MARK: Requests

    func nextID() -> UInt64 { requests.takeRequestID() }

    func sendRequest(id: UInt64, _ op: Beacon_V1_Request.OneOf_Op) {
        try? requests.send(id: id, op, flags: .dontWait)
    }

    /// Reads the request connection's events: while the daemon refuses this peer, writes fail at
    /// once with its reason (``BeaconError/Code/permissionDenied``) instead of timing out.
    private func readConnectionEvents() {
        requests.readEvents()
        failWritesWhileRefused()
    }

    /// Sends a request and waits for its reply, handing other replies to their writes meanwhile.
    /// - Returns: the reply, or `nil` on timeout (the daemon is then considered silent).
    func call(_ op: Beacon_V1_Request.OneOf_Op) -> Beacon_V1_Reply? {
        let id = nextID()
        sendRequest(id: id, op)
        return awaitReply(id: id)
    }

    /// Waits for the reply to request `id`, sent already, handing other replies to their writes
    /// meanwhile.
    /// - Returns: the reply, or `nil` on timeout (the daemon is then considered silent) or while the
    ///   daemon refuses this peer.
    func awaitReply(id: UInt64) -> Beacon_V1_Reply? {
        // A daemon slower than the timeout would never get a sync through: each timeout in a
        // row doubles the next wait (up to 32 times the configured timeout).
        let deadline = Self.now() + configuration.requestTimeoutMilliseconds << min(consecutiveTimeouts, 5)
        let poller = ZMQPoller()
        for socket in requests.pollable { poller.add(socket) }
        while true {
            while let reply = receiveReply() {
                if reply.id == id {
                    heard()
                    consecutiveTimeouts = 0
                    return reply
                }
                handle(reply)
            }
            requests.readEvents()
            let now = Self.now()
            // A refused connection gets no reply: no timeout, and not a silent daemon either.
            if requests.refusal != nil { return nil }
            guard now < deadline, !stopping.load(ordering: .relaxed) else { break }
            _ = try? poller.poll(timeoutMilliseconds: Int(min(deadline - now, 50)))
        }
        daemonSilent = true
        consecutiveTimeouts += 1
        return nil
    }

    private func receiveReply() -> Beacon_V1_Reply? { requests.receiveReply() }

    private func drainReplies() {
        while let reply = receiveReply() {
            heard()
            handle(reply)
        }
    }

    // MARK: Local journal

    /// Saves what was applied since the last save, with each live mirror's bookmark: the
    /// revision its released state is complete through.
    private func saveLocalJournal() {
        guard let localJournal else { return }
        let bookmarks = mirrors.bookmarks()
        guard localJournal.hasPending || bookmarks != savedBookmarks else { return }
        localJournal.save(bookmarks: bookmarks)
        savedBookmarks = bookmarks
    }

    // MARK: Session

    /// Renews the session for one `sessionTimeout`, a third of it before it would run out.
    func keepSessionAlive(now: UInt64) {
        let ttl = configuration.sessionTimeoutMilliseconds
        sendRequest(id: nextID(), .keepAlive(.with {
            $0.session = sessionID
            $0.ttlMs = UInt32(min(ttl, UInt64(WireLimits.maxSessionTTLMilliseconds)))
        }))
        nextKeepAlive = now + max(ttl / 3, 1)
    }

    /// Ends the session, so that its keys go now rather than after `sessionTimeout` (best effort:
    /// waits at most half a second for the daemon).
    private func endSession() {
        guard nextKeepAlive > 0 else { return }
        let id = nextID()
        sendRequest(id: id, .keepAlive(.with { $0.session = sessionID; $0.ttlMs = 0 }))
        let poller = ZMQPoller()
        poller.add(requests.socket)
        let deadline = Self.now() + 500
        while Self.now() < deadline {
            while let reply = receiveReply() { if reply.id == id { return } }
            _ = try? poller.poll(timeoutMilliseconds: 20)
        }
    }

    // MARK: Shutdown

    private func failEverything(_ error: BeaconError) {
        for write in pendingWrites.values { write.request.complete(.failure(error)) }
        pendingWrites.removeAll()
        for read in pendingReads.values { read.request.complete(.failure(error)) }
        pendingReads.removeAll()
        for write in awaitingMirror { write.request.complete(.failure(error)) }
        awaitingMirror.removeAll()
        for history in histories.values { history.feed.finish() }
        histories.removeAll()
        let leftOver = commandLock.withLock {
            acceptsCommands = false
            defer { commands.removeAll() }
            return commands
        }
        for command in leftOver { Self.refuse(command, error) }
    }
}
