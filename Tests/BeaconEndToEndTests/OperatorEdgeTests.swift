import BeaconDaemon
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// What an operator meets when a setting, a flag, a file or a tool goes wrong: every refusal is
/// its documented exit code and one clear line, nothing is left half-done on disk, and nothing a
/// start accepts — from the file, the flags or a reload — can take the daemon down.
@Suite(.timeLimit(.minutes(6)), .offThePool)
struct OperatorEdgeTests {
    /// A finished `beacond` run.
    struct Run {
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `beacond arguments` to its end (60 s at most).
    static func beacond(_ arguments: [String]) throws -> Run {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacond"))
        process.arguments = arguments
        let errors = Pipe.forChild(), output = Pipe.forChild()
        process.standardError = errors
        process.standardOutput = output
        try process.runSerially()
        let stdout = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.waitUntilExit(orKillAfterSeconds: 60), "beacond \(arguments) kept running")
        return Run(status: process.terminationStatus, stdout: stdout, stderr: stderr)
    }

    /// Values each whole-number setting is tried with: 0, -1, its maximum, its maximum + 1, 2^64 - 1.
    static func probes(of setting: NumericSetting) -> [(text: String, accepted: Bool)] {
        [("0", setting.range.contains(0)), ("-1", false), (String(setting.range.upperBound), true),
         (String(setting.range.upperBound + 1), false), (String(UInt64.max), false)]
    }

    // MARK: Every whole-number setting, at start and on reload

    @Test("Every whole-number setting: --check-config, a start and a reload refuse exactly the values out of its range")
    func everyNumericSettingIsCheckedAlikeAtStartAndOnReload() throws {
        let dir = try temporaryDirectory()
        let file = dir + "/beacond.conf"
        let base = ["--config", file, "--runtime-dir", dir + "/run", "--state-dir", dir + "/state", "--loop-cpu", "off"]
        // --check-config: what a start would do, without starting.
        for setting in DaemonConfiguration.numericSettings {
            for (text, accepted) in Self.probes(of: setting) {
                try "\(setting.name) = \(text)\n".write(toFile: file, atomically: true, encoding: .utf8)
                let run = try Self.beacond(base + ["--check-config"])
                #expect(run.status == (accepted ? 0 : 78), "\(setting.name) = \(text): \(run.stderr)")
                #expect(!run.stderr.contains("Fatal error"), "\(setting.name) = \(text): \(run.stderr)")
                if !accepted {
                    #expect(run.stderr == "beacond: invalid configuration: \(file):1: '\(setting.name)' is a whole number from "
                        + "\(setting.range.lowerBound) to \(setting.range.upperBound)"
                        + (setting.unit.isEmpty ? "" : " (\(setting.unit))") + (setting.zeroMeans.map { "; 0: \($0)" } ?? "")
                        + ", not '\(text)'\n")
                }
            }
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/state"), "--check-config made the state directory")

        // A start with every setting at its maximum serves, and keeps serving past its first timers.
        try DaemonConfiguration.numericSettings.map { "\($0.name) = \($0.range.upperBound)" }.joined(separator: "\n")
            .write(toFile: file, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--config", file])
        defer { daemon.stop() }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        #expect(try client.put("max.k", .with { $0.intValue = 1 }).revision == 1)

        // Each value on reload: the same verdict, and the daemon serves after every one.
        func reloads() -> (done: Int, refused: Int) {
            let log = daemon.stderr
            return (log.components(separatedBy: "configuration reloaded").count - 1, log.components(separatedBy: "reload refused").count - 1)
        }
        for setting in DaemonConfiguration.numericSettings {
            for (text, accepted) in Self.probes(of: setting) {
                try "\(setting.name) = \(text)\n".write(toFile: file, atomically: true, encoding: .utf8)
                let before = reloads()
                kill(daemon.process.processIdentifier, SIGHUP)
                let answered = waitUntil(seconds: 30) { reloads() != before || !daemon.process.isRunning }
                try #require(answered && daemon.process.isRunning, "\(setting.name) = \(text) on reload: \(daemon.stderr.suffix(2000))")
                let after = reloads()
                #expect(after.done == before.done + (accepted ? 1 : 0) && after.refused == before.refused + (accepted ? 0 : 1),
                        "\(setting.name) = \(text) on reload: \(accepted ? "refused" : "accepted")")
                #expect((try? client.ping(timeoutMilliseconds: 10_000)) != nil, "no answer after reloading \(setting.name) = \(text)")
            }
        }
        #expect(try client.get("max.k").value.intValue == 1)
        #expect(daemon.stop() == 0)
    }

    // MARK: Flags

    @Test("A bad flag value is a usage error (64) named by its flag, checked as the file's setting is")
    func flagsGoThroughTheSettingsChecks() throws {
        let dir = try temporaryDirectory()
        let base = ["--runtime-dir", dir + "/run", "--state-dir", dir + "/state"]
        var cases: [(arguments: [String], says: String)] = [
            (["--heartbeat-ms", "0"], "beacond: --heartbeat-ms: 'heartbeat_ms' is a whole number from 10 to 3600000 (ms), not '0'"),
            (["--heartbeat-ms", "abc"], "beacond: --heartbeat-ms: 'heartbeat_ms' is a whole number"),
            (["--max-batch", "0"], "beacond: --max-batch: 'max_batch' is a whole number from 1 to 65536, not '0'"),
            (["--max-batch=-5"], "beacond: --max-batch: 'max_batch' is a whole number from 1 to 65536, not '-5'"),
            (["--retention-revisions", "-1"], "beacond: --retention-revisions: 'retention_revisions' is a whole number"),
            (["--durability", "sometimes"], "beacond: --durability: 'durability' is 'normal' or 'full', not 'sometimes'"),
            (["--loop-cpu", "99"], "beacond: --loop-cpu: loop_cpu = 99 is not a CPU this process may run on"),
            (["--loop-cpu", "many"], "beacond: --loop-cpu: 'loop_cpu' is auto, off or a CPU number, not 'many'"),
            (["--request-endpoint", "udp://127.0.0.1:1"], "beacond: --request-endpoint: endpoint 'udp://127.0.0.1:1' is neither tcp:// nor ipc://"),
            (["--publish-endpoint", "127.0.0.1:7402"], "beacond: --publish-endpoint: endpoint '127.0.0.1:7402' is neither"),
            (["--upstream", "tcp://127.0.0.1:1", "--etcd-endpoints", "http://127.0.0.1:2"], "beacond: --upstream and --etcd-endpoints:"),
            (["--upstream-prefix", "a."], "beacond: --upstream-publish, --upstream-server-key, --upstream-key-file and --upstream-prefix need --upstream"),
            (["--etcd-prefix", "x/"], "beacond: --etcd-prefix, --etcd-cert, --etcd-key and --etcd-ca need --etcd-endpoints"),
            (["--log-level", "loud"], "beacond: --log-level: unknown level 'loud'"),
            (["--request-endpoint", "tcp://127.0.0.1:0"], "beacond: flags: tcp://127.0.0.1:0 needs curve_secret_key_file"),
            (["--upstream", "udp://127.0.0.1:1"], "beacond: flags: upstream 'udp://127.0.0.1:1' is neither tcp:// nor ipc://"),
        ]
        #if !Etcd
        // A build without etcd fronts says how to get one.
        cases.append((["--etcd-endpoints", "http://127.0.0.1:2379"],
                      "beacond: flags: etcd_endpoints: this beacond was built without etcd fronts; build it with `make ETCD=1` (swift build --traits Etcd)"))
        #endif
        for (arguments, says) in cases {
            // Both a start and --check-config: the same verdict.
            for extra in [[], ["--check-config"]] {
                let run = try Self.beacond(base + arguments + extra)
                #expect(run.status == 64, "beacond \(arguments + extra): \(run.stderr)")
                #expect(run.stderr.hasPrefix(says) && run.stderr.split(separator: "\n").count == 1, "beacond \(arguments + extra): \(run.stderr)")
            }
        }
        #expect(!FileManager.default.fileExists(atPath: dir + "/state") && !FileManager.default.fileExists(atPath: dir + "/run"))
    }

    // MARK: Configuration files

    /// One configuration file as an operator may write it, and what beacond must make of it.
    struct FileCase: CustomStringConvertible {
        var contents: String
        /// 0: valid (checked with --check-config); otherwise what a start exits with.
        var status: Int32
        /// What the one line on stderr holds (`c.conf:N:` included where a line is at fault).
        var says: String
        var description: String { contents.debugDescription }
    }

    static let fileCases: [FileCase] = [
        FileCase(contents: "heartbeat_ms = 5\n", status: 78, says: "c.conf:1: 'heartbeat_ms' is a whole number from 10 to 3600000 (ms), not '5'"),
        FileCase(contents: "heartbeat_ms = 1_000\n", status: 78, says: "c.conf:1: 'heartbeat_ms' is a whole number"),
        FileCase(contents: "heartbeat_ms = 0x10\n", status: 78, says: "not '0x10'"),
        FileCase(contents: "heartbeat_ms = 100 ms\n", status: 78, says: "not '100 ms'"),
        FileCase(contents: "heartbeat_ms = 100 # a tenth of a second\n", status: 0, says: "configuration valid"),
        FileCase(contents: "heartbeat_ms = \"100\"\n", status: 0, says: "configuration valid"),
        FileCase(contents: "\n# only comments\n   \n\t\n", status: 0, says: "configuration valid"),
        FileCase(contents: "\u{FEFF}heartbeat_ms = 100\n", status: 0, says: "configuration valid"),
        FileCase(contents: "heartbeat_ms = 100\r\nmax_batch = 10\r\n", status: 0, says: "configuration valid"),
        FileCase(contents: "heartbeat_ms = 100\r\ndurability = bogus\r\n", status: 78, says: "c.conf:2: 'durability' is 'normal' or 'full', not 'bogus'"),
        FileCase(contents: "heartbeat_ms = 100\rdurability = bogus\r", status: 78, says: "c.conf:2: 'durability' is 'normal' or 'full'"),
        FileCase(contents: "heartbeat_ms = 100\nmax_batch = 1\u{0}0\n", status: 78, says: "c.conf:2: control character U+0 in the line"),
        FileCase(contents: "heartbeat_ms = 100\u{7}\n", status: 78, says: "c.conf:1: control character U+7 in the line"),
        FileCase(contents: "durability = FULL\n", status: 78, says: "c.conf:1: 'durability' is 'normal' or 'full', not 'FULL'"),
        FileCase(contents: "durability =\n", status: 78, says: "c.conf:1: 'durability' is 'normal' or 'full', not ''"),
        FileCase(contents: "tcp_insecure = yes\n", status: 78, says: "c.conf:1: 'tcp_insecure' is true or false, not 'yes'"),
        FileCase(contents: "loop_cpu = -1\n", status: 78, says: "c.conf:1: 'loop_cpu' is auto, off or a CPU number, not '-1'"),
        FileCase(contents: "loop_cpu = 4096\n", status: 78, says: "c.conf:1: 'loop_cpu' is auto, off or a CPU number, not '4096'"),
        FileCase(contents: "loop_cpu = 99\n", status: 78, says: "c.conf:1: loop_cpu = 99 is not a CPU this process may run on"),
        FileCase(contents: "socket_mode = 0999\n", status: 78, says: "c.conf:1: 'socket_mode' is an octal mode from 0 to 0777"),
        FileCase(contents: "socket_mode = 01000\n", status: 78, says: "c.conf:1: 'socket_mode' is an octal mode"),
        FileCase(contents: "socket_mode = rw\n", status: 78, says: "c.conf:1: 'socket_mode' is an octal mode"),
        FileCase(contents: "socket_mode = 0600\n", status: 0, says: "configuration valid"),
        FileCase(contents: "request_endpoint = udp://127.0.0.1:1\n", status: 78, says: "c.conf:1: endpoint 'udp://127.0.0.1:1' is neither tcp:// nor ipc://"),
        FileCase(contents: "publish_endpoint = 127.0.0.1:7402\n", status: 78, says: "c.conf:1: endpoint '127.0.0.1:7402' is neither"),
        FileCase(contents: "request_endpoint = tcp://127.0.0.1:0\n", status: 78, says: "needs curve_secret_key_file (CURVE), or tcp_insecure = true"),
        FileCase(contents: "request_endpoint = tcp://127.0.0.1:0\ntcp_insecure = true\n", status: 0, says: "configuration valid"),
        FileCase(contents: "request_endpoint =\n", status: 0, says: "configuration valid"),
        FileCase(contents: "allow = nobody:5\n", status: 78, says: "c.conf:1: unknown subject kind 'nobody' (use uid, user, gid, group, key, local or insecure)"),
        FileCase(contents: "allow = uid:0 read=* read=x\n", status: 78, says: "c.conf:1: 'read' is given twice"),
        FileCase(contents: "allow = user:no-such-user-beacon\n", status: 78, says: "c.conf:1: no user named 'no-such-user-beacon'"),
        FileCase(contents: "allow = uid:0 frob=x\n", status: 78, says: "c.conf:1: unknown right 'frob'"),
        FileCase(contents: "allow = uid:abc read=*\n", status: 78, says: "c.conf:1: 'abc' is not a user id"),
        FileCase(contents: "allow =\n", status: 78, says: "c.conf:1: 'allow' needs a subject"),
        FileCase(contents: "curve_secret_key_file = /nonexistent-beacon.key\n", status: 78, says: "curve_secret_key_file /nonexistent-beacon.key"),
        FileCase(contents: "etcd_prefix = x/\n", status: 78, says: "c.conf:1: 'etcd_prefix' needs an 'etcd_endpoints = URL,...' line before it"),
        FileCase(contents: "upstream_prefix = a.\n", status: 78, says: "c.conf:1: 'upstream_prefix' needs an 'upstream = ENDPOINT' line before it"),
        FileCase(contents: "upstream = udp://x\n", status: 78, says: "upstream 'udp://x' is neither tcp:// nor ipc://"),
        FileCase(contents: "upstream = tcp://127.0.0.1:7401\netcd_endpoints = http://127.0.0.1:2379\n", status: 78,
                 says: "a daemon is either a relay (upstream) or an etcd front (etcd_endpoints), not both"),
        FileCase(contents: "upstream = tcp://127.0.0.1:7401\nupstream_prefix = bad..prefix\n", status: 78, says: "upstream_prefix 'bad..prefix'"),
        FileCase(contents: "etcd_endpoints = ftp://127.0.0.1:1\n", status: 78, says: "etcd_endpoints:"),
        FileCase(contents: "etcd_endpoints = http://127.0.0.1:2379\netcd_cert = /nonexistent.crt\n", status: 78, says: "etcd_cert and etcd_key go together"),
        FileCase(contents: "colour = blue\n", status: 78, says: "c.conf:1: unknown setting 'colour'"),
        FileCase(contents: "heartbeat_ms\n", status: 78, says: "c.conf:1: expected 'name = value'"),
        FileCase(contents: "= 5\n", status: 78, says: "c.conf:1: unknown setting ''"),
        FileCase(contents: "state_dir =\n", status: 78, says: "c.conf:1: 'state_dir' needs a directory"),
        FileCase(contents: "runtime_dir = \"\"\n", status: 78, says: "c.conf:1: 'runtime_dir' needs a directory"),
        FileCase(contents: "subscriptions_per_peer = 0\n", status: 0, says: "configuration valid"),
        FileCase(contents: "max_value_bytes = 0\n", status: 0, says: "configuration valid"),
        FileCase(contents: "max_value_bytes = 1048577\n", status: 78, says: "c.conf:1: 'max_value_bytes' is a whole number from 0 to 1048576"),
        FileCase(contents: "pending_requests = 0\n", status: 78, says: "c.conf:1: 'pending_requests' is a whole number from 1 to 1000000"),
        FileCase(contents: "retention_age_s = 18446744073709551615\n", status: 78, says: "c.conf:1: 'retention_age_s' is a whole number from 0 to 3155760000"),
        FileCase(contents: "compaction_interval_s = 18446744073709551615\n", status: 78, says: "c.conf:1: 'compaction_interval_s' is a whole number from 1 to 2592000"),
        FileCase(contents: "session_ttl_ms = 99\n", status: 78, says: "c.conf:1: 'session_ttl_ms' is a whole number from 100 to 3600000"),
        FileCase(contents: "max_batch = 65537\n", status: 78, says: "c.conf:1: 'max_batch' is a whole number from 1 to 65536"),
        FileCase(contents: "reply_buffer_bytes = 1048575\n", status: 78, says: "c.conf:1: 'reply_buffer_bytes' is a whole number from 1048576"),
        FileCase(contents: "heartbeat_ms = 100\nheartbeat_ms = 3\n", status: 78, says: "c.conf:2: 'heartbeat_ms' is a whole number"),
    ]

    @Test("Configuration files as operators write them: valid ones pass, bad ones name their line and create nothing")
    func configurationFilesGetOneClearLineAndCreateNothing() throws {
        let dir = try temporaryDirectory()
        #expect(Self.fileCases.count >= 55)
        for (index, testCase) in Self.fileCases.enumerated() {
            let caseDir = dir + "/case\(index)"
            try FileManager.default.createDirectory(atPath: caseDir, withIntermediateDirectories: true)
            let file = caseDir + "/c.conf"
            try testCase.contents.write(toFile: file, atomically: true, encoding: .utf8)
            let arguments = ["--config", file, "--runtime-dir", caseDir + "/run", "--state-dir", caseDir + "/state", "--loop-cpu", "off"]
                + (testCase.status == 0 ? ["--check-config"] : [])
            let run = try Self.beacond(arguments)
            #expect(run.status == testCase.status, "\(testCase): \(run.stderr)")
            let said = testCase.status == 0 ? run.stdout : run.stderr
            #expect(said.split(separator: "\n").first?.contains(testCase.says) == true, "\(testCase): \(said)")
            if testCase.status != 0 {
                #expect(run.stderr.split(separator: "\n").count == 1, "\(testCase): \(run.stderr)")
            }
            // Nothing made: no state or runtime directory, nothing beside the file.
            #expect(try FileManager.default.contentsOfDirectory(atPath: caseDir) == ["c.conf"], "\(testCase) left files behind")
        }
        // Files that cannot be read at all.
        try FileManager.default.createDirectory(atPath: dir + "/a-directory.conf", withIntermediateDirectories: true)
        try Data([0x68, 0x65, 0xFF, 0xFE, 0x0A]).write(to: URL(fileURLWithPath: dir + "/latin1.conf"))
        for file in [dir + "/a-directory.conf", dir + "/absent.conf", dir + "/latin1.conf"] {
            let run = try Self.beacond(["--config", file, "--runtime-dir", dir + "/run", "--state-dir", dir + "/state"])
            #expect(run.status == 78, "\(file): \(run.stderr)")
            #expect(run.stderr.hasPrefix("beacond: cannot read configuration \(file)") && run.stderr.split(separator: "\n").count == 1, "\(run.stderr)")
        }
    }

    // MARK: The operator's tools

    /// `beacon watch PREFIX | head -3` on an idle prefix waited for the next change before it
    /// learnt that its reader had gone.
    @Test("beacon watch ends as soon as its reader goes, without waiting for a change")
    func watchNoticesAClosedOutputOnAnIdlePrefix() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for index in 0..<3 { _ = try client.put("idle.k\(index)", .with { $0.intValue = Int64(index) }) }

        let watch = Process()
        watch.executableURL = URL(fileURLWithPath: try binary("beacon"))
        watch.arguments = ["watch", "idle.", "--runtime-dir", daemon.runtimeDirectory]
        let output = Pipe.forChild(), errors = Pipe.forChild()
        watch.standardOutput = output
        watch.standardError = errors
        try watch.runSerially()
        // Read the three current values, as `head -3` would, then go.
        var seen = Data()
        while seen.split(separator: UInt8(ascii: "\n")).count < 3 {
            let chunk = output.fileHandleForReading.availableData
            try #require(!chunk.isEmpty, "watch ended before printing the current values")
            seen += chunk
        }
        try output.fileHandleForReading.close()
        #expect(watch.waitUntilExit(orKillAfterSeconds: 20), "watch kept running after its reader left, on an idle prefix")
        #expect(watch.terminationStatus == 74)
        let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(stderr == "beacon: output closed\n", "\(stderr)")
    }

    /// `beacon keygen NAME --force` deleted the old secret before it learnt it could not write
    /// the public half: the pair on disk no longer matched.
    @Test("keygen --force replaces a key pair whole or not at all")
    func keygenReplacesThePairWholeOrNotAtAll() async throws {
        let dir = try temporaryDirectory()
        let first = try await beacon(["keygen", dir + "/node"], runtimeDirectory: nil)
        try #require(first.status == 0, "\(first.stderr)")
        let oldSecret = try String(contentsOfFile: dir + "/node.key", encoding: .utf8)
        let oldPublic = try String(contentsOfFile: dir + "/node.pub", encoding: .utf8)
        // The public half cannot be replaced (a directory stands there): nothing changes.
        try FileManager.default.removeItem(atPath: dir + "/node.pub")
        try FileManager.default.createDirectory(atPath: dir + "/node.pub", withIntermediateDirectories: false)
        let blocked = try await beacon(["keygen", dir + "/node", "--force"], runtimeDirectory: nil)
        #expect(blocked.status == 73, "\(blocked.stderr)")
        #expect(blocked.stderr == "beacon: \(dir)/node.pub is not a regular file; keygen replaces only regular files\n")
        #expect(try String(contentsOfFile: dir + "/node.key", encoding: .utf8) == oldSecret, "the old secret was destroyed")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["node.key", "node.pub"])
        // Replaced for real: both halves new, and they belong together.
        try FileManager.default.removeItem(atPath: dir + "/node.pub")
        try oldPublic.write(toFile: dir + "/node.pub", atomically: true, encoding: .utf8)
        let replaced = try await beacon(["keygen", dir + "/node", "--force"], runtimeDirectory: nil)
        #expect(replaced.status == 0, "\(replaced.stderr)")
        let newSecret = try CurveKeyFile(path: dir + "/node.key"), newPublic = try CurveKeyFile(path: dir + "/node.pub")
        #expect(newSecret.publicKey == newPublic.publicKey && (newSecret.publicKey ?? "") + "\n" == replaced.stdout)
        #expect(try String(contentsOfFile: dir + "/node.key", encoding: .utf8) != oldSecret)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).sorted() == ["node.key", "node.pub"])
    }

    /// A refused `beacon backup` left an empty `FILE.partial`; a stopped one left its partial file
    /// and kept the daemon's copy for a minute, refusing every other backup meanwhile.
    @Test("A refused backup writes nothing; a stopped one leaves nothing and lets the next start at once")
    func backupsLeaveNothingHalfDone() async throws {
        let dir = try temporaryDirectory()
        // Root may read only `app.`: a backup, which needs read=*, is refused.
        try "allow = uid:0 read=app. write=app.\n".write(toFile: dir + "/narrow.conf", atomically: true, encoding: .utf8)
        let narrow = try DaemonProcess(runtimeDirectory: dir + "/narrow-run", stateDirectory: dir + "/narrow-state",
                                       extraArguments: ["--config", dir + "/narrow.conf"])
        defer { narrow.stop() }
        try FileManager.default.createDirectory(atPath: dir + "/out", withIntermediateDirectories: true)
        let refused = try await beacon(["backup", dir + "/out/copy.sqlite"], runtimeDirectory: narrow.runtimeDirectory)
        #expect(refused.status == 77, "\(refused.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir + "/out") == [], "a refused backup left files")

        // A journal of several chunks, so that a backup is stopped half-way.
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let big = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 7, count: 1_000_000) }
        for index in 0..<6 { _ = try client.put("big.k\(index)", big) }
        // To a pipe nobody reads: it stops in its first write, the daemon's copy made and held.
        let stalled = Process()
        stalled.executableURL = URL(fileURLWithPath: try binary("beacon"))
        stalled.arguments = ["backup", "-", "--runtime-dir", daemon.runtimeDirectory]
        let unread = Pipe.forChild()
        stalled.standardOutput = unread
        stalled.standardError = FileHandle.nullDevice
        try stalled.runSerially()
        let firstByte = unread.fileHandleForReading.readData(ofLength: 1)
        try #require(firstByte.count == 1, "the stalled backup wrote nothing")
        kill(stalled.processIdentifier, SIGINT)
        #expect(stalled.waitUntilExit(orKillAfterSeconds: 20))
        // Its connection is gone: the daemon let go of the copy, and a new backup starts now.
        let next = try await beacon(["backup", dir + "/out/next.sqlite"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(next.status == 0, "the next backup was refused: \(next.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir + "/out") == ["next.sqlite"])

        // To a file, stopped whenever: FILE.partial never stays behind.
        for round in 0..<3 {
            let file = dir + "/out/stopped\(round).sqlite"
            let backup = Process()
            backup.executableURL = URL(fileURLWithPath: try binary("beacon"))
            backup.arguments = ["backup", file, "--runtime-dir", daemon.runtimeDirectory]
            backup.standardOutput = FileHandle.nullDevice
            backup.standardError = FileHandle.nullDevice
            try backup.runSerially()
            _ = waitUntil(seconds: 10) { FileManager.default.fileExists(atPath: file + ".partial") || !backup.isRunning }
            kill(backup.processIdentifier, SIGINT)
            #expect(backup.waitUntilExit(orKillAfterSeconds: 20))
            #expect(!FileManager.default.fileExists(atPath: file + ".partial"), "round \(round): \(file).partial stayed behind")
            if backup.terminationStatus == 0 { try FileManager.default.removeItem(atPath: file) }  // it finished first
        }
        let last = try await beacon(["backup", dir + "/out/last.sqlite"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(last.status == 0, "a backup after the stopped ones was refused: \(last.stderr)")
    }
}
