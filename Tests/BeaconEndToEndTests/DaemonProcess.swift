import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing


func temporaryDirectory() throws -> String {
    try makeTestDirectory("be2e")
}

/// Where the built `beacond` and `beacon` are: `$BEACON_BIN_DIR`, or beside the test bundle.
func binary(_ name: String) throws -> String {
    if let dir = ProcessInfo.processInfo.environment["BEACON_BIN_DIR"] { return dir + "/" + name }
    var dir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = dir.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    let fallback = FileManager.default.currentDirectoryPath + "/.build/debug/" + name
    try #require(FileManager.default.isExecutableFile(atPath: fallback), "build \(name) first (swift build)")
    return fallback
}

/// A real `beacond` process on its own directories.
final class DaemonProcess {
    let process = Process()
    let runtimeDirectory: String
    let stateDirectory: String
    let stderrPath: String

    /// The endpoints the daemon bound, as it lists them in its runtime directory
    /// (`beacond.endpoints`): a tcp port the kernel chose (`:*`) is the port it gave.
    func boundEndpoints() throws -> (request: [String], publish: [String]) {
        let text = try String(contentsOfFile: runtimeDirectory + "/beacond.endpoints", encoding: .utf8)
        var request: [String] = [], publish: [String] = []
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2 else { continue }
            if parts[0] == "request" { request.append(parts[1]) } else if parts[0] == "publish" { publish.append(parts[1]) }
        }
        return (request, publish)
    }

    /// The first loopback tcp endpoint the daemon bound for requests and for publications.
    func tcpEndpoints() throws -> (request: String, publish: String) {
        let bound = try boundEndpoints()
        return (try #require(bound.request.first { $0.hasPrefix("tcp://") }, "no tcp request endpoint in \(bound)"),
                try #require(bound.publish.first { $0.hasPrefix("tcp://") }, "no tcp publish endpoint in \(bound)"))
    }

    /// Launches beacond; with `waitUntilReady`, returns once it answers a ping.
    /// - Parameters:
    ///   - environment: variables set for beacond on top of this process's own.
    ///   - launcher: a command that runs beacond with its arguments (`/usr/bin/env`, say), given
    ///     `launcherArguments` first; none: beacond itself.
    init(runtimeDirectory: String, stateDirectory: String, extraArguments: [String] = [], environment: [String: String] = [:],
         launcher: String? = nil, launcherArguments: [String] = [], waitUntilReady: Bool = true) throws {
        self.runtimeDirectory = runtimeDirectory
        self.stateDirectory = stateDirectory
        stderrPath = runtimeDirectory + ".stderr"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        // `--loop-cpu off`: the suite runs many daemons at once, and with `auto` they would all
        // take the same CPU as batch work (beside the other tests' busiest daemon, or a busy
        // loop), while the other CPU may idle. A test that wants the placement asks for it.
        let arguments = ["--runtime-dir", runtimeDirectory, "--state-dir", stateDirectory, "--heartbeat-ms", "100",
                         "--loop-cpu", "off"] + extraArguments
        if let launcher {
            process.executableURL = URL(fileURLWithPath: launcher)
            process.arguments = launcherArguments + [try binary("beacond")] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: try binary("beacond"))
            process.arguments = arguments
        }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        process.standardOutput = FileHandle.nullDevice
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
        try process.runSerially()
        if waitUntilReady { try waitForPing() }
    }

    /// Waits until beacond answers a ping, while it runs: 60 s at most (many daemons starting
    /// at once on a loaded machine each take seconds to open their journal).
    func waitForPing() throws {
        let client = try WireClient(runtimeDirectory: runtimeDirectory)
        let answered = waitUntil(seconds: 60) { (try? client.ping(timeoutMilliseconds: 200)) != nil || !process.isRunning }
        if !answered || !process.isRunning { Issue.record("beacond did not answer: \(stderr)") }
    }

    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Sends `signal` and waits for the process to exit; returns its status. A daemon that has
    /// not exited 30 s later is killed (and the test fails): a test never waits on it for ever.
    @discardableResult
    func stop(signal: Int32 = SIGTERM) -> Int32 {
        if process.isRunning { kill(process.processIdentifier, signal) }
        if !process.waitUntilExit(orKillAfterSeconds: 30) {
            Issue.record("beacond did not exit within 30 s of signal \(signal); killed: \(stderr.suffix(2000))")
        }
        return process.terminationStatus
    }

    /// Waits for a process that should exit by itself; returns its status.
    func exitStatus() -> Int32 {
        process.waitUntilExit()
        return process.terminationStatus
    }
}

/// Waits until the file at `path` has the line `line`, while `process` runs (30 s at most).
func waitForLine(_ line: String, inFile path: String, while process: Process) -> Bool {
    let deadline = Date().addingTimeInterval(30)
    while Date() < deadline {
        let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
        if text.split(separator: "\n").contains(Substring(line)) { return true }
        if !process.isRunning { return false }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return false
}

/// Runs a tool, its output discarded, and returns its exit status.
@discardableResult
func runTool(_ path: String, _ arguments: [String]) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    guard (try? process.runSerially()) != nil else { return -1 }
    process.waitUntilExit()
    return process.terminationStatus
}

/// Whether this process may mount a tmpfs (root outside a restrictive sandbox).
let canMountTmpfs: Bool = {
    guard getuid() == 0, let dir = try? temporaryDirectory() else { return false }
    guard runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=64k", "tmpfs", dir]) == 0 else { return false }
    runTool("/bin/umount", [dir])
    return true
}()

