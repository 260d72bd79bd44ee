import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import Logging

/// The daemon while it runs: what the loop thread owns, and the loop. ``BeaconServer/start()``
/// builds it — the journal open and its state loaded, the sockets bound, the write authority
/// chosen — so that nothing in it is ever missing; its thread then runs ``run()`` until a stop
/// is asked, and closes everything in order.
///
/// Built on the thread that starts the server, then handed to its loop thread, which alone
/// touches it (checked in debug builds through the write path's `LoopOwnership`): hence
/// `@unchecked Sendable`, for that one hand-off.
final class ServerLoop: @unchecked Sendable {
    /// The configuration the server started with.
    let configuration: DaemonConfiguration
    let logger: Logger
    /// Where the daemon reads the time.
    let clock: any DaemonClock
    /// What other threads use to stop, reload and wait for the loop.
    let control: LoopControl
    /// Where readiness, status and watchdog keep-alives go (systemd).
    let notifier: SystemdNotifier?
    /// The runtime directory is this daemon's while it holds this.
    private let lock: InstanceLock

    // Loop-thread state. Without dynamic exclusivity checks: a write touched these about twenty
    // times, and each check cost as much as the access it guarded (a tenth of the loop's time).
    // No access to them calls back into code that accesses them again, which is what a check
    // would catch.
    /// The settings in force: ``configuration`` plus reloads.
    @exclusivity(unchecked) var live: DaemonConfiguration
    /// The store, the journal and the writes on their way into it, with their replies and timers.
    let writes: WritePath
    /// Who decides writes: this daemon against its journal, or the upstream it relays.
    let authority: any WriteAuthority
    /// Rights, scopes and per-peer usage.
    @exclusivity(unchecked) var access: AccessControl
    /// The loop's own timers: heartbeats, compaction, systemd's watchdog and status, the publish socket.
    @exclusivity(unchecked) var timers = TimerQueue<LoopTimer>()
    /// Each peer's turn of read work in a pass, and the requests waiting for the next.
    @exclusivity(unchecked) var turns: RequestTurns
    /// Counters, rates and the throttle of log lines peers can cause.
    @exclusivity(unchecked) var stats: DaemonStats
    /// Compaction, backups and the scan for subscribers that do not read.
    @exclusivity(unchecked) var maintenance: Maintenance
    /// The sockets, libzmq's context and the replies on their way out.
    let network: DaemonNetwork

    /// The request socket.
    var router: ZMQSocket { network.router }
    /// The first frame of the request message being read (its routing id) and its last (the
    /// body): read into again for each message, which is handled before the next is read.
    private let routingFrame = ZMQMessage(), requestFrame = ZMQMessage()
    /// The publish socket, its subscriptions and the prefixes it sequences.
    var publisher: Publisher { network.publisher }
    /// Connections to the request and publish sockets, per peer and in all.
    var connections: ConnectionGuard { network.connections }

    /// Opens the journal with `openJournal` and loads its state, binds the sockets and chooses
    /// the write authority. Holds `lock` from here on: releases it when it fails, or at the end
    /// of ``run()``.
    init(configuration: DaemonConfiguration, lock: InstanceLock,
         openJournal: (DaemonConfiguration) throws(JournalError) -> any JournalStore,
         clock: any DaemonClock, control: LoopControl, notifier: SystemdNotifier?, logger: Logger) throws(DaemonError) {
        self.configuration = configuration
        self.lock = lock
        self.clock = clock
        self.control = control
        self.notifier = notifier
        self.logger = logger
        live = configuration
        stats = DaemonStats(startedAt: clock.now())
        access = AccessControl(policy: configuration.access, limits: configuration.limits)
        maintenance = Maintenance(backups: BackupCopies(directory: configuration.stateDirectory))
        turns = RequestTurns(ownership: LoopOwnership())
        func whileStarting<Result, Failure: Error>(_ what: String, _ body: () throws(Failure) -> Result) throws(Failure) -> Result {
            guard let notifier else { return try body() }
            return try notifier.extendingStartTimeout(what, body)
        }
        let wake = control.wake
        let writes: WritePath
        do {
            let journal = try whileStarting("checking and opening the journal") { () throws(JournalError) in try openJournal(configuration) }
            writes = WritePath(journal: journal, clock: clock, settings: Self.writeSettings(configuration), logger: logger) { wake.wake() }
        } catch {
            lock.release()
            throw DaemonError(error.code == .locked ? .alreadyRunning : .journal, error.description, underlying: error)
        }
        var opened: DaemonNetwork?
        do {
            try whileStarting("loading the current state") { () throws(DaemonError) in
                do throws(JournalError) {
                    try writes.load()
                } catch {
                    throw DaemonError(.journal, error.description, underlying: error)
                }
            }
            let network = try DaemonNetwork(configuration: configuration, watchdog: notifier?.watchdogInterval != nil, now: clock.now(),
                                            replyHighWaterMark: Self.replyHighWaterMark, replyLimits: Self.replyLimits(configuration.limits),
                                            logger: logger)
            opened = network
            authority = try Self.makeAuthority(for: configuration, network: network, writes: writes, logger: logger)
            self.network = network
            self.writes = writes
        } catch {
            opened?.close()
            writes.close()
            lock.release()
            throw error
        }
        writes.attach(self)
    }

    /// Logs the start and tells systemd the daemon is ready (before the loop thread starts).
    func announceStart() {
        maintenance.backups.removeLeftovers()
        stats.journalBytes = writes.pipeline.sizeInBytes
        if writes.pipeline.isCompacting {
            maintenance.compaction.startedAt = StepPacer.monotonicNanoseconds()
            logger.info("resuming the journal compaction an earlier run left unfinished", metadata: [
                "journal.compacted": "\(writes.pipeline.compactedRevision)"])
        }
        if configuration.curveKeys != nil, !configuration.access.rules.contains(where: { if case .key = $0.subject { true } else { false } }) {
            logger.warning("CURVE is on but no 'allow = key:...' rule lists a client key: no tcp client can connect")
        }
        logger.info("beacond started", metadata: [
            "runtime.dir": "\(configuration.runtimeDirectory)", "journal.path": "\(configuration.journalPath)",
            "journal.epoch": "\(writes.epoch)", "journal.head": "\(writes.headRevision)",
            "keys": "\(writes.store.liveCount)", "endpoints": "\((network.requestEndpoints + publisher.endpoints).joined(separator: ","))",
        ])
        notifier?.ready(status: statusLine(writesPerSecond: 0))
    }

    // MARK: Reload and status

    private func applyPendingReload() {
        guard let next = control.takeReload() else { return }
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
            ("metrics_listen", next.metricsListen != live.metricsListen),
            ("upstream", next.upstream != live.upstream),
            ("etcd_endpoints", next.etcd != live.etcd),
        ]
        for (name, changed) in restartOnly where changed {
            logger.warning("setting changed on reload; it takes effect at the next start", metadata: ["setting": "\(name)"])
        }
        live.heartbeatIntervalMilliseconds = next.heartbeatIntervalMilliseconds
        live.retention = next.retention
        live.compactionIntervalSeconds = next.compactionIntervalSeconds
        live.maxBatch = next.maxBatch
        live.sessionTTLMilliseconds = next.sessionTTLMilliseconds
        writes.settings = Self.writeSettings(live)
        let policyChanged = next.access != live.access
        live.access = next.access
        live.limits = next.limits
        let rightsChanged = access.reload(policy: live.access, limits: live.limits)
        connections.setPerPeerLimit(Int(live.limits.connectionsPerPeer))
        network.replyFlows.limits = Self.replyLimits(live.limits)
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
            + servingStatus + waitingStatus
            + authority.statusLine(headRevision: writes.headRevision)
    }

    /// How long a request may wait for its peer's turn before the status line says so.
    static let waitingBoundMilliseconds: UInt64 = 1000

    /// What the status line says when requests have waited for their turn longer than the bound.
    private var waitingStatus: String {
        let waited = turns.oldestWait(at: clock.now())
        return waited > Self.waitingBoundMilliseconds ? ", BEHIND: a request has waited \(waited) ms for its peer's turn" : ""
    }

    /// What the status line says when libzmq has moved no message for more than a watchdog interval.
    private var servingStatus: String {
        guard let servingProbe = network.servingProbe, let interval = notifier?.watchdogInterval else { return "" }
        let silent = servingProbe.lastArrival.milliseconds(until: clock.now())
        return silent > UInt64(interval.components.seconds * 1000) + UInt64(interval.components.attoseconds / 1_000_000_000_000_000)
            ? ", NOT SERVING: libzmq has moved no message for \(silent / 1000) s" : ""
    }

    // MARK: Settings and the publish socket

    /// The write path's settings in `configuration`.
    private static func writeSettings(_ configuration: DaemonConfiguration) -> WritePath.Settings {
        WritePath.Settings(sessionTTLMilliseconds: configuration.sessionTTLMilliseconds, maxBatch: configuration.maxBatch,
                           expiresKeys: configuration.upstream == nil && configuration.etcd == nil)
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
            control.requestStop()
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

    /// Logs connections shed over a limit (throttled: a peer can cause thousands).
    func logShed(_ shed: [ConnectionGuard.Shed]) {
        guard let first = shed.first, let held = stats.logThrottle.admit("connection.shed", now: clock.now()) else { return }
        logger.notice("connections closed at once: over a connection limit", metadata: [
            "peer": "\(first.peer)", "limit": "\(first.verdict == .shedPeerLimit ? "connections_per_peer" : "descriptors")",
            "connections": "\(shed.count)", "held.back": "\(held)"])
    }

    // MARK: Loop

    /// What the loop polls and does in a pass, in the order that keeps the books right:
    /// connections counted before their requests, finished commits answered before new requests.
    /// Built anew when the ``socketGenerations`` change.
    private func makePollRegistry() -> PollRegistry {
        var registry = PollRegistry()
        let wake = control.wake
        registry.onReadable(fileDescriptor: wake.fileDescriptor) { wake.drain() }
        authority.register(in: &registry, host: self)
        for (socket, monitor) in connections.monitors {
            registry.onReadable(monitor.reader) { [unowned self] in drainConnections(socket) }
        }
        registry.onReadable(network.zap) { [unowned self] in drainAuthentication() }
        if let probe = network.servingProbe {
            registry.onReadable(probe.pollable) { [unowned self] in probe.drain(now: clock.now()) }
        }
        registry.everyPass { [unowned self] in writes.completeCommitIfReady() }
        registry.onReadable(publisher.socket) { [unowned self] in drainSubscriptions() }
        registry.onReadable(router, readsRequests: true) { [unowned self] in drainRequests() }
        return registry
    }

    /// Changes when the publish socket is reopened or the write authority replaces its sockets.
    private var socketGenerations: (publisher: Int, authority: Int) { (publisher.generation, authority.socketGeneration) }

    /// The loop: runs on its own thread until a stop is asked, then closes everything.
    func run() {
        nameCurrentThread("beacond-loop")
        writes.ownership.claim()
        turns.claimOwnership()
        do {
            try network.placement?.apply()
        } catch {
            logger.warning("the loop could not join libzmq's I/O thread on its CPU", metadata: ["error": "\(error)"])
        }
        scheduleLoopTimers(from: clock.now())
        var registry = makePollRegistry(), registered = socketGenerations
        /// Whether the last pass read requests (compaction steps yield to them).
        var servedRequests = false
        while !control.isStopRequested {
            let now = clock.now()
            if registered != socketGenerations {
                (registry, registered) = (makePollRegistry(), socketGenerations)
            }
            do {
                try registry.poll(timeoutMilliseconds: pollTimeout(now: now, busy: servedRequests))
            } catch {
                logger.error("poll failed", metadata: ["error": "\(error)"])
                break
            }
            turns.startPass()
            servedRequests = registry.serviceReady()
            if turns.hasWaiting {
                serveWaitingRequests()
                servedRequests = true
            }
            let after = clock.now()
            writes.fireDueTimers(at: after)
            while let (timer, _) = timers.popDue(at: after) { fire(timer, at: after) }
            if compactionStepWait(busy: servedRequests) == 0 { compactionStep() }
            if backupStepWait(busy: servedRequests) == 0 { backupStep() }
            authority.finishPass(host: self)
            if network.replyFlows.hasWaiting { flushKeptReplies() }
            applyPendingReload()
        }
        shutDown()
    }

    /// How long the loop may wait for its sockets: until the next timer, a step of a compaction or
    /// a backup, a kept reply worth offering again, or the write authority's next deadline.
    private func pollTimeout(now: MonotonicTime, busy: Bool) -> Int {
        let deadline = min(timers.nextDeadline ?? .distantFuture, writes.nextDeadline ?? .distantFuture)
        var timeout = Int(min(now.milliseconds(until: deadline), 60_000))
        for wait in [compactionStepWait(busy: busy), backupStepWait(busy: busy)] {
            guard let wait else { continue }
            timeout = wait == 0 ? 0 : min(timeout, Int(wait / 1_000_000) + 1)
        }
        // Kept replies are offered again soon: a connection reading them is not told so.
        if network.replyFlows.hasWaiting { timeout = min(timeout, 2) }
        if turns.hasWaiting { timeout = 0 }  // requests wait for their peers' next turns
        if let wait = authority.pollTimeoutMilliseconds { timeout = min(timeout, wait) }
        return timeout
    }

    /// systemd's watchdog interval in milliseconds, if it watches.
    private var watchdogMilliseconds: UInt64? {
        notifier?.watchdogInterval.map { UInt64($0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000) }
    }

    private func scheduleLoopTimers(from started: MonotonicTime) {
        timers.schedule(.heartbeat, at: started)
        timers.schedule(.compaction, at: started.adding(milliseconds: live.compactionIntervalMilliseconds))
        // systemd: WATCHDOG=1 at half the interval it expects; STATUS= every two seconds.
        if watchdogMilliseconds != nil { timers.schedule(.watchdog, at: started) }
        if notifier != nil { timers.schedule(.status, at: started.adding(milliseconds: 2000)) }
        stats.writesAtLastStatus = stats.writes
    }

    /// Does what `timer` is for, and sets it again if it repeats.
    private func fire(_ timer: LoopTimer, at now: MonotonicTime) {
        switch timer {
        case .heartbeat:
            stats.writeRate.record(stats.writes, at: now.milliseconds)
            stats.publicationRate.record(publisher.published, at: now.milliseconds)
            publisher.tracker.expireLeases(nowMilliseconds: now.milliseconds)
            stats.journalBytes = writes.pipeline.sizeInBytes
            publishHeartbeat()
            network.metrics?.record(statsReply(now: now), refusals: stats.refusals, waitingRequests: turns.waitingCount,
                                    nowMilliseconds: clock.wallMilliseconds())
            timers.schedule(.heartbeat, at: now.adding(milliseconds: UInt64(live.heartbeatIntervalMilliseconds)))
        case .compaction:
            compactByPolicy()
            timers.schedule(.compaction, at: now.adding(milliseconds: live.compactionIntervalMilliseconds))
        case .watchdog:
            if network.servingProbe?.tick(now: now) ?? true {
                notifier?.watchdog()
            } else if let held = stats.logThrottle.admit("watchdog.withheld", now: now) {
                logger.critical("libzmq has stopped moving messages: no WATCHDOG=1 until it does (systemd restarts the daemon)",
                                metadata: ["held.back": "\(held)"])
            }
            timers.schedule(.watchdog, at: now.adding(milliseconds: max((watchdogMilliseconds ?? 0) / 2, 1)))
        case .status:
            let rate = Double(stats.writes - stats.writesAtLastStatus) / 2
            stats.writesAtLastStatus = stats.writes
            notifier?.status(statusLine(writesPerSecond: rate))
            timers.schedule(.status, at: now.adding(milliseconds: 2000))
        case .publisherReset:
            reopenPublisher(reason: "subscriptions were refused while libzmq's pairing was out of step")
        case .publisherRebind:
            bindPublishEndpoints()
        }
    }

    /// Answers the requests already read, then closes everything in order: the write authority,
    /// the journal, the sockets, libzmq's context, the socket files, the lock.
    private func shutDown() {
        authority.shutDown(host: self)
        writes.flush()
        maintenance.backups.removeAll()
        network.close()
        writes.close()
        network.context.terminate()  // the sockets are closed: it ends here, sending what lingers
        DaemonNetwork.removeSocketFiles(of: configuration)
        lock.release()
        logger.info("beacond stopped", metadata: ["journal.head": "\(writes.headRevision)"])
        control.finish()
    }

    /// The last revision to report for a prefix that starts being tracked now. Compaction may
    /// have dropped the tombstone of a later delete, so the compaction point is a floor: a
    /// subscriber that is behind it is told to repair, never told it is complete.
    func initialRevision(prefix: String) -> UInt64 {
        max(writes.store.lastRevision(prefix: prefix), writes.pipeline.compactedRevision)
    }

    private func drainRequests() {
        // Once: each read of a computed field costs a retain and a release.
        let router = self.router, writes = self.writes, routingFrame = self.routingFrame, body = self.requestFrame
        var count = 0
        while count < live.maxBatch {
            let envelope: ReplyEnvelope
            do throws(ZMQError) {
                guard try router.receive(into: routingFrame, flags: .dontWait) else { break }
                // A ROUTER puts the routing id before whatever the peer sent, which is at least one frame.
                guard routingFrame.hasMore else { continue }
                var inner: [[UInt8]] = []
                try router.receive(into: body)
                while body.hasMore {
                    inner.append(body.bytes)
                    try router.receive(into: body)
                }
                envelope = ReplyEnvelope(connection: RoutingID(routingFrame), inner: inner)
            } catch {
                logger.warning("receive failed", metadata: ["error": "\(error)"])
                break
            }
            count += handle(body, envelope: envelope)  // a batch counts as each request it holds
            if writes.pipeline.staged.count >= live.maxBatch {
                // Both buffers are full: let the commit in flight finish, then hand over this batch.
                writes.waitForCommitThenSubmit()
            }
        }
        writes.completeCommitIfReady()
    }
}
