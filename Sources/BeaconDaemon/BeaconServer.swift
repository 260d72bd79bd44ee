import BeaconJournal
import Foundation
import Logging

/// The authoritative Beacon server: binds the request and publish sockets, orders and journals
/// writes, publishes diffs and heartbeats, and serves reads, snapshots, deltas and history.
///
/// This is the server's public face and lifecycle. ``start()`` builds the running daemon (a
/// `ServerLoop`: journal open, state loaded, sockets bound) and starts its loop thread, which
/// owns the sockets and the in-memory state from then on. The journal belongs to the write
/// pipeline (`WritePipeline`), which hands it to the loop only while no batch is committing on
/// the commit thread. Other threads talk to the server only through ``requestStop()``,
/// ``requestReload(_:)`` and ``waitUntilStopped()``.
public final class BeaconServer: @unchecked Sendable {
    /// The configuration the server started with.
    public let configuration: DaemonConfiguration
    /// Where the server reports readiness, status and watchdog keep-alives (systemd); set it
    /// before ``start()``.
    public var notifier: SystemdNotifier?
    private let logger: Logger
    /// Where the daemon reads the time.
    private let clock: any DaemonClock
    /// What other threads use to stop, reload and wait for the loop.
    private let control: LoopControl
    /// Created, or started.
    private var lifecycle: Lifecycle

    private enum Lifecycle {
        /// Not started: the journal is opened with this at ``start()``.
        case created(openJournal: (DaemonConfiguration) throws(JournalError) -> any JournalStore)
        /// Started: the running daemon, which its loop thread owns (until it stopped).
        case started(ServerLoop)
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
        self.logger = logger
        lifecycle = .created(openJournal: openJournal)
        do {
            control = try LoopControl()
        } catch {
            throw DaemonError(.startup, "\(error)")
        }
    }

    /// Opens the journal, binds the sockets and starts the loop thread.
    ///
    /// When this returns the sockets accept connections and the journal is open.
    /// - Throws: ``DaemonError`` when directories, the lock, the journal or a socket fail.
    public func start() throws(DaemonError) {
        guard case .created(let openJournal) = lifecycle else { preconditionFailure("a server starts once") }
        try Self.makeDirectory(configuration.runtimeDirectory, mode: 0o755)
        try Self.makeDirectory(configuration.stateDirectory, mode: 0o750)
        let lock = try InstanceLock(path: configuration.runtimeDirectory + "/beacond.lock")
        let loop = try ServerLoop(configuration: configuration, lock: lock, openJournal: openJournal, clock: clock,
                                  control: control, notifier: notifier, logger: logger)
        lifecycle = .started(loop)
        loop.announceStart()
        let thread = Thread { loop.run() }
        thread.name = "beacond-loop"
        thread.stackSize = 8 << 20
        control.markStarted()
        thread.start()
    }

    /// The running daemon, once started (for tests that reach into its parts).
    var running: ServerLoop? {
        guard case .started(let loop) = lifecycle else { return nil }
        return loop
    }

    /// Whether ``start()`` has succeeded (the loop is running or has run).
    public var isStarted: Bool { control.isStarted }

    /// Asks the loop to finish: pending writes are committed and answered, sockets and journal
    /// closed. Safe from any thread; returns at once.
    public func requestStop() {
        notifier?.stopping()
        control.requestStop()
    }

    /// Applies the reloadable settings of `configuration` (heartbeat interval, retention,
    /// compaction interval, batch size, session time to live) on the loop, then reports
    /// readiness again. Settings that need a restart (directories, endpoints, durability,
    /// socket mode) are logged and left as they are. Safe from any thread.
    public func requestReload(_ configuration: DaemonConfiguration) {
        control.requestReload(configuration)
    }

    /// Waits until the loop has finished and everything is closed.
    public func waitUntilStopped() async {
        await control.waitUntilFinished()
    }

    static func makeDirectory(_ path: String, mode: Int) throws(DaemonError) {
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: mode])
        } catch {
            throw DaemonError(.startup, "cannot create directory \(path): \(error.localizedDescription)")
        }
    }
}
