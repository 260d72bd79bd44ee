import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import Logging
import Synchronization

/// The authoritative Beacon server: binds the request and publish sockets, orders and journals
/// writes, publishes diffs and heartbeats, and serves reads, snapshots, deltas and history.
///
/// The sockets and the in-memory state belong to one loop thread that ``start()`` spawns. The
/// journal belongs to the write pipeline (`WritePipeline`), which hands it to the loop only while
/// no batch is committing on the commit thread. Other threads talk to the server only through
/// ``requestStop()``, ``requestReload(_:)`` and ``waitUntilStopped()``.
public final class BeaconServer: @unchecked Sendable {
    /// The configuration the server started with.
    public let configuration: DaemonConfiguration
    /// Where the server reports readiness, status and watchdog keep-alives (systemd); set it
    /// before ``start()``.
    public var notifier: SystemdNotifier?
    /// The settings in force: ``configuration`` plus reloads (loop thread only).
    var live: DaemonConfiguration
    private let pendingReload = Mutex<DaemonConfiguration?>(nil)
    let logger: Logger

    // Loop-thread state. Written before the thread starts, then only on it. Without dynamic
    // exclusivity checks: a write touched these about twenty times, and each check cost as much
    // as the access it guarded (a tenth of the loop's time). No access to them calls back into
    // code that accesses them again, which is what a check would catch.
    /// The store, the journal and the writes on their way into it, with their replies and timers.
    @exclusivity(unchecked) private(set) var writes: WritePath!
    /// The loop's own timers: heartbeats, compaction, systemd's watchdog and status, the publish socket.
    @exclusivity(unchecked) var timers = TimerQueue<LoopTimer>()
    @exclusivity(unchecked) var counters = Counters()
    /// Rights, scopes and per-peer usage.
    @exclusivity(unchecked) var access: AccessControl
    /// The peer whose request is being handled.
    @exclusivity(unchecked) var current = RequestContext.unrestricted
    /// The journal's size, sampled every heartbeat (for `max_journal_bytes`).
    @exclusivity(unchecked) var journalBytes: UInt64 = 0
    @exclusivity(unchecked) var instance: UInt64 = 0
    let startedAt: MonotonicTime
    /// Where the daemon reads the time.
    let clock: any DaemonClock
    private let openJournal: (DaemonConfiguration) throws(JournalError) -> any JournalStore
    /// The steps of a compaction under way.
    var compactionSchedule = CompactionSchedule()
    /// Journal copies being read by `Backup` requests.
    @exclusivity(unchecked) var backups: BackupCopies
    /// The pace of the steps that make a backup copy: pages per step, sized to hold the loop about 8 ms.
    var backupPacer = StepPacer(initialSize: 256, sizes: 16...262_144)
    /// Replies on their way to each request connection, bounded in bytes.
    @exclusivity(unchecked) var replyFlows: ReplyFlows
    /// When subscribers that do not read were last looked for.
    @exclusivity(unchecked) var lastStalledSubscriberScan = MonotonicTime(milliseconds: 0)
    /// Subscriber connections whose send queue was full at the last scan.
    @exclusivity(unchecked) var stalledSubscribers: Set<StalledSubscriber> = []
    /// Who decides writes: this daemon against its journal, or the upstream it relays.
    @exclusivity(unchecked) var authority: any WriteAuthority = JournalAuthority()

    private(set) var context: ZMQContext!
    /// Where the loop and libzmq's I/O thread run, resolved from `loop_cpu` at start; nil: anywhere.
    private var loopPlacement: ThreadPlacement?
    @exclusivity(unchecked) var router: ZMQSocket!
    /// The publish socket, its subscriptions and the prefixes it sequences.
    @exclusivity(unchecked) var publisher: Publisher!
    /// The ZAP handler's socket: every connection to the daemon is authenticated here.
    var zap: ZMQSocket?
    /// Connections to the request and publish sockets, per peer and in all; sheds those over a limit.
    var connections: ConnectionGuard!
    /// With systemd's watchdog on: proof that libzmq still moves messages, asked before each `WATCHDOG=1`.
    var servingProbe: ServingProbe?
    /// Recent write and publication rates, for `Stats`.
    var writeRate = RateMeter()
    var publicationRate = RateMeter()
    private var lock: InstanceLock?
    private let wake: WakePipe
    private let stopFlag = Atomic<Bool>(false)
    /// Log lines outside peers can cause, throttled.
    @exclusivity(unchecked) var logThrottle = LogThrottle()
    private let finished = Mutex<FinishState>(.running)
    private var thread: Thread?

    enum FinishState {
        case running
        case waiting([CheckedContinuation<Void, Never>])
        case finished
    }

    struct Counters {
        var writes: UInt64 = 0
        var rejected: UInt64 = 0
        var requests: UInt64 = 0
        var commits: UInt64 = 0
        var connectionsRefused: UInt64 = 0
        var accessDenied: UInt64 = 0
        var rateLimited: UInt64 = 0
        var quotaExceeded: UInt64 = 0
        var subscriptionsRefused: UInt64 = 0
        var batches: UInt64 = 0
        var leasesRefused: UInt64 = 0
        var slowSubscribersClosed: UInt64 = 0
    }

    /// Creates a server; nothing is opened until ``start()``.
    /// - Parameters:
    ///   - configuration: directories, endpoints and policies.
    ///   - logger: where the server logs; it logs requests at `trace`, faults at `warning`+.
    public convenience init(configuration: DaemonConfiguration, logger: Logger) throws(DaemonError) {
        try self.init(configuration: configuration, logger: logger, clock: SystemClock.shared) { config throws(JournalError) in
            try Journal(path: config.journalPath, durability: config.durability)
        }
    }

    /// Creates a server that reads time from `clock` and opens its journal with `openJournal`
    /// (a test's clock and journal; the SQLite journal at `journal_path` otherwise).
    package init(configuration: DaemonConfiguration, logger: Logger, clock: any DaemonClock,
                 openJournal: @escaping (DaemonConfiguration) throws(JournalError) -> any JournalStore) throws(DaemonError) {
        self.configuration = configuration
        self.clock = clock
        self.openJournal = openJournal
        startedAt = clock.now()
        live = configuration
        access = AccessControl(policy: configuration.access, limits: configuration.limits)
        backups = BackupCopies(directory: configuration.stateDirectory)
        replyFlows = ReplyFlows(limits: Self.replyLimits(configuration.limits))
        self.logger = logger
        do {
            self.wake = try WakePipe()
        } catch {
            throw DaemonError(.startup, "\(error)")
        }
    }

    /// Opens the journal, binds the sockets and starts the loop thread.
    ///
    /// When this returns the sockets accept connections and the journal is open.
    /// - Throws: ``DaemonError`` when directories, the lock, the journal or a socket fail.
    public func start() throws(DaemonError) {
        let config = configuration
        try Self.makeDirectory(config.runtimeDirectory, mode: 0o755)
        try Self.makeDirectory(config.stateDirectory, mode: 0o750)
        lock = try InstanceLock(path: config.runtimeDirectory + "/beacond.lock")
        let wake = self.wake
        do {
            let journal = try whileStarting("checking and opening the journal") { () throws(JournalError) in try openJournal(config) }
            writes = WritePath(journal: journal, clock: clock, settings: writeSettings(config), logger: logger, delegate: self) { wake.wake() }
        } catch {
            lock?.release()
            throw DaemonError(error.code == .locked ? .alreadyRunning : .journal, error.description, underlying: error)
        }
        do {
            try whileStarting("loading the current state") { () throws(DaemonError) in try loadState() }
            try openSockets()
            try chooseAuthority()
        } catch {
            writes.close()
            lock?.release()
            router = nil
            publisher = nil
            throw error
        }
        instance = UInt64.random(in: 1...UInt64(Int64.max))
        backups.removeLeftovers()
        journalBytes = writes.pipeline.sizeInBytes
        if writes.pipeline.isCompacting {
            compactionSchedule.startedAt = StepPacer.monotonicNanoseconds()
            logger.info("resuming the journal compaction an earlier run left unfinished", metadata: [
                "journal.compacted": "\(writes.pipeline.compactedRevision)"])
        }
        if config.curveKeys != nil, !config.access.rules.contains(where: { if case .key = $0.subject { true } else { false } }) {
            logger.warning("CURVE is on but no 'allow = key:...' rule lists a client key: no tcp client can connect")
        }
        logger.info("beacond started", metadata: [
            "runtime.dir": "\(config.runtimeDirectory)", "journal.path": "\(config.journalPath)",
            "journal.epoch": "\(writes.epoch)", "journal.head": "\(writes.headRevision)",
            "keys": "\(writes.store.liveCount)",
        ])
        notifier?.ready(status: statusLine(writesPerSecond: 0))
        let thread = Thread { [self] in self.loop() }
        thread.name = "beacond-loop"
        thread.stackSize = 8 << 20
        self.thread = thread
        thread.start()
    }

    /// Runs a slow part of ``start()``, keeping systemd's start timeout from running out meanwhile.
    private func whileStarting<Result, Failure: Error>(_ what: String, _ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        guard let notifier else { return try body() }
        return try notifier.extendingStartTimeout(what, body)
    }

    /// Whether ``start()`` has succeeded (the loop is running or has run).
    public var isStarted: Bool { thread != nil }

    /// Asks the loop to finish: pending writes are committed and answered, sockets and journal
    /// closed. Safe from any thread; returns at once.
    public func requestStop() {
        notifier?.stopping()
        stopFlag.store(true, ordering: .sequentiallyConsistent)
        wake.wake()
    }

    /// Applies the reloadable settings of `configuration` (heartbeat interval, retention,
    /// compaction interval, batch size, session time to live) on the loop, then reports
    /// readiness again. Settings that need a restart (directories, endpoints, durability,
    /// socket mode) are logged and left as they are. Safe from any thread.
    public func requestReload(_ configuration: DaemonConfiguration) {
        pendingReload.withLock { $0 = configuration }
        wake.wake()
    }

    private func applyPendingReload() {
        guard let next = pendingReload.withLock({ pending in defer { pending = nil }; return pending }) else { return }
        let restartOnly: [(String, Bool)] = [
            ("runtime_dir", next.runtimeDirectory != live.runtimeDirectory),
            ("state_dir", next.stateDirectory != live.stateDirectory),
            ("request_endpoint", next.extraRequestEndpoints != live.extraRequestEndpoints),
            ("publish_endpoint", next.extraPublishEndpoints != live.extraPublishEndpoints),
            ("durability", next.durability != live.durability),
            ("socket_mode", next.socketMode != live.socketMode),
            ("publish_hwm", next.publishHighWaterMark != live.publishHighWaterMark),
            ("curve_secret_key_file", next.curveKeys != live.curveKeys),
            ("tcp_insecure", next.tcpInsecure != live.tcpInsecure),
            ("pending_requests", next.limits.pendingRequests != live.limits.pendingRequests),
            ("loop_cpu", next.loopCPU != live.loopCPU),
            ("upstream", next.upstream != live.upstream),
        ]
        for (name, changed) in restartOnly where changed {
            logger.warning("setting changed on reload; it takes effect at the next start", metadata: ["setting": "\(name)"])
        }
        live.heartbeatIntervalMilliseconds = next.heartbeatIntervalMilliseconds
        live.retention = next.retention
        live.compactionIntervalSeconds = next.compactionIntervalSeconds
        live.maxBatch = next.maxBatch
        live.sessionTTLMilliseconds = next.sessionTTLMilliseconds
        writes.settings = writeSettings(live)
        let policyChanged = next.access != live.access
        live.access = next.access
        live.limits = next.limits
        let rightsChanged = access.reload(policy: live.access, limits: live.limits)
        connections.setPerPeerLimit(Int(live.limits.connectionsPerPeer))
        replyFlows.limits = Self.replyLimits(live.limits)
        if policyChanged || rightsChanged {
            // Subscriptions were granted under the old rights: open the publish socket anew so that
            // every subscriber reconnects and subscribes under the new ones (it repairs any gap).
            reopenPublisher(reason: policyChanged ? "the access rules changed" : "a connected peer's groups changed")
        }
        logger.info("configuration reloaded", metadata: [
            "heartbeat.ms": "\(live.heartbeatIntervalMilliseconds)", "allow.rules": "\(live.access.rules.count)"])
        notifier?.ready(status: statusLine(writesPerSecond: 0))
    }

    /// The one-line status systemd shows.
    func statusLine(writesPerSecond: Double) -> String {
        "revision \(writes.headRevision), \(writes.store.liveCount) keys, \(publisher.tracker.tracked.count) followed prefixes, "
            + "\(Int(writesPerSecond.rounded())) writes/s, journal \(writes.pipeline.sizeInBytes / 1024) KiB"
            + (writes.isReadOnly ? ", READ-ONLY: \(writes.backoff.reason ?? "journal unwritable")" : "")
            + servingStatus
            + authority.statusLine(headRevision: writes.headRevision)
    }

    /// What the status line says when libzmq has moved no message for more than a watchdog interval.
    private var servingStatus: String {
        guard let servingProbe, let interval = notifier?.watchdogInterval else { return "" }
        let silent = servingProbe.lastArrival.milliseconds(until: clock.now())
        return silent > UInt64(interval.components.seconds * 1000) + UInt64(interval.components.attoseconds / 1_000_000_000_000_000)
            ? ", NOT SERVING: libzmq has moved no message for \(silent / 1000) s" : ""
    }

    /// Waits until the loop has finished and everything is closed.
    public func waitUntilStopped() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = finished.withLock { state -> Bool in
                switch state {
                case .finished: return true
                case .running: state = .waiting([continuation]); return false
                case .waiting(var list): list.append(continuation); state = .waiting(list); return false
                }
            }
            if resumeNow { continuation.resume() }
        }
    }

    // MARK: Start-up

    static func makeDirectory(_ path: String, mode: Int) throws(DaemonError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: mode])
        } catch {
            throw DaemonError(.startup, "cannot create directory \(path): \(error.localizedDescription)")
        }
    }

    /// Loads the store from the journal, with the timers of what expires or is bound to a
    /// session (a relay's keys expire at its upstream, which sends the deletes).
    func loadState() throws(DaemonError) {
        do {
            try writes.load()
        } catch {
            throw DaemonError(.journal, error.description, underlying: error)
        }
    }

    /// The write path's settings in `configuration`.
    private func writeSettings(_ configuration: DaemonConfiguration) -> WritePath.Settings {
        WritePath.Settings(sessionTTLMilliseconds: configuration.sessionTTLMilliseconds, maxBatch: configuration.maxBatch,
                           expiresKeys: configuration.upstream == nil)
    }

    private func openSockets() throws(DaemonError) {
        let config = configuration
        connections = ConnectionGuard(perPeer: Int(config.limits.connectionsPerPeer), descriptorLimit: DescriptorLimit.raise())
        // libzmq starts its I/O thread with the context's first socket, in the placement of the
        // thread that makes it; this thread is put back as it was once the sockets are open.
        let restore = placeForLoop()
        defer { if let restore { try? restore.apply() } }
        var step = "creating the ZeroMQ context"
        do {
            let context = try ZMQContext()
            self.context = context
            // The ZAP handler binds first: libzmq lets peers in unchecked when none listens.
            step = "binding the ZAP handler"
            let zap = try ZMQSocket(context, type: .rep, linger: 0)
            try zap.bind(ZAP.endpoint)
            self.zap = zap
            step = "creating the request socket"
            router = try ZMQSocket(context, type: .router, linger: 1000)
            try router.setHandshakeInterval(milliseconds: Self.handshakeMilliseconds)
            try router.setMaxMessageSize(Int64(WireLimits.maxRequestBytes))
            try router.setSendHighWaterMark(Self.replyHighWaterMark)
            try router.setRouterMandatory(true)
            try router.setReceiveHighWaterMark(config.limits.pendingRequests)
            for endpoint in [config.requestEndpoint] + config.extraRequestEndpoints {
                step = "binding the request socket to \(endpoint)"
                try bind(router, to: endpoint)
            }
            step = "creating the publish socket"
            try openPublisher(context)
            step = "monitoring the sockets"
            try connections.watch(router, as: .requests, name: "beacond-requests-\(UInt64.random(in: 0 ... .max))")
            if notifier?.watchdogInterval != nil {
                step = "opening the watchdog's probe"
                servingProbe = try ServingProbe(context: context, path: config.runtimeDirectory + "/beacond.probe", now: clock.now())
            }
        } catch {
            throw DaemonError(.startup, "\(step): \(error.message)", underlying: error)
        }
        chmod(config.runtimeDirectory + "/" + WireEndpoint.requestSocketName, mode_t(config.socketMode))
    }

    /// Resolves `loop_cpu` and places the calling thread there, so that libzmq's I/O thread
    /// starts there too. Returns the calling thread's placement before, or nil if it was left alone.
    private func placeForLoop() -> ThreadPlacement? {
        guard configuration.loopCPU != .off, let previous = try? ThreadPlacement.current() else { return nil }
        let cpu: Int
        switch configuration.loopCPU {
        case .off: return nil
        case .cpu(let chosen): cpu = chosen
        case .auto:
            guard let last = previous.cpus.last else { return nil }
            cpu = last
        }
        let placement = ThreadPlacement.batch(onCPU: cpu)
        do {
            try placement.apply()
        } catch {
            try? previous.apply()  // the CPU may have been set before the policy failed
            logger.warning("the loop and libzmq's I/O thread could not be placed on one CPU; running unplaced",
                           metadata: ["cpu": "\(cpu)", "error": "\(error)"])
            return nil
        }
        loopPlacement = placement
        logger.info("the loop and libzmq's I/O thread run on one CPU, as batch work", metadata: ["cpu": "\(cpu)"])
        return previous
    }

    /// Binds `socket` to `endpoint` with the security that endpoint needs: ipc peers are
    /// identified by the kernel, tcp peers by CURVE (or not at all with `tcp_insecure`).
    func bind(_ socket: ZMQSocket, to endpoint: String) throws(ZMQError) {
        if endpoint.hasPrefix("tcp://") {
            if let keys = configuration.curveKeys {
                try socket.enableCurveServer(secretKey: keys.secretKey)
                try socket.setZAPDomain(AccessDomain.curve)
            } else {
                try socket.disableCurve()
                try socket.setZAPDomain(AccessDomain.insecure)
            }
        } else {
            try socket.disableCurve()
            try socket.setZAPDomain(AccessDomain.local)
        }
        try socket.bind(endpoint)
    }

    /// Creates and binds the publish socket (``Publisher``).
    private func openPublisher(_ context: ZMQContext) throws(ZMQError) {
        let config = configuration
        publisher = try Publisher(context: context, endpoints: [config.publishEndpoint] + config.extraPublishEndpoints,
                                  highWaterMark: config.publishHighWaterMark, connections: connections) {
            [unowned self] (socket, endpoint) throws(ZMQError) in
            try bind(socket, to: endpoint)
            if !endpoint.hasPrefix("tcp://") {
                chmod(configuration.runtimeDirectory + "/" + WireEndpoint.publishSocketName, mode_t(configuration.socketMode))
            }
        }
    }

    /// Opens the publish socket anew: subscribers reconnect and subscribe anew (and repair what
    /// they missed). An endpoint the old socket still holds (a tcp port in the kernel's hands)
    /// is bound again by a timer, never given up.
    func reopenPublisher(reason: String) {
        access.resetSubscriptions()
        do {
            try publisher.reopen(now: clock.now())
        } catch {
            logger.critical("publish socket could not be created; stopping", metadata: ["error": "\(error)"])
            stopFlag.store(true, ordering: .sequentiallyConsistent)
            return
        }
        bindPublishEndpoints()
        logger.info("publish socket opened anew; subscribers reconnect", metadata: ["reason": "\(reason)"])
    }

    /// Binds the publish endpoints still unbound; a timer tries again for those that fail.
    func bindPublishEndpoints() {
        for (endpoint, error) in publisher.bindPending() {
            logger.warning("publish endpoint not bound yet; trying again", metadata: ["endpoint": "\(endpoint)", "error": "\(error)"])
        }
        if !publisher.unboundEndpoints.isEmpty { timers.schedule(.publisherRebind, at: clock.now().adding(milliseconds: 100)) }
    }

    /// How long a connection may take to finish its handshake: one that sends nothing (a raw tcp
    /// connection to the CURVE port) holds a descriptor no longer than this.
    static let handshakeMilliseconds: Int32 = 10_000

    /// Logs connections shed over a limit (throttled: a peer can cause thousands).
    func logShed(_ shed: [ConnectionGuard.Shed]) {
        guard let first = shed.first, let held = logThrottle.admit("connection.shed", now: clock.now()) else { return }
        logger.notice("connections closed at once: over a connection limit", metadata: [
            "peer": "\(first.peer)", "limit": "\(first.verdict == .shedPeerLimit ? "connections_per_peer" : "descriptors")",
            "connections": "\(shed.count)", "held.back": "\(held)"])
    }

    // MARK: Loop

    private func loop() {
        nameCurrentThread("beacond-loop")
        writes.ownership.claim()
        do {
            try loopPlacement?.apply()
        } catch {
            logger.warning("the loop could not join libzmq's I/O thread on its CPU", metadata: ["error": "\(error)"])
        }
        var poller = ZMQPoller()
        var routerIndex = 0, publisherIndex = 0, wakeIndex = 0, zapIndex = 0, probeIndex = -1
        var monitors: [ConnectionLedger.Socket] = []
        var monitorIndices: [Int] = []
        var polledGeneration = -1
        // systemd: WATCHDOG=1 at half the interval it expects; STATUS= every two seconds.
        let watchdogMilliseconds = notifier?.watchdogInterval.map { UInt64($0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000) }
        let started = clock.now()
        timers.schedule(.heartbeat, at: started)
        timers.schedule(.compaction, at: started.adding(milliseconds: live.compactionIntervalSeconds * 1000))
        if watchdogMilliseconds != nil { timers.schedule(.watchdog, at: started) }
        if notifier != nil { timers.schedule(.status, at: started.adding(milliseconds: 2000)) }
        var writesAtLastStatus = counters.writes
        /// Whether the last pass read requests (compaction steps yield to them).
        var servedRequests = false
        while !stopFlag.load(ordering: .relaxed) {
            let now = clock.now()
            let deadline = min(timers.nextDeadline ?? .distantFuture, writes.nextDeadline ?? .distantFuture)
            var timeout = Int(min(now.milliseconds(until: deadline), 60_000))
            for wait in [compactionStepWait(busy: servedRequests), backupStepWait(busy: servedRequests)] {
                guard let wait else { continue }
                timeout = wait == 0 ? 0 : min(timeout, Int(wait / 1_000_000) + 1)
            }
            // Kept replies are offered again soon: a connection reading them is not told so.
            if replyFlows.hasWaiting { timeout = min(timeout, 2) }
            if let wait = authority.pollTimeoutMilliseconds { timeout = min(timeout, wait) }
            if polledGeneration != publisher.generation {
                // First pass, or the publish socket was reopened: poll the sockets there are now.
                poller = ZMQPoller()
                routerIndex = poller.add(router)
                publisherIndex = poller.add(publisher.socket)
                wakeIndex = poller.add(fileDescriptor: wake.fileDescriptor)
                zapIndex = poller.add(zap!)
                if let servingProbe { probeIndex = poller.add(servingProbe.pollable) }
                authority.register(in: poller)  // serviced every pass
                monitors = Array(connections.monitors.keys)
                monitorIndices = monitors.map { poller.add(connections.monitors[$0]!.reader) }
                polledGeneration = publisher.generation
            }
            do {
                try poller.poll(timeoutMilliseconds: timeout)
            } catch {
                logger.error("poll failed", metadata: ["error": "\(error)"])
                break
            }
            if poller.readyEvents(wakeIndex).contains(.readable) { wake.drain() }
            authority.service(host: self)
            for (monitor, index) in zip(monitors, monitorIndices) where poller.readyEvents(index).contains(.readable) {
                drainConnections(monitor)
            }
            if poller.readyEvents(zapIndex).contains(.readable) { drainAuthentication() }
            if probeIndex >= 0, poller.readyEvents(probeIndex).contains(.readable) { servingProbe?.drain(now: now) }
            writes.completeCommitIfReady()
            if poller.readyEvents(publisherIndex).contains(.readable) { drainSubscriptions() }
            servedRequests = poller.readyEvents(routerIndex).contains(.readable)
            if servedRequests { drainRequests() }

            let after = clock.now()
            writes.fireDueTimers(at: after)
            while let (timer, _) = timers.popDue(at: after) {
                switch timer {
                case .heartbeat:
                    writeRate.record(counters.writes, at: after.milliseconds)
                    publicationRate.record(publisher.published, at: after.milliseconds)
                    publisher.tracker.expireLeases(nowMilliseconds: after.milliseconds)
                    journalBytes = writes.pipeline.sizeInBytes
                    publishHeartbeat()
                    timers.schedule(.heartbeat, at: after.adding(milliseconds: UInt64(live.heartbeatIntervalMilliseconds)))
                case .compaction:
                    compactByPolicy()
                    timers.schedule(.compaction, at: after.adding(milliseconds: live.compactionIntervalSeconds * 1000))
                case .watchdog:
                    if servingProbe?.tick(now: after) ?? true {
                        notifier?.watchdog()
                    } else if let held = logThrottle.admit("watchdog.withheld", now: after) {
                        logger.critical("libzmq has stopped moving messages: no WATCHDOG=1 until it does (systemd restarts the daemon)",
                                        metadata: ["held.back": "\(held)"])
                    }
                    timers.schedule(.watchdog, at: after.adding(milliseconds: max((watchdogMilliseconds ?? 0) / 2, 1)))
                case .status:
                    let rate = Double(counters.writes - writesAtLastStatus) / 2
                    writesAtLastStatus = counters.writes
                    notifier?.status(statusLine(writesPerSecond: rate))
                    timers.schedule(.status, at: after.adding(milliseconds: 2000))
                case .publisherReset:
                    reopenPublisher(reason: "subscriptions were refused while libzmq's pairing was out of step")
                case .publisherRebind:
                    bindPublishEndpoints()
                }
            }
            if compactionStepWait(busy: servedRequests) == 0 { compactionStep() }
            if backupStepWait(busy: servedRequests) == 0 { backupStep() }
            authority.finishPass(host: self)
            if replyFlows.hasWaiting { flushKeptReplies() }
            applyPendingReload()
        }
        // Requests already read are answered; then everything closes in order.
        authority.shutDown(host: self)
        writes.flush()
        backups.removeAll()
        connections.close()
        servingProbe?.close()
        router.close()
        publisher.close()
        zap?.close()
        writes.close()
        context = nil
        removeSocketFiles()
        lock?.release()
        logger.info("beacond stopped", metadata: ["journal.head": "\(writes.headRevision)"])
        let waiting = finished.withLock { state -> [CheckedContinuation<Void, Never>] in
            defer { state = .finished }
            if case .waiting(let list) = state { return list }
            return []
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Removes the ipc socket files of a daemon that stopped cleanly (while it still holds the
    /// runtime directory's lock): a client then learns at once that no daemon is there, instead
    /// of waiting out its timeout on a socket nobody listens on.
    private func removeSocketFiles() {
        let endpoints = [configuration.requestEndpoint, configuration.publishEndpoint]
            + configuration.extraRequestEndpoints + configuration.extraPublishEndpoints
        for endpoint in endpoints where endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            var status = stat()
            if lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFSOCK { unlink(path) }
        }
        unlink(configuration.runtimeDirectory + "/beacond.probe")
    }

    /// The last revision to report for a prefix that starts being tracked now. Compaction may
    /// have dropped the tombstone of a later delete, so the compaction point is a floor: a
    /// subscriber that is behind it is told to repair, never told it is complete.
    func initialRevision(prefix: String) -> UInt64 {
        max(writes.store.lastRevision(prefix: prefix), writes.pipeline.compactedRevision)
    }

    private func drainRequests() {
        var count = 0
        while count < live.maxBatch {
            var received: [ZMQMessage]?
            do {
                received = try router.receiveMessage(flags: .dontWait)
            } catch {
                logger.warning("receive failed", metadata: ["error": "\(error)"])
                break
            }
            // Taken out of the optional, so that the array is unique and loses its last frame in place.
            guard var frames = received.take() else { break }
            let body = frames.removeLast()
            count += handle(body, envelope: frames)  // a batch counts as each request it holds
            if writes.pipeline.staged.count >= live.maxBatch {
                // Both buffers are full: let the commit in flight finish, then hand over this batch.
                writes.waitForCommitThenSubmit()
            }
        }
        writes.completeCommitIfReady()
    }
}
