import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// Bad and edge inputs as a new user meets them: each gets its documented exit code (docs/CLI.md,
/// "Exit codes"; docs/DAEMON.md for beacond), one clear line naming the problem, no crash, and
/// nothing stored that should not be.
@Suite(.timeLimit(.minutes(4)), .offThePool)
struct BadInputTableTests {
    /// One bad input: what is run, on which daemon, what it must end with.
    struct Case: CustomStringConvertible {
        var arguments: [String]
        var input: String? = nil
        var status: Int32
        /// Text the one line on stderr must hold.
        var says: String
        var daemon: Where = .live
        var description: String { "beacon \(arguments.joined(separator: " "))" }
    }

    /// Which daemon a case talks to.
    enum Where { case live, none, killed, stopped, explicit }

    static func cases(dir: String) -> [Case] {
        let long = String(repeating: "k", count: 300)
        return [
            // Keys.
            Case(arguments: ["set", "", "1"], status: 65, says: "key is empty"),
            Case(arguments: ["set", "a b", "1"], status: 65, says: "character ' ' at offset 1 is not allowed"),
            Case(arguments: ["set", ".lead", "1"], status: 65, says: "empty segment at offset 0"),
            Case(arguments: ["set", "trail.", "1"], status: 65, says: "empty segment at offset 6"),
            Case(arguments: ["set", "a..b", "1"], status: 65, says: "empty segment"),
            Case(arguments: ["set", "!ctl", "1"], status: 65, says: "character '!' at offset 0"),
            Case(arguments: ["set", "#b#", "1"], status: 65, says: "character '#' at offset 0"),
            Case(arguments: ["set", long, "1"], status: 65, says: "key is 300 bytes; the limit is 256"),
            Case(arguments: ["get", "bad key"], status: 65, says: "not allowed in a key"),
            Case(arguments: ["ls", "bad key"], status: 65, says: "not allowed in a key"),
            Case(arguments: ["delete", ".x"], status: 65, says: "empty segment"),
            Case(arguments: ["history", "a..b"], status: 65, says: "empty segment"),
            Case(arguments: ["watch", "bad key", "--count", "1"], status: 65, says: "not allowed in a key"),
            Case(arguments: ["get", "absent.key"], status: 1, says: "absent.key"),
            Case(arguments: ["delete", "absent.key"], status: 1, says: "absent.key"),
            // Values and types.
            Case(arguments: ["set", "v.k", "{\"a\":"], status: 65, says: "is not valid JSON"),
            Case(arguments: ["set", "v.k", "[1,2"], status: 65, says: "unterminated list"),
            Case(arguments: ["set", "v.k", "99999999999999999999"], status: 65, says: "does not fit in 64 bits"),
            Case(arguments: ["set", "v.k", "1.5", "--type", "int"], status: 65, says: "'1.5' is not a valid int"),
            Case(arguments: ["set", "v.k", "abc", "--type", "bool"], status: 65, says: "not a valid bool"),
            Case(arguments: ["set", "v.k", "not base64!", "--type", "bytes"], status: 65, says: "not a valid bytes"),
            Case(arguments: ["set", "v.k", "x", "--type", "null"], status: 65, says: "not a valid null"),
            Case(arguments: ["set", "v.k", "nan", "--type", "double"], status: 65, says: "not a valid double"),
            Case(arguments: ["set", "v.k", "inf", "--type", "double"], status: 65, says: "not a valid double"),
            Case(arguments: ["set", "v.k", "1", "--type", "float128"], status: 64, says: "unknown --type 'float128'"),
            Case(arguments: ["set", "v.k", "-", "--type", "string"], input: String(repeating: "x", count: 1_100_000), status: 65, says: "1048576"),
            // Options.
            Case(arguments: ["set", "v.k", "1", "--ttl", "-5"], status: 64, says: "'-5' is invalid for '--ttl <ms>'"),
            Case(arguments: ["set", "v.k", "1", "--ttl", "abc"], status: 64, says: "'abc' is invalid for '--ttl <ms>'"),
            Case(arguments: ["set", "v.k", "1", "--ttl", "1e3"], status: 64, says: "'1e3' is invalid"),
            Case(arguments: ["set", "v.k", "1", "--ttl", "99999999999999999999"], status: 64, says: "is invalid for '--ttl <ms>'"),
            Case(arguments: ["set", "v.k", "1", "--ttl", "9999999999999999"], status: 65, says: "ttl_ms is 9999999999999999; the limit is"),
            Case(arguments: ["set", "v.k", "1", "--if-version", "-1"], status: 64, says: "'-1' is invalid for '--if-version <n>'"),
            Case(arguments: ["set", "v.k", "1", "--if-version", "x"], status: 64, says: "'x' is invalid"),
            Case(arguments: ["set", "k", "2", "--if-version", "7"], status: 3, says: "not 7"),
            Case(arguments: ["set", "k", "2", "--create"], status: 3, says: "k"),
            Case(arguments: ["delete", "k", "--prefix", "--if-version", "1"], status: 64, says: "--if-version applies to one key"),
            Case(arguments: ["watch", "--count", "0"], status: 64, says: "--count must be at least 1"),
            Case(arguments: ["watch", "--count", "-1"], status: 64, says: "--count must be at least 1"),
            Case(arguments: ["pub", "--window", "0"], input: "", status: 64, says: "--window must be at least 1"),
            Case(arguments: ["pub", "--window", "-3"], input: "", status: 64, says: "--window must be at least 1"),
            Case(arguments: ["get", "k", "--timeout", "0"], status: 64, says: "--timeout must be at least 1 ms"),
            Case(arguments: ["get", "k", "--timeout", "-5"], status: 64, says: "--timeout must be at least 1 ms"),
            Case(arguments: ["get", "k", "--timeout", "abc"], status: 64, says: "'abc' is invalid for '--timeout <ms>'"),
            Case(arguments: ["history", "k", "--from", "abc"], status: 64, says: "'abc' is invalid for '--from <rev>'"),
            Case(arguments: ["history", "k", "--to", "-1"], status: 64, says: "'-1' is invalid for '--to <rev>'"),
            Case(arguments: ["history", "k", "--from", "9", "--to", "2"], status: 64, says: "--from 9 is after --to 2"),
            Case(arguments: ["replay", "--from", "5", "--to", "1"], status: 64, says: "--from 5 is after --to 1"),
            Case(arguments: ["get", "k", "--frobnicate"], status: 64, says: "Unknown option '--frobnicate'"),
            Case(arguments: ["frobnicate"], status: 64, says: "frobnicate", daemon: .explicit),
            Case(arguments: ["get"], status: 64, says: "Missing expected argument"),
            Case(arguments: ["set", "k"], status: 64, says: "Missing expected argument"),
            Case(arguments: ["delete"], status: 64, says: "Missing expected argument"),
            Case(arguments: ["history"], status: 64, says: "Missing expected argument"),
            Case(arguments: ["stats", "extra"], status: 64, says: "Unexpected argument 'extra'"),
            Case(arguments: ["ping", "--wait", "-1"], status: 64, says: "--wait must be 0 to 86400 seconds"),
            // Standard input.
            Case(arguments: ["txn"], input: "", status: 64, says: "no operations on standard input"),
            Case(arguments: ["txn"], input: "tx.a 1\nbroken\n", status: 65, says: "line 2: expected KEY VALUE; nothing applied"),
            Case(arguments: ["txn"], input: "tx.a 1\ntx.b {\"x\"\n", status: 65, says: "line 2:"),
            Case(arguments: ["txn"], input: (1...1100).map { "tx.k\($0) 1" }.joined(separator: "\n"), status: 65,
                 says: "1100 operations on standard input; a transaction holds at most 1024"),
            Case(arguments: ["txn"], input: "{\"key\":\"tx.a\",\"op\":\"frob\"}\n", status: 65, says: "unknown op \"frob\""),
            Case(arguments: ["txn"], input: "{\"key\":\"tx.a\",\"value\":1,\"if_version\":-2}\n", status: 65, says: "\"if_version\" is not a version number"),
            Case(arguments: ["set", "v.k", "-"], input: String(repeating: "a", count: 5_000_000), status: 65, says: "a value is at most 1048576 bytes"),
            Case(arguments: ["set", "v.k", "-", "--type", "int"], input: "12x", status: 65, says: "'12x' is not a valid int"),
            Case(arguments: ["pub"], input: "ok.line 1\nno-value\n", status: 65, says: "line 2: expected KEY VALUE"),
            Case(arguments: ["pub"], input: "{\"key\": 5}\n", status: 65, says: "line 1: no \"key\" string"),
            Case(arguments: ["pub"], input: "{\"key\":\"p.k\"}\n", status: 65, says: "line 1: no \"value\" for p.k"),
            Case(arguments: ["pub", "--strict"], input: "no-value-here\nok.never 1\n", status: 65, says: "line 1: expected KEY VALUE"),
            // Files.
            Case(arguments: ["backup"], status: 64, says: "Missing expected argument"),
            Case(arguments: ["backup", "/nonexistent-dir/copy"], status: 73, says: "cannot write /nonexistent-dir/copy.partial"),
            Case(arguments: ["backup", dir + "/existing"], status: 64, says: "exists; use --force"),
            Case(arguments: ["backup", dir + "/fifo", "--force"], status: 73, says: "is a pipe; a backup replaces only a regular file"),
            Case(arguments: ["backup", dir + "/link", "--force"], status: 73, says: "is a symbolic link"),
            Case(arguments: ["backup", dir, "--force"], status: 73, says: "is a directory"),
            Case(arguments: ["keygen"], status: 64, says: "Missing expected argument", daemon: .explicit),
            Case(arguments: ["keygen", "/nonexistent-dir/key"], status: 73, says: "cannot write /nonexistent-dir/key.key", daemon: .explicit),
            Case(arguments: ["keygen", dir + "/taken"], status: 64, says: "taken.key exists; use --force", daemon: .explicit),
            // The daemon: absent, killed, stopped, endpoints and keys.
            Case(arguments: ["get", "k"], status: 69, says: "no daemon at", daemon: .none),
            Case(arguments: ["ping", "--wait", "0.3"], status: 69, says: "no daemon at", daemon: .none),
            Case(arguments: ["ping"], status: 69, says: "no daemon listens at", daemon: .killed),
            Case(arguments: ["get", "k"], status: 69, says: "no daemon listens at", daemon: .killed),
            Case(arguments: ["set", "k", "1"], status: 69, says: "no daemon listens at", daemon: .killed),
            Case(arguments: ["pub"], input: "p.k 1\n", status: 69, says: "no daemon at", daemon: .stopped),
            Case(arguments: ["get", "k", "--endpoint", "notaurl"], status: 64, says: "notaurl", daemon: .explicit),
            Case(arguments: ["get", "k", "--endpoint", "tcp://127.0.0.1"], status: 64, says: "tcp://127.0.0.1", daemon: .explicit),
            Case(arguments: ["get", "k", "--endpoint", "tcp://127.0.0.1:1", "--server-key", "abc"], status: 64,
                 says: "CURVE needs both --server-key and --key-file", daemon: .explicit),
            Case(arguments: ["get", "k", "--endpoint", "tcp://127.0.0.1:1", "--server-key", "abc", "--key-file", "/nonexistent-key"],
                 status: 64, says: "key", daemon: .explicit),
        ]
    }

    @Test func everyBadInputGetsItsExitCodeOneClearLineAndStoresNothing() async throws {
        let dir = try temporaryDirectory()
        let live = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { live.stop() }
        let killed = try DaemonProcess(runtimeDirectory: dir + "/killed-run", stateDirectory: dir + "/killed-state")
        killed.stop(signal: SIGKILL)
        let stopped = try DaemonProcess(runtimeDirectory: dir + "/stopped-run", stateDirectory: dir + "/stopped-state")
        stopped.stop()
        let wire = try WireClient.patient(runtimeDirectory: live.runtimeDirectory)
        _ = try wire.put("k", .with { $0.intValue = 1 })
        try "x".write(toFile: dir + "/existing", atomically: true, encoding: .utf8)
        try "x".write(toFile: dir + "/taken.key", atomically: true, encoding: .utf8)
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        #expect(symlink(dir + "/existing", dir + "/link") == 0)
        let before = try wire.snapshot(prefix: "")

        let cases = Self.cases(dir: dir)
        #expect(cases.count >= 75)
        for testCase in cases {
            let runtime: String? = switch testCase.daemon {
            case .live: live.runtimeDirectory
            case .none: dir + "/nowhere"
            case .killed: killed.runtimeDirectory
            case .stopped: stopped.runtimeDirectory
            case .explicit: nil
            }
            let result = try await beacon(testCase.arguments, input: testCase.input, runtimeDirectory: runtime, limitSeconds: 60)
            #expect(result.status == testCase.status, "\(testCase): \(result.stderr)")
            let lines = result.stderr.split(separator: "\n")
            #expect(lines.first?.contains(testCase.says) == true, "\(testCase) said: \(result.stderr)")
            #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("Backtrac"), "\(testCase): \(result.stderr)")
            // Usage errors add ArgumentParser's usage lines; pub names each refused line; every
            // other answer is one line.
            if testCase.status != 64 && testCase.arguments.first != "pub" {
                #expect(lines.count == 1, "\(testCase): \(result.stderr)")
            }
        }
        // Only the good lines of pub stored anything; every other key is as it was.
        let after = try wire.snapshot(prefix: "")
        #expect(Set(after.kvs.map(\.key)) == Set(before.kvs.map(\.key)).union(["ok.line"]), "\(after.kvs.map(\.key))")
        #expect(try wire.get("k").value.intValue == 1)
        // Nothing was replaced or left behind.
        #expect(try String(contentsOfFile: dir + "/existing", encoding: .utf8) == "x")
        #expect(try String(contentsOfFile: dir + "/taken.key", encoding: .utf8) == "x")
        #expect(!FileManager.default.fileExists(atPath: "/nonexistent-dir"))
    }

    /// beacond's own bad inputs: a configuration with a typo or a bad value, a missing file, a
    /// journal that is not a database, an unknown option.
    @Test func beacondRefusesBadConfigurationAndACorruptJournalWithOneLine() throws {
        let dir = try temporaryDirectory()
        try "retention_revsions = 5\n".write(toFile: dir + "/typo.conf", atomically: true, encoding: .utf8)
        try "retention_revisions = -5\n".write(toFile: dir + "/negative.conf", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dir + "/corrupt", withIntermediateDirectories: true)
        try Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(to: URL(fileURLWithPath: dir + "/corrupt/journal.sqlite"))
        let base = ["--runtime-dir", dir + "/run", "--state-dir", dir + "/state"]
        let cases: [(arguments: [String], status: Int32, says: String)] = [
            (base + ["--config", dir + "/typo.conf"], 78, "typo.conf:1: unknown setting 'retention_revsions'"),
            (base + ["--config", dir + "/negative.conf"], 78, "negative.conf:1: 'retention_revisions' is a whole number from 0 to 1000000000000; 0: no count limit, not '-5'"),
            (base + ["--config", dir + "/absent.conf"], 78, "cannot read configuration"),
            (["--runtime-dir", dir + "/run", "--state-dir", dir + "/corrupt"], 74, "journal corrupt"),
            (base + ["--bogus"], 64, "Unknown option '--bogus'"),
        ]
        for testCase in cases {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: try binary("beacond"))
            process.arguments = testCase.arguments
            let errors = Pipe.forChild()
            process.standardError = errors
            process.standardOutput = FileHandle.nullDevice
            try process.runSerially()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(process.waitUntilExit(orKillAfterSeconds: 30), "beacond \(testCase.arguments) kept running")
            #expect(process.terminationStatus == testCase.status, "beacond \(testCase.arguments): \(stderr)")
            #expect(stderr.split(separator: "\n").first?.contains(testCase.says) == true, "beacond \(testCase.arguments): \(stderr)")
        }
    }
}
