import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Testing
import BeaconTestSupport

/// Runs `beacon-access-probe` (as another user when `identity` is given: `setpriv` arguments)
/// and collects its lines. With `listening`, `whenReady` runs once its subscriptions are in place.
struct AccessProbe {
    let executable: String

    /// Copies the probe where any user can run it.
    ///
    /// `install` copies it, in a process of its own. A copy written from this process is open
    /// for writing in every child another test starts meanwhile, until that child execs; running
    /// the copy fails then (`ETXTBSY`), and `setpriv` exits without a word.
    init(directory: String) throws {
        executable = directory + "/beacon-access-probe"
        if !FileManager.default.fileExists(atPath: executable) {
            let copy = Process()
            copy.executableURL = URL(fileURLWithPath: "/usr/bin/install")
            copy.arguments = ["-m", "755", try binary("beacon-access-probe"), executable]
            try copy.runSerially()
            copy.waitUntilExit()
            try #require(copy.terminationStatus == 0, "install could not copy the probe to \(directory)")
        }
    }

    /// Starts the probe as `identity` (setpriv's arguments; none: this process's user), its
    /// standard output going to a new file at the returned path, its standard error to that
    /// path + `.err` (what a failing test shows).
    func launch(identity: [String], _ arguments: [String]) throws -> (process: Process, outputPath: String) {
        let outputPath = executable + ".out-\(UInt32.random(in: 0 ... .max))"
        _ = FileManager.default.createFile(atPath: outputPath, contents: nil)
        let process = Process()
        if identity.isEmpty {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = identity + ["--clear-groups", "--", executable] + arguments
        }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath))
        _ = FileManager.default.createFile(atPath: outputPath + ".err", contents: nil)
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: outputPath + ".err"))
        try process.runSerially()
        return (process, outputPath)
    }

    func run(identity: [String] = [], _ arguments: [String], whenReady: () throws -> Void = {}) throws -> [String] {
        let (process, outputPath) = try launch(identity: identity, arguments)
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        func lines() -> [String] {
            ((try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        if arguments.contains("--listen-ms") {
            let deadline = Date().addingTimeInterval(30)
            while !lines().contains("READY") && process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            try whenReady()
        }
        process.waitUntilExit()
        return lines()
    }

    /// The outcome the probe printed for `op` (`OK`, an error code, `REFUSED`, ...).
    static func outcome(_ op: String, in lines: [String]) -> String? {
        lines.first { $0.hasPrefix(op + " ") }?.split(separator: " ").dropFirst().first.map(String.init)
    }
}

/// Whether tests may run processes as other users: root, with setpriv.
let canSwitchUsers = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv")

@Suite("Access control with real processes under other identities", .serialized, .offThePool, .timeLimit(.minutes(3)))
struct AccessTests {
    static let readOps = ["get", "list", "snapshot", "delta", "history", "history-key"]

    /// A world-reachable directory with a daemon configured by `rules` (and `extra` lines).
    func startDaemon(_ lines: [String], extraArguments: [String] = [], launcher: [String] = []) throws -> (DaemonProcess, String) {
        let dir = try temporaryDirectory()
        chmod(dir, 0o755)
        let config = dir + "/beacond.conf"
        try (["socket_mode = 0666"] + lines).joined(separator: "\n").write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state",
                                       extraArguments: ["--config", config] + extraArguments,
                                       launcher: launcher.first, launcherArguments: Array(launcher.dropFirst()))
        chmod(dir + "/run", 0o755)
        return (daemon, dir)
    }

    @Test("Each user reads and writes exactly what the rules grant, on every path, and nothing of the rest",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func readsAndWritesFollowTheRules() throws {
        let (daemon, dir) = try startDaemon([
            "allow = uid:0 read=* write=*",
            "allow = uid:5001 read=app.,pub. write=app.",
            "allow = gid:6000 read=pub.",
        ])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for (key, value) in [("app.x", 1), ("net.secret", 2), ("pub.y", 3)] {
            _ = try root.put(key, .with { $0.intValue = Int64(value) })
        }
        let probe = try AccessProbe(directory: dir)
        let runtime = ["--runtime-dir", daemon.runtimeDirectory]
        let appUser = ["--reuid=5001", "--regid=5001"]

        // Its own prefix: every read path and the write work.
        var lines = try probe.run(identity: appUser, runtime + ["--key", "app.x", "--prefix", "app.", "--write", "app.z"])
        for op in Self.readOps + ["put"] { #expect(AccessProbe.outcome(op, in: lines) == "OK", "\(op): \(lines)") }
        #expect(lines.contains("list OK 1") && lines.contains("snapshot OK 1"), "\(lines)")

        // Another prefix, or one wider than its rights: refused on every path, nothing revealed.
        for prefix in ["net.", ""] {
            lines = try probe.run(identity: appUser, runtime + ["--key", "net.secret", "--prefix", prefix, "--write", "net.z"])
            for op in Self.readOps + ["put"] {
                #expect(AccessProbe.outcome(op, in: lines) == "PERMISSION_DENIED", "\(op) under '\(prefix)': \(lines)")
            }
        }
        #expect(throws: WireError.self) { _ = try root.get("net.z") }

        // A group member: reads its group's prefix, may not write it.
        lines = try probe.run(identity: ["--reuid=5002", "--regid=6000"], runtime + ["--key", "pub.y", "--prefix", "pub.", "--write", "pub.z"])
        for op in Self.readOps { #expect(AccessProbe.outcome(op, in: lines) == "OK", "\(op): \(lines)") }
        #expect(AccessProbe.outcome("put", in: lines) == "PERMISSION_DENIED", "\(lines)")

        // A user no rule names cannot even connect.
        lines = try probe.run(identity: ["--reuid=5003", "--regid=5003"], runtime + ["--key", "pub.y", "--prefix", "pub."])
        #expect(AccessProbe.outcome("get", in: lines) == "REFUSED", "\(lines)")

        let stats = try root.stats()
        #expect(stats.accessDenied >= 15 && stats.connectionsRefused >= 1, "\(stats)")
    }

    @Test("Live diffs, heartbeats and commit markers reach a subscriber only for keys it may read",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func publicationsFollowTheRules() throws {
        let (daemon, dir) = try startDaemon([
            "allow = uid:0 read=* write=*",
            "allow = uid:5001 read=app. write=app.",
        ])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        // Someone allowed follows net., so the daemon sequences it and marks it.
        let netFollower = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        try netFollower.subscribe("net.")
        let probe = try AccessProbe(directory: dir)
        let lines = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
            "--runtime-dir", daemon.runtimeDirectory, "--key", "app.x", "--prefix", "app.",
            "--subscribe", "", "--subscribe", "net.", "--subscribe", "app.", "--subscribe", "!", "--subscribe", "!h",
            "--listen-ms", "1500",
        ]) {
            _ = try root.put("net.secret", .with { $0.intValue = 1 })
            _ = try root.put("app.x", .with { $0.intValue = 2 })
            _ = try root.transaction([
                .with { $0.put = .with { $0.key = "app.x"; $0.value = .with { $0.intValue = 3 } } },
                .with { $0.put = .with { $0.key = "net.secret"; $0.value = .with { $0.intValue = 4 } } },
            ])
        }
        let diffs = lines.filter { $0.hasPrefix("diff ") }
        #expect(diffs == ["diff app.x", "diff app.x"], "\(lines)")
        let heartbeats = lines.filter { $0.hasPrefix("heartbeat") }
        #expect(!heartbeats.isEmpty, "\(lines)")
        #expect(!lines.contains { $0.contains("net.") }, "no diff, heartbeat or marker names net.: \(lines)")
        #expect(lines.contains("commit app."), "the transaction's marker shows the readable prefix: \(lines)")
        #expect(try root.stats().subscriptionsRefused >= 2)
    }

    @Test("A CURVE client reaches tcp endpoints with a listed key and its rights; an unknown key is refused",
          .enabled(if: ZMQCurveKeyPair.isSupported, "libzmq without CURVE"))
    func curveClientsNeedAListedKey() throws {
        let dir = try temporaryDirectory()
        let server = try ZMQCurveKeyPair.generate()
        let client = try ZMQCurveKeyPair.generate()
        let stranger = try ZMQCurveKeyPair.generate()
        for (name, keys) in [("server", server), ("client", client), ("stranger", stranger)] {
            try CurveKeyFile(publicKey: keys.publicKey, secretKey: keys.secretKey).text
                .write(toFile: "\(dir)/\(name).key", atomically: true, encoding: .utf8)
        }
        let (daemon, _) = try startDaemon([
            "request_endpoint = tcp://127.0.0.1:*", "publish_endpoint = tcp://127.0.0.1:*",  // ports the kernel chooses
            "curve_secret_key_file = \(dir)/server.key",
            "allow = uid:\(getuid()) read=* write=*",
            "allow = key:\(client.publicKey) read=sensor. write=sensor.   # the sensor box",
        ])
        defer { daemon.stop() }
        let (request, publish) = try daemon.tcpEndpoints()
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try root.put("sensor.t", .with { $0.doubleValue = 21.5 })
        let probe = try AccessProbe(directory: dir)
        let tcp = ["--endpoints", request, publish]

        var lines = try probe.run(tcp + ["--curve", "\(dir)/server.key", "\(dir)/client.key", "--write", "sensor.t",
                                         "--key", "sensor.t", "--prefix", "sensor."])
        #expect(AccessProbe.outcome("put", in: lines) == "OK", "\(lines)")
        for op in Self.readOps { #expect(AccessProbe.outcome(op, in: lines) == "OK", "\(op): \(lines)") }

        lines = try probe.run(tcp + ["--curve", "\(dir)/server.key", "\(dir)/client.key", "--write", "app.t", "--key", "app.t", "--prefix", "app."])
        for op in Self.readOps + ["put"] { #expect(AccessProbe.outcome(op, in: lines) == "PERMISSION_DENIED", "\(op): \(lines)") }

        lines = try probe.run(tcp + ["--curve", "\(dir)/server.key", "\(dir)/stranger.key", "--key", "sensor.t", "--prefix", "sensor."])
        #expect(AccessProbe.outcome("get", in: lines) == "REFUSED", "\(lines)")

        // Without CURVE the handshake fails: no request is read. The client is told when libzmq
        // reports the failed handshake in time, else its request times out.
        let requestsBefore = try root.stats().requests
        lines = try probe.run(tcp + ["--key", "sensor.t", "--prefix", "sensor."])
        #expect(["REFUSED", "TIMEOUT"].contains(AccessProbe.outcome("get", in: lines)), "\(lines)")
        #expect(try root.stats().requests == requestsBefore + 1, "only the stats request itself was read")

        #expect(try root.stats().connectionsRefused >= 1)
    }

    @Test("tcp without CURVE needs tcp_insecure; a bad rule is refused with its line; --check-config says so")
    func configurationIsValidated() throws {
        let dir = try temporaryDirectory()
        let beacond = try binary("beacond")
        func check(_ lines: [String]) throws -> (Int32, String) {
            try lines.joined(separator: "\n").write(toFile: dir + "/c.conf", atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: beacond)
            process.arguments = ["--config", dir + "/c.conf", "--check-config", "--runtime-dir", dir + "/run", "--state-dir", dir + "/state"]
            let errors = Pipe.forChild()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.runSerially()
            let text = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, text)
        }
        var (status, message) = try check(["allow = uid:0 read=* write=*", "allow = user:no-such-user-here read=*"])
        #expect(status == 78 && message.contains("c.conf:2: no user named 'no-such-user-here'"), "\(message)")
        (status, message) = try check(["allow = uid:0 read=app..x"])
        #expect(status == 78 && message.contains("c.conf:1:") && message.contains("not a valid prefix"), "\(message)")
        (status, message) = try check(["allow = key:short read=*"])
        #expect(status == 78 && message.contains("not a CURVE public key"), "\(message)")
        (status, message) = try check(["allow = robot read=*"])
        #expect(status == 78 && message.contains("unknown subject"), "\(message)")
        (status, message) = try check(["request_endpoint = tcp://127.0.0.1:7401"])
        #expect(status == 78 && message.contains("tcp_insecure"), "\(message)")
        (status, message) = try check(["request_endpoint = tcp://127.0.0.1:7401", "tcp_insecure = true", "allow = local read=*"])
        #expect(status == 0, "\(message)")
    }

    @Test("A reload with a bad file keeps the old rules running; a good one applies at once")
    func reloadKeepsTheOldPolicyOnError() throws {
        let me = "uid:\(getuid())"
        let (daemon, dir) = try startDaemon(["allow = \(me) read=* write=app."])
        defer { daemon.stop() }
        let config = dir + "/beacond.conf"
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        func netWriteOutcome() -> Beacon_V1_Error.Code? {
            do {
                _ = try client.put("net.x", .with { $0.intValue = 1 })
                return nil
            } catch {
                return error.reply?.code
            }
        }
        #expect(netWriteOutcome() == .permissionDenied)

        try ["socket_mode = 0666", "allow = \(me) read=* write=*", "allow = \(me) read=nope..x"].joined(separator: "\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        Thread.sleep(forTimeInterval: 0.5)
        #expect(netWriteOutcome() == .permissionDenied, "the old rules still run")
        #expect(daemon.stderr.contains("beacond.conf:3:"), "the refusal names the line: \(daemon.stderr)")

        try ["socket_mode = 0666", "allow = \(me) read=* write=*"].joined(separator: "\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        kill(daemon.process.processIdentifier, SIGHUP)
        var outcome = netWriteOutcome()
        for _ in 0..<50 where outcome != nil {
            Thread.sleep(forTimeInterval: 0.1)
            outcome = netWriteOutcome()
        }
        #expect(outcome == nil, "the new rules apply")
    }

    @Test("A peer over its write rate gets RATE_LIMITED with a retry time, counted in stats, until its allowance refills")
    func writeRateIsLimitedPerPeer() throws {
        let (daemon, _) = try startDaemon(["writes_per_second = 100", "write_burst = 100"])
        defer { daemon.stop() }
        let flooder = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for index in 0..<1000 { try flooder.send(.put(.with { $0.key = "flood.k\(index % 10)"; $0.value = .with { $0.intValue = 1 } })) }
        var limited = 0, accepted = 0, retryAfter: UInt32 = 0
        for _ in 0..<1000 {
            let reply = try #require(try flooder.receiveReply(timeoutMilliseconds: expectedReplyWait))
            if case .error(let error) = reply.result {
                #expect(error.code == .rateLimited)
                limited += 1
                retryAfter = max(retryAfter, error.retryAfterMs)
            } else {
                accepted += 1
            }
        }
        #expect(accepted >= 100 && accepted < 400 && limited == 1000 - accepted, "accepted \(accepted), limited \(limited)")
        #expect(retryAfter > 0 && retryAfter <= 1000)
        #expect(try flooder.stats().rateLimited == UInt64(limited))
        // The allowance refills with time.
        Thread.sleep(forTimeInterval: 0.2)
        _ = try flooder.put("flood.after", .with { $0.intValue = 1 })
    }
}

@Suite("Fuzzing every socket", .offThePool, .timeLimit(.minutes(3)))
struct FuzzTests {
    @Test("150,000 random and mutated frames on every socket: no crash, every request answered, nothing guarded changed, memory bounded")
    func fuzzingEverySocket() throws {
        // The full run (3,000,000 frames, release build) is `make bench-fuzz`.
        let (status, text) = try Process.runToEnd(try binary("beacon-bench"), ["fuzz", "--frames", "150000", "--growth-limit", "48"])
        #expect(status == 0, "\(text)")
        #expect(text.contains("verdict: no crash"), "\(text)")
    }
}
