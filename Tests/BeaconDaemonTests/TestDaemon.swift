import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation
import Logging
import BeaconTestSupport
import Testing

func temporaryDirectory() throws -> String {
    try makeTestDirectory("bdmn")
}

/// A daemon running in this process on its own temporary directories.
final class TestDaemon {
    let server: BeaconServer
    let directory: String
    var configuration: DaemonConfiguration { server.configuration }

    /// A daemon on new temporary directories, or on those of an earlier one (`reopening`).
    /// - Parameter clock: the daemon's clock (a ``ManualClock`` moves only when the test moves
    ///   it: after moving it, any request makes the daemon fire what came due); the machine's by default.
    /// - Parameter journal: wraps the daemon's journal (one that fails or holds commits, say).
    init(reopening existing: String? = nil, clock: (any DaemonClock)? = nil,
         _ configure: (inout DaemonConfiguration) -> Void = { _ in },
         journal wrap: ((Journal) -> any JournalStore)? = nil) throws {
        directory = try existing ?? temporaryDirectory()
        var configuration = DaemonConfiguration(runtimeDirectory: directory + "/run", stateDirectory: directory + "/state")
        configuration.heartbeatIntervalMilliseconds = 100
        // The suite runs many daemons at once: with `auto` they would all take the same CPU as
        // batch work, beside whatever else runs there, while the other CPU may idle.
        configuration.loopCPU = .off
        configure(&configuration)
        var logger = Logger(label: "test-beacond")
        logger.logLevel = .critical
        server = try BeaconServer(configuration: configuration, logger: logger, clock: clock ?? SystemClock.shared) { config throws(JournalError) in
            let journal = try Journal(path: config.journalPath, durability: config.durability)
            return wrap?(journal) ?? journal
        }
        // A child another test is starting holds a copy of this process's descriptors until it
        // execs, the instance lock of a daemon stopped here a moment ago among them: the lock
        // is that daemon's until then. Starting on its directories waits for that (10 s at most).
        try Self.start(server, patientFor: 10)
    }

    /// Starts `server`, trying again while its directories seem to be in use, for `seconds` at most.
    private static func start(_ server: BeaconServer, patientFor seconds: Double) throws {
        let deadline = Date().addingTimeInterval(seconds)
        var result = Result { () throws(DaemonError) in try server.start() }
        while case .failure(let error) = result, error.code == .alreadyRunning, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.005)
            result = Result { () throws(DaemonError) in try server.start() }
        }
        try result.get()
    }

    func client() throws -> WireClient {
        try WireClient.patient(runtimeDirectory: configuration.runtimeDirectory)
    }

    func stop() async {
        server.requestStop()
        await server.waitUntilStopped()
    }

    /// Stops the daemon and waits, blocking the calling thread (for `defer`, which cannot await).
    /// Stopping twice is harmless.
    func stopNow() {
        server.requestStop()
        let stopped = DispatchSemaphore(value: 0)
        let server = self.server
        // On a thread of its own, not the cooperative pool the caller may be blocking.
        Task.detached(executorPreference: ThreadPerJobExecutor.shared) {
            await server.waitUntilStopped()
            stopped.signal()
        }
        stopped.wait()
    }
}

extension Beacon_V1_Value {
    static func int(_ value: Int64) -> Self { .with { $0.intValue = value } }
    static func string(_ value: String) -> Self { .with { $0.stringValue = value } }
}

func putOp(_ key: String, _ value: Beacon_V1_Value, ifVersion: UInt64? = nil, createOnly: Bool = false) -> Beacon_V1_TxnOp {
    .with {
        $0.put.key = key
        $0.put.value = value
        if let ifVersion { $0.put.ifVersion = ifVersion }
        $0.put.createOnly = createOnly
    }
}

func deleteOp(_ key: String) -> Beacon_V1_TxnOp {
    .with { $0.delete.key = key }
}

/// Expects `body` to fail with the daemon's error `code`; returns that error.
@discardableResult
func expectRejection(_ code: Beacon_V1_Error.Code, sourceLocation: SourceLocation = #_sourceLocation,
                     _ body: () throws -> Void) -> Beacon_V1_Error? {
    do {
        try body()
        Issue.record("expected \(code), the call succeeded", sourceLocation: sourceLocation)
        return nil
    } catch {
        guard let error = error as? WireError else {
            Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
            return nil
        }
        #expect(error.kind == .rejected, "\(error)", sourceLocation: sourceLocation)
        #expect(error.reply?.code == code, "\(error)", sourceLocation: sourceLocation)
        return error.reply
    }
}

/// Receives publications until `predicate` accepts one or `timeoutMilliseconds` passes.
func awaitPublication(_ client: WireClient, timeoutMilliseconds: Int = 5000,
                      where predicate: (WireClient.Publication) -> Bool) throws -> WireClient.Publication? {
    let deadline = Date().addingTimeInterval(Double(timeoutMilliseconds) / 1000)
    while Date() < deadline {
        if let publication = try client.receivePublication(timeoutMilliseconds: 100), predicate(publication) {
            return publication
        }
    }
    return nil
}

/// Waits for a heartbeat that lists `prefix`: from then on the daemon sequences it, so diffs under
/// it carry their prefix mark.
func awaitSequencing(_ client: WireClient, prefix: String) throws {
    _ = try awaitPublication(client) {
        if case .heartbeat(let h) = $0 { return h.prefixes.contains { $0.prefix == prefix } } else { return false }
    }
}
