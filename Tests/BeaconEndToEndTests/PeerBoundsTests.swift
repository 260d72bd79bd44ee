import BeaconProtocol
import BeaconWire
import Foundation
import BeaconTestSupport
import Testing

extension AccessTests {
    /// One unprivileged peer made the daemon hold 1.95 million sessions (KeepAlive) and follow
    /// 1.34 million prefixes (snapshot leases); root's latency went from about 1 ms to 21–25 ms.
    @Test("Sessions and snapshot leases are bounded per peer, counted in stats, and root is served meanwhile",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func sessionsAndLeasesAreBoundedPerPeer() throws {
        let (daemon, dir) = try startDaemon([
            "allow = uid:0 read=* write=*", "allow = uid:5001 read=app. write=app.",
            "sessions_per_peer = 40", "leases_per_peer = 30",
        ])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let probe = try AccessProbe(directory: dir)
        let lines = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
            "--runtime-dir", daemon.runtimeDirectory, "--keepalive-flood", "100", "--lease-flood", "100", "--prefix", "app.f",
        ])
        #expect(lines.contains("keepalive-flood OK=40 QUOTA_EXCEEDED=60"), "\(lines)")
        #expect(lines.contains("lease-flood OK=100"), "snapshots are answered, leased or not: \(lines)")
        let stats = try root.stats()
        #expect(stats.sessions == 40)
        #expect(stats.leasesRefused >= 70, "the flood's 70 beyond the limit (and the probe's own snapshot)")
        #expect(stats.trackedPrefixes <= 30, "\(stats.trackedPrefixes) prefixes followed")
        // Root's sessions count apart from the other peer's.
        for index in 0..<30 {
            _ = try root.keepAlive(session: Array("root-\(index)".utf8), ttlMilliseconds: 60_000)
        }
        #expect(try root.stats().sessions == 70)
        // A session the peer holds is still renewed at its limit.
        let renewed = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
            "--runtime-dir", daemon.runtimeDirectory, "--keepalive-flood", "41",
        ])
        #expect(renewed.contains("keepalive-flood OK=40 QUOTA_EXCEEDED=1"), "\(renewed)")
    }
}
