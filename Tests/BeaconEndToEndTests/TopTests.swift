import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// `beacon top` as an operator runs it: in a real terminal (tmux), and into a pipe.
@Suite(.timeLimit(.minutes(2)), .offThePool)
struct TopTests {
    @Test("beacon top writes one JSON object per interval into a pipe")
    func topIntoAPipeWritesJSONLines() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for index in 0..<10 { _ = try client.put("top.k\(index)", .with { $0.intValue = Int64(index) }) }
        let run = try await beacon(["top", "--count", "3", "--interval", "100"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.lines.count == 3, "\(run.stdout)")
        for index in 0..<3 {
            let view = try run.json(index)
            #expect(view["keys"] as? Int == 10 && view["head_revision"] as? Int == 10, "\(view)")
            #expect(view["writes_per_second"] != nil && view["subscriber_connections"] != nil && view["journal_bytes"] != nil)
        }
        let usage = try await beacon(["top", "--interval", "5"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(usage.status == 64 && usage.stderr.contains("--interval must be 100 to 60000 ms"))
    }

    @Test("beacon top draws its view in place in a terminal and follows the daemon",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/tmux"), "needs tmux (make deps)"))
    func topInATerminalRedrawsInPlace() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try client.put("top.first", .with { $0.intValue = 1 })
        let socket = dir + "/tmux.sock", session = "top"
        /// Runs a tmux command on the test's own server and returns what it printed.
        func tmux(_ arguments: [String]) throws -> String {
            let run = try Process.runToEnd("/usr/bin/tmux", ["-S", socket] + arguments, limitSeconds: 20)
            #expect(run.exitedInTime)
            return run.stdout
        }
        // The command that starts the server is waited for only once the server is gone: the
        // server inherits what Foundation watches for that command's end.
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/tmux")
        server.arguments = ["-S", socket, "new-session", "-d", "-s", session, "-x", "200", "-y", "30",
                            "\(try binary("beacon")) top --interval 100 --runtime-dir \(daemon.runtimeDirectory)"]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.runSerially()
        defer {
            _ = try? tmux(["kill-server"])
            server.waitUntilExit(orKillAfterSeconds: 10)
        }
        var screen = ""
        #expect(try waitUntil(seconds: 30) {
            screen = try tmux(["capture-pane", "-p", "-t", session])
            return screen.contains("keys 1 ")
        }, "the view never showed: \(screen)")
        for index in 0..<9 { _ = try client.put("top.k\(index)", .with { $0.intValue = Int64(index) }) }
        #expect(try waitUntil(seconds: 30) {
            screen = try tmux(["capture-pane", "-p", "-t", session])
            return screen.contains("keys 10 ")
        }, "the view did not follow the writes: \(screen)")
        // Drawn in place: one view on the screen, not one below the other.
        #expect(screen.components(separatedBy: "beacond  revision").count == 2, "\(screen)")
        #expect(screen.contains("writes/s") && screen.contains("connections: requests"))
    }
}
