import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// Where Debian's libfaketime is (package `faketime`): it steps a process's wall clock while
/// leaving its monotonic clock alone, as an NTP correction or a board without a real-time clock does.
let libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

/// Intervals, deadlines and rates run on the monotonic clock: a wall-clock step back or forward
/// neither stops heartbeats or the watchdog, nor ends sessions or TTLs early, nor traps.
@Suite(.timeLimit(.minutes(4)), .offThePool)
struct ClockStepTests {
    @Test(.enabled(if: ProcessInfo.processInfo.environment["BEACON_SANITIZED_RUN"] == nil,
                   "libfaketime and ThreadSanitizer both intercept the clock: an instrumented beacond does not start under it"))
    func aWallClockStepLeavesHeartbeatsWatchdogSessionsAndTTLsAlone() async throws {
        try #require(FileManager.default.fileExists(atPath: libfaketime), "install Debian's faketime package")
        let dir = try temporaryDirectory()
        let offsetFile = dir + "/faketime.rc"
        func stepClock(_ offset: String) throws { try (offset + "\n").write(toFile: offsetFile, atomically: true, encoding: .utf8) }
        try stepClock("+0")
        let listener = try NotifyListener(path: dir + "/notify.sock")
        defer { listener.stop() }
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", environment: [
            "LD_PRELOAD": libfaketime, "FAKETIME_TIMESTAMP_FILE": offsetFile, "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "NOTIFY_SOCKET": listener.path, "WATCHDOG_USEC": "1000000",
        ], launcher: "/usr/bin/env")  // seen: a Swift program that is the first under libfaketime loses its arguments
        defer { daemon.stop(signal: SIGKILL) }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let tenMinutes: UInt64 = 600_000
        _ = try client.put("s.bound", .with { $0.intValue = 1 }, session: Array("writer".utf8))
        _ = try client.keepAlive(session: Array("writer".utf8), ttlMilliseconds: UInt32(tenMinutes))
        _ = try client.put("s.ttl", .with { $0.intValue = 2 }, ttlMilliseconds: tenMinutes)
        try client.subscribe("s.")

        /// Heartbeats received in the next `milliseconds` (the daemon sends one each 100 ms).
        func heartbeats(within milliseconds: Int) throws -> Int {
            let end = ContinuousClock.now + .milliseconds(milliseconds)
            var count = 0
            while ContinuousClock.now < end {
                let left = Int((end - ContinuousClock.now).components.attoseconds / 1_000_000_000_000_000) + 1
                if case .heartbeat = try client.receivePublication(timeoutMilliseconds: left) { count += 1 }
            }
            return count
        }
        #expect(try heartbeats(within: 1000) >= 5, "heartbeats before any step")
        for offset in ["-120", "+1200", "-3600", "+0"] {
            try stepClock(offset)
            let watchdogBefore = listener.messages.count { $0.contains("WATCHDOG=1") }
            let beats = try heartbeats(within: 1500)
            #expect(beats >= 7, "after stepping the wall clock by \(offset) s: \(beats) heartbeats in 1.5 s")
            let watchdog = listener.messages.count { $0.contains("WATCHDOG=1") } - watchdogBefore
            #expect(watchdog >= 2, "after stepping the wall clock by \(offset) s: \(watchdog) watchdog pings in 1.5 s")
            let stats = try client.stats()  // its uptime once trapped on a step back
            #expect(stats.keys == 2, "after stepping by \(offset) s")
            #expect(try client.get("s.bound").value.intValue == 1, "the session-bound key after stepping by \(offset) s")
            #expect(try client.get("s.ttl").value.intValue == 2, "the 10-minute TTL key after stepping by \(offset) s")
            #expect(daemon.process.isRunning)
        }
        // Ending the session still ends it at once.
        _ = try client.keepAlive(session: Array("writer".utf8), ttlMilliseconds: 0)
        let gone = try? client.get("s.bound")
        #expect(gone == nil)
    }
}
