import ServiceLifecycle

/// Runs a ``BeaconServer`` as a swift-service-lifecycle `Service`: started by `run()` unless it
/// was started already (so a caller can report start-up failures first), stopped cleanly
/// (pending writes committed and answered, journal closed) on graceful shutdown.
public struct BeaconDaemonService: Service {
    /// The server this service runs.
    public let server: BeaconServer

    /// Creates a service for `server`.
    public init(server: BeaconServer) {
        self.server = server
    }

    /// Starts the server and returns once it has stopped after a graceful shutdown.
    /// - Throws: ``DaemonError`` when the server cannot start.
    public func run() async throws {
        if !server.isStarted { try server.start() }
        await withGracefulShutdownHandler {
            await server.waitUntilStopped()
        } onGracefulShutdown: {
            server.requestStop()
        }
    }
}
