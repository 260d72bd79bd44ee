import Logging
import ServiceLifecycle
import UnixSignals

/// SIGHUP, trapped. Create it before ``BeaconServer/start()``: a SIGHUP that arrives before it
/// is trapped ends the process (the default action), and systemd's `ExecReload=` or a test may
/// send one as soon as the daemon answers. Once trapped, a SIGHUP is queued until the service
/// reads it.
public struct ReloadSignals: Sendable {
    let signals: UnixSignalsSequence

    /// Traps SIGHUP from now on.
    public init() async {
        signals = await UnixSignalsSequence(trapping: .sighup)
    }
}

/// SIGTERM and SIGINT, trapped from the moment a value is made: a stop asked for while the
/// server starts (after it answers its first request, before the service group traps them) is
/// then a clean stop, not the end of the process with its sockets and writes left behind.
public struct StopSignals: Sendable {
    let signals: UnixSignalsSequence

    /// Traps SIGTERM and SIGINT from now on.
    public init() async {
        signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
    }
}

/// Runs a ``BeaconServer`` as a swift-service-lifecycle `Service`: started by `run()` unless it
/// was started already (so a caller can report start-up failures first), stopped cleanly
/// (pending writes committed and answered, journal closed) on graceful shutdown, and reloaded
/// on SIGHUP when it knows how to load the configuration.
public struct BeaconDaemonService: Service {
    /// The server this service runs.
    public let server: BeaconServer
    private let notifier: SystemdNotifier?
    private let logger: Logger
    private let loadConfiguration: (@Sendable () throws -> DaemonConfiguration)?
    private let reloadSignals: ReloadSignals?
    private let stopSignals: StopSignals?

    /// Creates a service for `server`.
    /// - Parameters:
    ///   - notifier: told of reloads (`RELOADING=1`, then `READY=1`).
    ///   - reloadSignals: SIGHUP, trapped before the server started; `nil`: trapped when the
    ///     service runs, which leaves a window in which a SIGHUP ends the process.
    ///   - stopSignals: SIGTERM and SIGINT, trapped before the server started: each stops it
    ///     cleanly; `nil`: only the service group's graceful shutdown does.
    ///   - loadConfiguration: reads the configuration again on SIGHUP; a configuration that does
    ///     not load is logged and the running one is kept. `nil`: SIGHUP is not handled.
    public init(server: BeaconServer, notifier: SystemdNotifier? = nil, logger: Logger = Logger(label: "beacond"),
                reloadSignals: ReloadSignals? = nil, stopSignals: StopSignals? = nil,
                loadConfiguration: (@Sendable () throws -> DaemonConfiguration)? = nil) {
        self.server = server
        self.notifier = notifier
        self.logger = logger
        self.reloadSignals = reloadSignals
        self.stopSignals = stopSignals
        self.loadConfiguration = loadConfiguration
    }

    /// Starts the server and returns once it has stopped after a graceful shutdown.
    /// - Throws: ``DaemonError`` when the server cannot start.
    public func run() async throws {
        if !server.isStarted { try server.start() }
        let server = server
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await server.waitUntilStopped() }
                if let stopSignals {
                    group.addTask {
                        for await _ in stopSignals.signals {
                            server.requestStop()
                            break
                        }
                        await server.waitUntilStopped()
                    }
                }
                if let loadConfiguration {
                    let notifier = notifier
                    let logger = logger
                    let reloadSignals = reloadSignals
                    group.addTask {
                        let signals = if let reloadSignals { reloadSignals.signals } else { await ReloadSignals().signals }
                        for await _ in signals {
                            notifier?.reloading()
                            do {
                                server.requestReload(try loadConfiguration())
                            } catch {
                                logger.error("reload refused; the running configuration stays", metadata: ["error": "\(error)"])
                                notifier?.ready(status: "reload refused: \(error); running with the previous configuration")
                            }
                        }
                    }
                }
                await group.next()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            server.requestStop()
        }
    }
}
