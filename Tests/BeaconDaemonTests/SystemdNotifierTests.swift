@testable import BeaconDaemon
import BeaconTestSupport
import BeaconWire
import BeaconZMQ
import Foundation
import Logging
import Testing

/// A datagram socket in systemd's place; returns every notification that arrives until none
/// has for `quiet`.
private final class DatagramSink {
    let path: String
    private let fd: Int32

    init(directory: String) throws {
        path = directory + "/notify.sock"
        fd = try #require(boundDatagramSocket(at: path), "cannot bind \(path)")
    }

    deinit { close(fd) }

    /// Reads notifications until none has come for `quiet` milliseconds (0: none is waiting), or `limit` came.
    func drain(quiet milliseconds: Int, limit: Int = .max) -> [String] {
        var timeout = timeval(tv_sec: 0, tv_usec: max(Int(milliseconds), 1) * 1000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var messages: [String] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while messages.count < limit {
            let count = recv(fd, &buffer, buffer.count, milliseconds == 0 ? Int32(MSG_DONTWAIT) : 0)
            guard count > 0 else { return messages }
            messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
        }
        return messages
    }
}

private struct OpeningFailed: Error {}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct SystemdNotifierTests {
    /// A start-up step that lasts until `count` extensions arrived (or 30 s passed): a condition,
    /// not a length of time, so a loaded machine that schedules the extender late changes nothing.
    private static func stepUntil(_ count: Int, from sink: DatagramSink) -> [String] {
        var received: [String] = []
        let deadline = ContinuousClock.now + .seconds(30)
        while received.count < count && ContinuousClock.now < deadline {
            received += sink.drain(quiet: 100, limit: count - received.count)
        }
        return received
    }

    /// The loop thread sends these: if the socket's reader stops reading, a blocking send would
    /// stop the loop with it (as it did for a daemon a test left running with nobody reading).
    @Test func aSocketNobodyReadsNeverBlocksTheSender() throws {
        let sink = try DatagramSink(directory: try temporaryDirectory())
        let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": sink.path]))
        // An unread datagram socket queues a few hundred small datagrams at most.
        var sent = 0
        while sent < 100_000 && notifier.send("STATUS=serving") { sent += 1 }
        #expect(sent < 100_000, "a full queue refuses the datagram")
        #expect(sink.drain(quiet: 0).count == sent, "every datagram sent was queued whole")
        #expect(notifier.send("STATUS=serving"), "once read, the queue takes notifications again")
    }

    @Test func aSlowStartUpStepKeepsExtendingTheStartTimeoutUntilItEnds() throws {
        let sink = try DatagramSink(directory: try temporaryDirectory())
        let notifier = try #require(SystemdNotifier(environment: ["NOTIFY_SOCKET": sink.path]))

        let during = notifier.extendingStartTimeout("checking and opening the journal", every: .milliseconds(40)) {
            Self.stepUntil(3, from: sink)
        }
        #expect(during.count == 3, "extensions keep coming while the step lasts: \(during)")
        for message in during {
            #expect(message.hasPrefix("EXTEND_TIMEOUT_USEC=120000\nSTATUS=checking and opening the journal ("), "\(message)")
        }
        // Once the step returns, no extension is sent. Datagrams queue as they are sent: what
        // went out before the return (while the step was ending, however late the machine ran
        // it) is waiting now, and nothing may come after it.
        _ = sink.drain(quiet: 0)
        #expect(sink.drain(quiet: 200).isEmpty, "an extension was sent after the step returned")

        // A quick step sends nothing; an error passes through, and the extensions stop with it.
        #expect(notifier.extendingStartTimeout("loading", every: .seconds(10)) { "quick" } == "quick")
        #expect(sink.drain(quiet: 0).isEmpty)
        var beforeFailure: [String] = []
        #expect(throws: OpeningFailed.self) {
            try notifier.extendingStartTimeout("opening", every: .milliseconds(40)) { () throws(OpeningFailed) in
                beforeFailure = Self.stepUntil(1, from: sink)
                throw OpeningFailed()
            }
        }
        #expect(beforeFailure.count == 1 && beforeFailure.allSatisfy { $0.contains("STATUS=opening (") }, "\(beforeFailure)")
        _ = sink.drain(quiet: 0)
        #expect(sink.drain(quiet: 200).isEmpty, "the extensions stop with the error")
    }
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct WatchdogTests {
    /// The watchdog proved only that the loop ran: with libzmq's I/O thread blocked for good (as a
    /// monitor nobody read once made it), `WATCHDOG=1` kept arriving while no request was answered.
    @Test func aDaemonWhoseIOThreadIsStuckWithholdsTheWatchdog() async throws {
        let directory = try temporaryDirectory()
        let sink = try DatagramSink(directory: directory)
        var configuration = DaemonConfiguration(runtimeDirectory: directory + "/run", stateDirectory: directory + "/state")
        configuration.heartbeatIntervalMilliseconds = 100
        configuration.loopCPU = .off  // as TestDaemon's
        let server = try BeaconServer(configuration: configuration, logger: Logger(label: "watchdog-test") { _ in SwiftLogNoOpLogHandler() })
        server.notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": sink.path, "WATCHDOG_USEC": "200000"])
        try server.start()
        var messages: [String] = []
        /// Reads notifications until one satisfies `condition` (30 s at most); returns those read.
        func readUntil(_ condition: (String) -> Bool) -> [String] {
            var read: [String] = []
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                let next = sink.drain(quiet: 50, limit: 1)
                read += next
                if next.contains(where: condition) { break }
            }
            messages += read
            return read
        }
        for _ in 0..<3 {
            #expect(readUntil { $0 == "WATCHDOG=1" }.contains("WATCHDOG=1"), "a serving daemon sends WATCHDOG=1: \(messages)")
        }

        // Block libzmq's I/O thread: a socket of the daemon's context reports connections to a
        // monitor whose reader is gone (libzmq notices the reader gone after an event or a few).
        let stalled = try ZMQSocket(try #require(server.running).network.context, type: .pull)
        let monitor = try stalled.monitor(events: [.accepted, .disconnected], name: "watchdog-stall-\(UInt64.random(in: 0 ... .max))")
        monitor.reader.close()
        let stallPath = directory + "/stall"
        try stalled.bind("ipc://" + stallPath)
        let client = try WireClient.patient(runtimeDirectory: configuration.runtimeDirectory)
        var stuck = false
        for _ in 0..<200 where !stuck {
            connectAndClose(unixSocketAt: stallPath)
            // A ping late on a loaded machine is not a blocked thread: a miss is checked again, longer.
            stuck = (try? client.ping(timeoutMilliseconds: 1000)) == nil && (try? client.ping(timeoutMilliseconds: 10_000)) == nil
        }
        try #require(stuck, "the I/O thread is blocked: requests go unanswered")

        // The loop goes on: STATUS= every 2 s says that it does not serve, and no WATCHDOG=1 comes.
        let untilNoticed = readUntil { $0.contains("NOT SERVING") }
        #expect(untilNoticed.contains { $0.contains("NOT SERVING: libzmq has moved no message") }, "\(untilNoticed)")
        let whileStuck = readUntil { $0.hasPrefix("STATUS=") }
        #expect(whileStuck.last?.contains("NOT SERVING") == true, "\(whileStuck)")
        #expect(!whileStuck.contains("WATCHDOG=1"), "no WATCHDOG=1 while nothing moves: \(whileStuck)")
        // libzmq cannot be unblocked from here, nor the stalled socket closed (that waits for the
        // blocked thread): the daemon is left as systemd would find it, until the test process ends.
        _ = Unmanaged.passRetained(monitor)
        _ = Unmanaged.passRetained(stalled)
    }
}

/// Connects a plain stream socket to the unix socket at `path` and closes it at once.
private func connectAndClose(unixSocketAt path: String) {
    let fd = UnixSocketAddress(path: path)?.connectStream() ?? -1
    if fd >= 0 { close(fd) }
}
