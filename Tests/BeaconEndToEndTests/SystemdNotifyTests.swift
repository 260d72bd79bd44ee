import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Plays systemd's part: a datagram socket that collects what the daemon notifies.
final class NotifyListener: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let lock = NSLock()
    private var received: [(at: ContinuousClock.Instant, message: String)] = []
    private var stopped = false

    init(path: String) throws {
        self.path = path
        fd = try #require(boundDatagramSocket(at: path), "cannot bind \(path)")
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !lock.withLock({ stopped }) {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count > 0 {
                    let message = String(decoding: buffer[0..<count], as: UTF8.self)
                    lock.withLock { received.append((.now, message)) }
                }
            }
        }
    }

    var messages: [String] { lock.withLock { received.map(\.message) } }

    /// Waits for a message (after the first `after` ones) that contains `text`; returns its index.
    /// - Throws: when none arrives in time (a slow machine gets a generous default).
    func waitFor(_ text: String, after: Int = 0, timeout: Duration = .seconds(60)) async throws -> Int {
        var found: Int?
        _ = await pollUntil(within: timeout, every: .milliseconds(10)) {
            let all = messages
            found = all.indices.dropFirst(after).first { all[$0].contains(text) }
            return found != nil
        }
        if let found { return found }
        throw NotificationMissing(text: text, after: after, received: messages)
    }

    struct NotificationMissing: Error, CustomStringConvertible {
        var text: String
        var after: Int
        var received: [String]
        var description: String { "no notification containing \(text) after #\(after); got \(received)" }
    }

    func stop() {
        lock.withLock { stopped = true }
        usleep(150_000)
        close(fd)
    }
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct SystemdNotifyTests {
    @Test func aRelaysStatusNamesItsUpstreamTheLagAndAnUnreachableUpstream() async throws {
        let dir = try temporaryDirectory()
        let listener = try NotifyListener(path: dir + "/notify.sock")
        defer { listener.stop() }
        let primary = try DaemonProcess(runtimeDirectory: dir + "/primary-run", stateDirectory: dir + "/primary-state")
        let upstream = "ipc://\(dir)/primary-run/beacon.req"
        _ = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory).put("k", .with { $0.intValue = 1 })
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacond"))
        process.arguments = ["--runtime-dir", dir + "/run", "--state-dir", dir + "/state", "--heartbeat-ms", "100",
                             "--upstream", upstream, "--log-level", "error"]
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = listener.path
        process.environment = environment
        process.standardError = FileHandle.nullDevice
        try process.runSerially()
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        _ = try await listener.waitFor("relay of \(upstream): upstream head 1, 0 behind")
        primary.stop(signal: SIGKILL)
        _ = try await listener.waitFor("relay of \(upstream): UPSTREAM UNREACHABLE")
    }

    @Test func theDaemonNotifiesReadyStatusWatchdogReloadingAndStopping() async throws {
        let dir = try temporaryDirectory()
        let listener = try NotifyListener(path: dir + "/notify.sock")
        defer { listener.stop() }
        let config = dir + "/beacond.conf"
        try "heartbeat_ms = 100\n".write(toFile: config, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacond"))
        process.arguments = ["--runtime-dir", dir + "/run", "--state-dir", dir + "/state", "--config", config, "--log-level", "error"]
        var environment = ProcessInfo.processInfo.environment
        environment["NOTIFY_SOCKET"] = listener.path
        environment["WATCHDOG_USEC"] = "400000"
        process.environment = environment
        process.standardError = FileHandle.nullDevice
        try process.runSerially()

        // READY=1 comes once the sockets answer: a ping succeeds at once.
        let ready = try await listener.waitFor("READY=1")
        let client = try WireClient.patient(runtimeDirectory: dir + "/run")
        #expect(try client.ping(timeoutMilliseconds: 500).heartbeatIntervalMs == 100)
        #expect(listener.messages[ready].contains("STATUS=revision 0, 0 keys"))

        // Keep-alives at half the watchdog interval, and live figures in STATUS=.
        _ = try client.put("k.a", .with { $0.intValue = 1 })
        _ = try client.put("k.b", .with { $0.intValue = 2 })
        let firstWatchdog = try await listener.waitFor("WATCHDOG=1")
        _ = try await listener.waitFor("WATCHDOG=1", after: firstWatchdog + 1)
        _ = try await listener.waitFor("STATUS=revision 2, 2 keys")

        // SIGHUP: RELOADING=1 (with the monotonic time), then READY=1, and the new setting applies.
        try "heartbeat_ms = 250\n".write(toFile: config, atomically: true, encoding: .utf8)
        let before = listener.messages.count
        kill(process.processIdentifier, SIGHUP)
        let reloading = try await listener.waitFor("RELOADING=1", after: before)
        #expect(listener.messages[reloading].contains("MONOTONIC_USEC="))
        _ = try await listener.waitFor("READY=1", after: reloading)
        #expect(try client.ping().heartbeatIntervalMs == 250)

        // A bad file on reload is refused; the running configuration stays.
        try "heartbeat_ms = often\n".write(toFile: config, atomically: true, encoding: .utf8)
        let beforeBad = listener.messages.count
        kill(process.processIdentifier, SIGHUP)
        let refused = try await listener.waitFor("READY=1", after: beforeBad)
        #expect(listener.messages[refused].contains("reload refused"))
        #expect(try client.ping().heartbeatIntervalMs == 250)

        // SIGTERM: STOPPING=1, then a clean exit.
        let beforeStop = listener.messages.count
        kill(process.processIdentifier, SIGTERM)
        _ = try await listener.waitFor("STOPPING=1", after: beforeStop)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }
}
