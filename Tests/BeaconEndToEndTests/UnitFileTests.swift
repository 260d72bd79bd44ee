import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

private let systemdAnalyze = "/usr/bin/systemd-analyze"
private let strace = "/usr/bin/strace"
private let setpriv = "/usr/bin/setpriv"

/// The shipped unit, as `make install` writes it, checked by systemd's own tool.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: systemdAnalyze), "systemd-analyze is not installed"), .timeLimit(.minutes(3)), .offThePool)
struct UnitFileTests {
    private func installedUnit() throws -> String {
        let dir = try temporaryDirectory()
        let unit = try String(contentsOfFile: "deploy/beacond.service", encoding: .utf8)
            .replacingOccurrences(of: "@BINDIR@", with: URL(fileURLWithPath: try binary("beacond")).deletingLastPathComponent().path)
            .replacingOccurrences(of: "@DOCDIR@", with: "/usr/share/doc/beacon")
        let path = dir + "/beacond.service"
        try unit.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: systemdAnalyze)
        process.arguments = arguments
        let pipe = Pipe.forChild()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.runSerially()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test func theUnitVerifiesAndIsRatedWellBySystemdAnalyzeSecurity() throws {
        let unit = try installedUnit()
        let verify = try run(["verify", unit])
        #expect(verify.status == 0, "\(verify.output)")
        let security = try run(["security", "--offline=true", unit])
        let line = try #require(security.output.split(separator: "\n").first { $0.contains("Overall exposure level") })
        let score = try #require(line.split(separator: " ").compactMap { Double($0) }.first)
        #expect(score <= 2.0, "\(line)")
    }

    /// The system calls the unit's `SystemCallFilter=` lines allow, read in order as systemd
    /// does: the first line is an allow list, `~` lines take calls out, later lines add them back.
    private func allowedSystemCalls() throws -> Set<String> {
        let unit = try String(contentsOfFile: "deploy/beacond.service", encoding: .utf8)
        var allowed: Set<String> = []
        for line in unit.split(separator: "\n") where line.hasPrefix("SystemCallFilter=") {
            var names = String(line.dropFirst("SystemCallFilter=".count))
            let removing = names.hasPrefix("~")
            if removing { names.removeFirst() }
            let calls = try Set(names.split(separator: " ").flatMap { try expand(String($0)) })
            if removing { allowed.subtract(calls) } else { allowed.formUnion(calls) }
        }
        return allowed
    }

    /// A call, or every call of a `@group` and of the groups it includes.
    private func expand(_ name: String) throws -> [String] {
        guard name.hasPrefix("@") else { return [name] }
        let listing = try run(["syscall-filter", name])
        return try listing.output.split(separator: "\n").dropFirst().flatMap { line -> [String] in
            let entry = line.trimmingCharacters(in: .whitespaces)
            return entry.isEmpty || entry.hasPrefix("#") ? [] : try expand(entry)
        }
    }

    /// Every system call a beacond makes while it starts, takes writes, serves reads and a
    /// subscriber, reloads and stops, as the unit's user would run it (not root), is one the
    /// unit's filter allows. A call outside it fails with EPERM, and libzmq aborts when
    /// `sched_setscheduler` fails: its I/O thread calls it as it starts.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: strace), "strace is not installed"),
          .enabled(if: ProcessInfo.processInfo.environment["BEACON_SANITIZED_RUN"] == nil,
                   "a ThreadSanitizer build makes calls of its own"))
    func everySystemCallBeacondMakesIsOneTheUnitAllows() throws {
        let allowed = try allowedSystemCalls()
        #expect(allowed.contains("sched_setscheduler") && !allowed.contains("mount"), "\(allowed.count) calls allowed")
        let dir = try temporaryDirectory()
        chmod(dir, 0o777)  // beacond runs as nobody below
        let counts = dir + "/syscalls"
        let daemon = Process()
        let traced = [strace, "-f", "-c", "-o", counts, try binary("beacond"),
                      "--runtime-dir", dir + "/run", "--state-dir", dir + "/state", "--heartbeat-ms", "100"]
        if getuid() == 0 {
            try #require(FileManager.default.isExecutableFile(atPath: setpriv), "setpriv (util-linux) runs beacond as nobody")
            daemon.executableURL = URL(fileURLWithPath: setpriv)
            daemon.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups"] + traced
        } else {
            daemon.executableURL = URL(fileURLWithPath: strace)
            daemon.arguments = Array(traced.dropFirst())
        }
        _ = FileManager.default.createFile(atPath: dir + "/stderr", contents: nil)
        daemon.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: dir + "/stderr"))
        // Not this process's own output: a beacond that outlived the test would hold it open, and
        // `swift test` would wait for it forever.
        daemon.standardOutput = FileHandle.nullDevice
        try daemon.runSerially()
        /// beacond under strace, found by its own command line (its program and this test's
        /// runtime directory); 0 until it has started.
        func tracedDaemon() -> Int32 {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            for entry in entries {
                guard let pid = Int32(entry),
                      let cmdline = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { continue }
                let arguments = cmdline.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
                if arguments.first?.hasSuffix("/beacond") == true, arguments.contains(dir + "/run") { return pid }
            }
            return 0
        }
        var beacond: Int32 = 0
        defer {
            // beacond first: killed, strace would leave it running on its own.
            if beacond == 0 { beacond = tracedDaemon() }
            if beacond > 0 { kill(beacond, SIGKILL) }
            if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) }
        }

        // strace blocks SIGTERM while it traces (-o FILE PROG), so signals go to beacond itself.
        // Slow to start on a loaded machine: strace, then beacond under it.
        for _ in 0..<2000 where beacond == 0 {
            beacond = tracedDaemon()
            if beacond == 0 { usleep(10_000) }
        }
        try #require(beacond > 0, "strace started no beacond")
        let client = try WireClient.patient(runtimeDirectory: dir + "/run")
        var answered = false
        for _ in 0..<100 where !answered { answered = (try? client.ping(timeoutMilliseconds: 100)) != nil }
        try #require(answered, "beacond did not answer under strace")
        try client.subscribe("unit.")
        for i in 0..<50 { _ = try client.put("unit.k\(i % 5)", .with { $0.intValue = Int64(i) }) }
        _ = try client.get("unit.k1")
        _ = try client.history("unit.k1")
        _ = try client.stats()
        #expect(try client.receivePublication(timeoutMilliseconds: expectedReplyWait) != nil)
        let stderrPath = dir + "/stderr"
        func reloaded() -> Bool { ((try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "").contains("configuration reloaded") }
        kill(beacond, SIGHUP)
        for _ in 0..<1000 where !reloaded() { usleep(10_000) }
        #expect(reloaded(), "beacond did not reload on SIGHUP")
        _ = try client.ping()
        kill(beacond, SIGTERM)
        for _ in 0..<1500 where daemon.isRunning { usleep(10_000) }
        try #require(!daemon.isRunning, "beacond did not stop within 15 s of SIGTERM: \((try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "")")
        #expect(daemon.terminationStatus == 0)

        // strace -c: a table whose last column names the call, ending with a "total" row.
        let table = try String(contentsOfFile: counts, encoding: .utf8)
        let used = Set(table.split(separator: "\n").compactMap { row -> String? in
            guard let name = row.split(separator: " ").last.map(String.init),
                  name.first?.isLetter == true, name != "total", name != "syscall" else { return nil }
            return name
        })
        #expect(used.count > 30, "\(table)")
        #expect(used.subtracting(allowed).isEmpty, "calls the unit would refuse: \(used.subtracting(allowed).sorted())")
    }
}
