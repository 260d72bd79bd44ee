import BeaconLocking
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// What a `beacon` run printed and how it ended.
struct ToolRun {
    var status: Int32
    var stdout: String
    var stderr: String
    var lines: [String] { stdout.split(separator: "\n").map(String.init) }
    func json(_ line: Int = 0) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(lines[line].utf8)) as? [String: Any])
    }
}

/// Runs the built `beacon` with `arguments`, feeding `input` on stdin. The waiting happens on a
/// thread of its own: a test must not hold one of Swift's few cooperative threads for the
/// length of a long run, or every other test stalls. A run still going after `limitSeconds` is
/// killed (status 9, and stderr says so): a test never waits on it for ever.
func beacon(_ arguments: [String], input: String? = nil, runtimeDirectory: String?,
            environment: [String: String] = [:], limitSeconds: Double = 120) async throws -> ToolRun {
    let path = try binary("beacon")
    return try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            continuation.resume(with: Result {
                try runBlocking(path, arguments, input: input, runtimeDirectory: runtimeDirectory, environment: environment,
                                limitSeconds: limitSeconds)
            })
        }
    }
}

private func runBlocking(_ path: String, _ arguments: [String], input: String?, runtimeDirectory: String?,
                         environment: [String: String], limitSeconds: Double) throws -> ToolRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    if !environment.isEmpty {
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    }
    // Options of a subcommand follow it; a usage error must stay one (no directory appended).
    process.arguments = arguments + (runtimeDirectory.map { ["--runtime-dir", $0] } ?? [])
    let out = Pipe.forChild(), err = Pipe.forChild(), inPipe = Pipe.forChild()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = inPipe
    try process.runSerially()
    if let input {
        // A tool that exits before reading all of its input closes the pipe: the rest is dropped
        // (EPIPE, with SIGPIPE ignored), where FileHandle.write would end the test process.
        signal(SIGPIPE, SIG_IGN)
        let bytes = Array(input.utf8)
        Thread.detachNewThread {
            let fd = inPipe.fileHandleForWriting.fileDescriptor
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { break }
                offset += written
            }
            try? inPipe.fileHandleForWriting.close()
        }
    } else {
        try? inPipe.fileHandleForWriting.close()
    }
    let stdoutData = Locked(Data())
    let reader = Thread { let data = out.fileHandleForReading.readDataToEndOfFile(); stdoutData.withLock { $0 = data } }
    reader.start()
    let stderrData = Locked(Data())
    let errorReader = Thread { let data = err.fileHandleForReading.readDataToEndOfFile(); stderrData.withLock { $0 = data } }
    errorReader.start()
    let exited = process.waitUntilExit(orKillAfterSeconds: limitSeconds)
    for thread in [reader, errorReader] {
        while thread.isExecuting || !thread.isFinished { usleep(1000) }
    }
    let stderr = String(decoding: stderrData.withLock { $0 }, as: UTF8.self)
    return ToolRun(status: process.terminationStatus, stdout: String(decoding: stdoutData.withLock { $0 }, as: UTF8.self),
                   stderr: exited ? stderr : stderr + "\n(beacon \(arguments.first ?? "") killed after \(limitSeconds) s)")
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct CLITests {
    @Test func setGetListDeleteRoundTripAndJSONParsesBack() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let set = try await beacon(["set", "net.mtu", "1500", "--json"], runtimeDirectory: run)
        #expect(set.status == 0)
        #expect(try set.json()["revision"] as? Int == 1)
        #expect(try await beacon(["set", "net.ssid", "home"], runtimeDirectory: run).stdout == "net.ssid = \"home\" at revision 2 (version 1)\n")
        #expect(try await beacon(["set", "net.cfg", "{\"a\":[1,true]}"], runtimeDirectory: run).status == 0)
        #expect(try await beacon(["set", "net.mtu", "9000", "--if-version", "1"], runtimeDirectory: run).status == 0)

        let get = try await beacon(["get", "net.mtu", "--json"], runtimeDirectory: run)
        #expect(try get.json()["value"] as? Int == 9000)
        #expect(try get.json()["version"] as? Int == 2)
        #expect(try await beacon(["get", "net.cfg"], runtimeDirectory: run).stdout == "{\"a\":[1,true]}\n")

        let list = try await beacon(["ls", "net.", "--json"], runtimeDirectory: run)
        #expect(list.lines.count == 3)
        #expect(try (0..<3).map { try list.json($0)["key"] as? String } == ["net.cfg", "net.mtu", "net.ssid"])

        #expect(try await beacon(["delete", "net.ssid"], runtimeDirectory: run).status == 0)
        #expect(try await beacon(["ls", "net."], runtimeDirectory: run).lines == ["net.cfg = {\"a\":[1,true]}", "net.mtu = 9000"])
        let history = try await beacon(["history", "net.ssid", "--json"], runtimeDirectory: run)
        #expect(try history.json(1)["op"] as? String == "delete")
        // Each change carries its commit time.
        let committed = try #require(try history.json(1)["timestamp_ms"] as? Int)
        #expect(abs(Double(committed) / 1000 - Date().timeIntervalSince1970) < 120)
        // A current value carries the commit time of the write that made it, in the same field.
        let mtuHistory = try await beacon(["history", "net.mtu", "--json"], runtimeDirectory: run)
        let lastWrite = try #require(try mtuHistory.json(mtuHistory.lines.count - 1)["timestamp_ms"] as? Int)
        #expect(try get.json()["timestamp_ms"] as? Int == lastWrite)
        let listed = try await beacon(["ls", "net.", "--json"], runtimeDirectory: run)
        #expect(try (0..<2).allSatisfy { try listed.json($0)["timestamp_ms"] is Int })
    }

    @Test func aHundredThousandPublishedLinesArriveCompleteAndInOrderAtAConcurrentSubscriber() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        // 100,000 lines; 10,000 in the ThreadSanitizer run (`make test-race`), whose binaries are
        // several times slower.
        let count = ProcessInfo.processInfo.environment["BEACON_SANITIZED_RUN"] == nil ? 100_000 : 10_000
        // From revision 1, the replay then live: every change is printed once, in order, however
        // many the subscriber's start overlaps (a snapshot would print the keys' current values).
        let subscriber = Task(executorPreference: ThreadPerJobExecutor.shared) { try await beacon(["sub", "feed.", "--from", "1", "--count", "\(count)", "--json"], runtimeDirectory: run) }
        // Wait until the subscriber follows the prefix, then publish.
        let wire = try WireClient.patient(runtimeDirectory: run)
        let deadline = ContinuousClock.now + .seconds(30)
        while try wire.stats().trackedPrefixes == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        let input = (0..<count).map { "feed.k\($0 % 100) \($0)" }.joined(separator: "\n") + "\n"
        let published = try await beacon(["pub", "--json"], input: input, runtimeDirectory: run)
        #expect(published.status == 0, "\(published.stderr)")
        #expect(try published.json()["committed"] as? Int == count)

        let received = try await subscriber.value
        #expect(received.status == 0, "\(received.stderr)")
        let lines = received.lines
        #expect(lines.count == count)
        var expected = 0
        var lastRevision = 0
        for line in lines {
            guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let value = object["value"] as? Int, let revision = object["revision"] as? Int else {
                Issue.record("unexpected line \(line)")
                return
            }
            if value != expected || revision <= lastRevision {
                Issue.record("line \(expected): value \(value), revision \(revision) after \(lastRevision)")
                return
            }
            expected += 1
            lastRevision = revision
        }
    }

    /// beacond left its socket files behind after a clean stop, so every later command waited
    /// out its 5 s timeout before exit 69; and a file left by a killed daemon did the same.
    @Test func aStoppedOrKilledDaemonIsReportedAtOnce() async throws {
        let dir = try temporaryDirectory()
        let run = dir + "/run"
        var daemon = try DaemonProcess(runtimeDirectory: run, stateDirectory: dir + "/state")
        #expect(daemon.stop() == 0)
        #expect(!FileManager.default.fileExists(atPath: run + "/" + WireEndpoint.requestSocketName), "a clean stop removes its sockets")
        #expect(!FileManager.default.fileExists(atPath: run + "/" + WireEndpoint.publishSocketName))
        var answer = try await beacon(["get", "k"], runtimeDirectory: run)
        #expect(answer.status == 69 && answer.stderr.contains("no socket"), "\(answer.stderr)")

        daemon = try DaemonProcess(runtimeDirectory: run, stateDirectory: dir + "/state")
        #expect(daemon.stop(signal: SIGKILL) == SIGKILL)
        #expect(FileManager.default.fileExists(atPath: run + "/" + WireEndpoint.requestSocketName), "kill -9 leaves them")
        answer = try await beacon(["get", "k"], runtimeDirectory: run)
        #expect(answer.status == 69 && answer.stderr.contains("no daemon listens"), "\(answer.stderr)")
        #expect(answer.stderr.split(separator: "\n").count == 1)
    }

    /// Bytes that are not UTF-8, as an argument or on standard input, were stored as U+FFFD.
    @Test func invalidUTF8IsRefusedNotRewritten() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let tool = try binary("beacon")
        // The shell hands beacon the raw bytes 0xFF 0xFE, which a Swift String cannot carry.
        for script in ["\"$0\" set v.utf \"$(printf '\\377\\376')\" --runtime-dir \"$1\"",
                       "printf '\\377\\376' | \"$0\" set v.utf - --runtime-dir \"$1\"",
                       "\"$0\" set \"k$(printf '\\377')\" 1 --runtime-dir \"$1\""] {
            let shell = Process()
            shell.executableURL = URL(fileURLWithPath: "/bin/sh")
            shell.arguments = ["-c", script, tool, run]
            let errors = Pipe.forChild()
            shell.standardError = errors
            shell.standardOutput = FileHandle.nullDevice
            try shell.runSerially()
            let stderr = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            shell.waitUntilExit(orKillAfterSeconds: 60)
            #expect(shell.terminationStatus == 65, "\(script): \(stderr)")
            #expect(stderr.contains("not valid UTF-8") && stderr.split(separator: "\n").count == 1, "\(script): \(stderr)")
        }
        #expect(try await beacon(["get", "v.utf"], runtimeDirectory: run).status == 1, "nothing was stored")
        // Raw bytes are stored as bytes when asked for.
        #expect(try await beacon(["set", "v.raw", "//4=", "--type", "bytes"], runtimeDirectory: run).status == 0)
        #expect(try await beacon(["get", "v.raw"], runtimeDirectory: run).stdout == "{\"$bytes\":\"//4=\"}\n")
    }

    @Test func badInputGivesOneLineOnStderrAndTheDocumentedExitCode() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        _ = try await beacon(["set", "k", "1"], runtimeDirectory: run)
        let cases: [(arguments: [String], input: String?, status: Int32, runtime: String?)] = [
            (["get", "absent"], nil, 1, run),                                   // not found
            (["delete", "absent"], nil, 1, run),
            (["set", "k", "2", "--if-version", "7"], nil, 3, run),               // version conflict
            (["set", "k", "2", "--create"], nil, 3, run),                        // exists
            (["set", "bad..key", "1"], nil, 65, run),                            // invalid key
            (["set", "k", "x", "--type", "int"], nil, 65, run),                  // unparsable value
            (["set", "k", "1", "--type", "float128"], nil, 64, run),             // unknown type
            (["set", "k"], nil, 64, run),                                        // missing argument
            (["frobnicate"], nil, 64, run),                                      // unknown command
            (["pub"], "ok.k 1\nnot-a-pair\n", 65, run),                          // a refused line
            (["get", "k", "--timeout", "300"], nil, 69, dir + "/nowhere"),       // daemon unreachable
            (["get", "a.b", "--endpoint", "notaurl"], nil, 64, nil),             // not an endpoint
            (["get", "a.b", "--endpoint", "tcp://127.0.0.1"], nil, 64, nil),     // no port
            (["get", "a.b", "--endpoint", "ipc://run/beacon.req", "--pub-endpoint", "tcp://:7402"], nil, 64, nil),
        ]
        for testCase in cases {
            let result = try await beacon(testCase.arguments, input: testCase.input, runtimeDirectory: testCase.runtime)
            #expect(result.status == testCase.status, "beacon \(testCase.arguments): \(result.stderr)")
            #expect(!result.stderr.isEmpty, "beacon \(testCase.arguments) said nothing on stderr")
            #expect(!result.stderr.contains("Fatal error") && !result.stderr.contains("Backtrac"), "\(result.stderr)")
            if testCase.status != 64 && testCase.arguments.first != "pub" {
                #expect(result.stderr.split(separator: "\n").count == 1, "beacon \(testCase.arguments): \(result.stderr)")
            }
        }
        // The refused line is named; the good one was committed.
        #expect(try await beacon(["get", "ok.k"], runtimeDirectory: run).stdout == "1\n")
    }

    @Test func aReaderThatGoesAwayEndsTheStreamWithExitCode74() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let input = (0..<3000).map { "h.k \($0)" }.joined(separator: "\n") + "\n"
        #expect(try await beacon(["pub"], input: input, runtimeDirectory: daemon.runtimeDirectory).status == 0)
        // `beacon history` into a pipe whose reader closes after the first bytes.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacon"))
        process.arguments = ["history", "h.k", "--runtime-dir", daemon.runtimeDirectory]
        let out = Pipe.forChild(), err = Pipe.forChild()
        process.standardOutput = out
        process.standardError = err
        try process.runSerially()
        _ = out.fileHandleForReading.readData(ofLength: 16)
        try out.fileHandleForReading.close()
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 74)
        #expect(stderr.hasPrefix("beacon: output closed"))
    }

    @Test func replayFeedsPubOfAnotherDaemon() async throws {
        let dir = try temporaryDirectory()
        let source = try DaemonProcess(runtimeDirectory: dir + "/a", stateDirectory: dir + "/as")
        defer { source.stop() }
        let target = try DaemonProcess(runtimeDirectory: dir + "/b", stateDirectory: dir + "/bs")
        defer { target.stop() }
        _ = try await beacon(["pub"], input: "r.a 1\nr.b [1,2]\nr.c \"x\"\n", runtimeDirectory: source.runtimeDirectory)
        _ = try await beacon(["delete", "r.c"], runtimeDirectory: source.runtimeDirectory)
        let replay = try await beacon(["replay", "r."], runtimeDirectory: source.runtimeDirectory)
        #expect(replay.lines.count == 4)
        let applied = try await beacon(["pub"], input: replay.stdout, runtimeDirectory: target.runtimeDirectory)
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(try await beacon(["ls", "r."], runtimeDirectory: target.runtimeDirectory).stdout
                == (try await beacon(["ls", "r."], runtimeDirectory: source.runtimeDirectory)).stdout)
    }

    @Test func replayWritesEachChangesRecordWithItsKeysSortedAndItsStringsEscaped() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        _ = try await beacon(["set", "e.s", "\"q\\\"\\\\ \\t é \\u0001\""], runtimeDirectory: daemon.runtimeDirectory)
        _ = try await beacon(["set", "e.b", "AAEC", "--type", "bytes"], runtimeDirectory: daemon.runtimeDirectory)
        _ = try await beacon(["delete", "e.s"], runtimeDirectory: daemon.runtimeDirectory)
        let replay = try await beacon(["replay", "e."], runtimeDirectory: daemon.runtimeDirectory)
        // Timestamps vary: the rest is exact, and every line reads back as JSON.
        let lines = replay.lines.map { $0.replacing(/"timestamp_ms":[0-9]+,/, with: "") }
        #expect(lines == [
            #"{"key":"e.s","op":"put","part":0,"parts":1,"revision":1,"value":"q\"\\ \t é \u0001","version":1}"#,
            #"{"key":"e.b","op":"put","part":0,"parts":1,"revision":2,"value":{"$bytes":"AAEC"},"version":1}"#,
            #"{"key":"e.s","op":"delete","part":0,"parts":1,"revision":3,"version":0}"#,
        ])
        #expect(replay.lines.allSatisfy { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) != nil })
        #expect(replay.lines.allSatisfy { $0.contains("\"timestamp_ms\":") })
    }

    @Test func benchLoadsTheDaemonAndReportsThroughputAndPercentiles() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = try await beacon(["bench", "--writes", "2000", "--samples", "100", "--keys", "10", "--json"],
                                   runtimeDirectory: daemon.runtimeDirectory)
        #expect(run.status == 0, "\(run.stderr)")
        let report = try run.json()
        #expect(report["refused"] as? Int == 0)
        #expect((report["writes_per_second"] as? Double ?? 0) > 0)
        let p50 = report["p50_us"] as? Double ?? 0, p99 = report["p99_us"] as? Double ?? 0
        #expect(p50 > 0 && p99 >= p50)
        // Every put was committed: 2,000 pipelined and 100 timed.
        let stats = try await beacon(["stats", "--json"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(try stats.json()["head_revision"] as? Int == 2100)
        // A rate over the last seconds: present, but the writes may already be out of its window.
        #expect(try stats.json()["writes_per_second"] as? Double != nil)
        #expect(try stats.json()["request_connections"] as? Int == 1)  // the stats command's own
        #expect(try await beacon(["bench", "--window", "0"], runtimeDirectory: daemon.runtimeDirectory).status == 64)
    }

    @Test func subFollowsSeveralPrefixesAsOneStreamInRevisionOrder() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        _ = try await beacon(["pub"], input: "net.a 1\nnfs.b 2\nnot.c 3\n", runtimeDirectory: run)
        // Replay from revision 1, then live; only net. and nfs. changes, in revision order.
        let subscriber = Task(executorPreference: ThreadPerJobExecutor.shared) { try await beacon(["sub", "net.", "nfs.", "--from", "1", "--count", "4", "--json"], runtimeDirectory: run) }
        let wire = try WireClient.patient(runtimeDirectory: run)
        let deadline = ContinuousClock.now + .seconds(30)
        while try wire.stats().trackedPrefixes == 0 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(try await beacon(["stats", "--json"], runtimeDirectory: run).json()["subscriber_connections"] as? Int == 1)
        _ = try await beacon(["pub"], input: "not.d 4\nnfs.e 5\nnet.f 6\n", runtimeDirectory: run)
        let received = try await subscriber.value
        #expect(received.status == 0, "\(received.stderr)")
        #expect(try (0..<received.lines.count).map { try received.json($0)["key"] as? String } == ["net.a", "nfs.b", "nfs.e", "net.f"])
        #expect(try (0..<received.lines.count).map { try received.json($0)["revision"] as? Int } == [1, 2, 5, 6])
    }
    @Test func valuesKeepEveryTypeThroughReplayAndPub() async throws {
        let dir = try temporaryDirectory()
        let source = try DaemonProcess(runtimeDirectory: dir + "/a", stateDirectory: dir + "/as")
        defer { source.stop() }
        let target = try DaemonProcess(runtimeDirectory: dir + "/b", stateDirectory: dir + "/bs")
        defer { target.stop() }
        let lines = [
            #"{"key":"t.int","value":1}"#,
            #"{"key":"t.double","value":1.0}"#,
            #"{"key":"t.exponent","value":1e300}"#,
            #"{"key":"t.negative","value":-0.5}"#,
            #"{"key":"t.min","value":-9223372036854775808}"#,
            #"{"key":"t.bytes","value":{"$bytes":"AAEC/w=="}}"#,
            #"{"key":"t.nan","value":{"$double":"NaN"}}"#,
            #"{"key":"t.nested","value":{"list":[1,2.5,"3",{"$bytes":""}],"map":{"$map":{"$bytes":"not bytes"}}}}"#,
            #"{"key":"t.text","value":"1"}"#,
            #"{"key":"t.escapes","value":"a\"b\\c\n\u00e9\ud83d\ude00"}"#,
            #"{"key":"t.bool","value":false}"#,
            #"{"key":"t.null","value":null}"#,
            "t.plain 2.0",
        ]
        let published = try await beacon(["pub"], input: lines.joined(separator: "\n") + "\n", runtimeDirectory: source.runtimeDirectory)
        #expect(published.status == 0, "\(published.stderr)")
        let replay = try await beacon(["replay", "t."], runtimeDirectory: source.runtimeDirectory)
        #expect(replay.lines.count == lines.count)
        let applied = try await beacon(["pub"], input: replay.stdout, runtimeDirectory: target.runtimeDirectory)
        #expect(applied.status == 0, "\(applied.stderr)")
        let from = try WireClient.patient(runtimeDirectory: source.runtimeDirectory)
        let to = try WireClient.patient(runtimeDirectory: target.runtimeDirectory)
        for key in ["t.int", "t.double", "t.exponent", "t.negative", "t.min", "t.bytes", "t.nested", "t.text", "t.escapes",
                    "t.bool", "t.null", "t.plain"] {
            #expect(try to.get(key).value == from.get(key).value, "\(key)")
        }
        #expect(try to.get("t.nan").value.doubleValue.isNaN)
        // The types themselves, as the library sees them.
        #expect(try from.get("t.int").value.kind == .intValue(1))
        #expect(try from.get("t.double").value.kind == .doubleValue(1.0))
        #expect(try from.get("t.plain").value.kind == .doubleValue(2.0))
        #expect(try from.get("t.bytes").value.kind == .bytesValue(Data([0, 1, 2, 255])))
        #expect(try from.get("t.text").value.kind == .stringValue("1"))
        #expect(try from.get("t.nested").value.mapValue.entries["map"]?.mapValue.entries["$bytes"]?.stringValue == "not bytes")
        // What `get` prints reads back as the same value.
        let printed = try await beacon(["get", "t.nested"], runtimeDirectory: source.runtimeDirectory)
        #expect(try ValueJSON.parse(printed.stdout.trimmingCharacters(in: .newlines)) == from.get("t.nested").value)
        #expect(try await beacon(["get", "t.double"], runtimeDirectory: source.runtimeDirectory).stdout == "1.0\n")
    }

    @Test func setRefusesBrokenJSONAndOversizedIntegersAndReadsBytesAndStandardInput() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let broken = try await beacon(["set", "k.broken", #"{"a":1"#], runtimeDirectory: run)
        #expect(broken.status == 65)
        #expect(broken.stderr.contains("not valid JSON"))
        let big = try await beacon(["set", "k.big", "12345678901234567890"], runtimeDirectory: run)
        #expect(big.status == 65)
        #expect(big.stderr.contains("does not fit in 64 bits"))
        #expect(try await beacon(["get", "k.broken"], runtimeDirectory: run).status == 1)
        #expect(try await beacon(["get", "k.big"], runtimeDirectory: run).status == 1)
        // What the user asked for explicitly is stored as it is.
        #expect(try await beacon(["set", "k.text", #"{"a":1"#, "--type", "string"], runtimeDirectory: run).status == 0)
        let wire = try WireClient.patient(runtimeDirectory: run)
        #expect(try wire.get("k.text").value.kind == .stringValue(#"{"a":1"#))
        #expect(try await beacon(["set", "k.big", "12345678901234567890", "--type", "double"], runtimeDirectory: run).status == 0)
        #expect(try wire.get("k.big").value.kind == .doubleValue(Double("12345678901234567890")!))
        // Text that is not meant as JSON is a string, as before.
        #expect(try await beacon(["set", "k.version", "1.2.3"], runtimeDirectory: run).status == 0)
        #expect(try wire.get("k.version").value.kind == .stringValue("1.2.3"))
        // Bytes from base64, and raw from standard input; a value from standard input.
        #expect(try await beacon(["set", "k.bytes", "AAEC/w==", "--type", "bytes"], runtimeDirectory: run).status == 0)
        #expect(try wire.get("k.bytes").value.kind == .bytesValue(Data([0, 1, 2, 255])))
        #expect(try await beacon(["set", "k.raw", "-", "--type", "bytes"], input: "\u{1}\u{2}\n", runtimeDirectory: run).status == 0)
        #expect(try wire.get("k.raw").value.kind == .bytesValue(Data([1, 2, 10])))
        #expect(try await beacon(["set", "k.stdin", "-"], input: #"{"b":[1,2.5]}"# + "\n", runtimeDirectory: run).status == 0)
        #expect(try wire.get("k.stdin").value.jsonText == #"{"b":[1,2.5]}"#)
        #expect(try await beacon(["set", "k.bad", "AA*", "--type", "bytes"], runtimeDirectory: run).status == 65)
        // pub refuses the same lines and applies the rest.
        let pub = try await beacon(["pub"], input: "p.a {\"x\":\np.b 99999999999999999999\np.c 3\n", runtimeDirectory: run)
        #expect(pub.status == 65)
        #expect(pub.stderr.contains("line 1") && pub.stderr.contains("line 2"))
        #expect(try wire.get("p.c").value.kind == .intValue(3))
    }

    @Test func aClosedPipeOnStandardErrorEndsPubWithExitCode74() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        // `beacon pub … 2>&1 | head -c 16`: every line is refused, so stderr carries the output.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacon"))
        process.arguments = ["pub", "--runtime-dir", daemon.runtimeDirectory]
        let out = Pipe.forChild(), input = Pipe.forChild()
        process.standardOutput = out
        process.standardError = out
        process.standardInput = input
        try process.runSerially()
        // The feeder stops at the first failed write: once `beacon` exits, the pipe is closed.
        signal(SIGPIPE, SIG_IGN)
        let lines = Array(String(repeating: "no-value-on-this-line\n", count: 200_000).utf8)
        let feeder = input.fileHandleForWriting
        Thread.detachNewThread {
            var offset = 0
            while offset < lines.count {
                let written = lines.withUnsafeBytes { write(feeder.fileDescriptor, $0.baseAddress! + offset, $0.count - offset) }
                if written <= 0 { break }
                offset += written
            }
            try? feeder.close()
        }
        _ = out.fileHandleForReading.readData(ofLength: 16)
        try out.fileHandleForReading.close()
        process.waitUntilExit()
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 74)
    }

    @Test func watchReportsAResyncWithDeletesForWhatVanished() async throws {
        let dir = try temporaryDirectory()
        let run = dir + "/run"
        // The journal that will replace the first one: w.keep written there, at other revisions.
        let other = try DaemonProcess(runtimeDirectory: dir + "/prepare", stateDirectory: dir + "/state2")
        _ = try await beacon(["pub"], input: "x.1 1\nw.keep 3\n", runtimeDirectory: other.runtimeDirectory)
        #expect(other.stop() == 0)
        var daemon = try DaemonProcess(runtimeDirectory: run, stateDirectory: dir + "/state1")
        defer { daemon.stop() }
        _ = try await beacon(["pub"], input: "w.a 1\nw.b 2\nw.keep 3\n", runtimeDirectory: run)
        let wire = try WireClient.patient(runtimeDirectory: run)
        let requestsBefore = try wire.stats().requests
        let watcher = Task(executorPreference: ThreadPerJobExecutor.shared) { try await beacon(["watch", "w.", "--json", "--count", "3"], runtimeDirectory: run) }
        // The daemon has read the watch's snapshot request (its one request; a clean stop answers
        // what it has read), beside each Stats of these polls.
        var polls: UInt64 = 0
        #expect(waitUntil(seconds: 30) {
            polls += 1
            return ((try? wire.stats().requests) ?? 0) >= requestsBefore + polls + 1
        }, "the watch asked for its snapshot")
        // The journal is replaced: a daemon on the other journal, the same sockets.
        #expect(daemon.stop() == 0)
        daemon = try DaemonProcess(runtimeDirectory: run, stateDirectory: dir + "/state2")
        let watched = try await watcher.value
        #expect(watched.status == 0, "\(watched.stderr)")
        let records = try (0..<watched.lines.count).map { try watched.json($0) }
        #expect(records.prefix(3).map { $0["key"] as? String } == ["w.a", "w.b", "w.keep"])
        #expect(records.prefix(3).allSatisfy { $0["op"] as? String == "put" && $0["revision"] is Int })
        #expect(records.dropFirst(3).first?["op"] as? String == "resync")
        let after = records.dropFirst(4)
        #expect(after.filter { $0["op"] as? String == "delete" }.compactMap { $0["key"] as? String }.sorted() == ["w.a", "w.b"])
        #expect(after.contains { $0["op"] as? String == "put" && $0["key"] as? String == "w.keep" })
    }
    @Test func withOnlyBeaconEndpointSetAWatchSeesLiveChangesThroughThePublishEndpointItImplies() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let environment = ["BEACON_ENDPOINT": "ipc://\(daemon.runtimeDirectory)/beacon.req", "BEACON_RUNTIME_DIR": "", "BEACON_PUB_ENDPOINT": ""]
        let finished = Locked(false)
        let watcher = Task(executorPreference: ThreadPerJobExecutor.shared) {
            defer { finished.withLock { $0 = true } }
            return try await beacon(["watch", "e.", "--json", "--count", "3"], runtimeDirectory: nil, environment: environment,
                                    limitSeconds: 60)
        }
        // Written until the watch has seen three (the current value, if any, and live changes).
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        var written = 0
        #expect(waitUntil(seconds: 60) {
            written += 1
            _ = try? wire.put("e.k", .with { $0.intValue = Int64(written) })
            return finished.withLock { $0 }
        })
        let watched = try await watcher.value
        // The current value (when the watch's snapshot came after a write), then three live changes.
        let changes = try (0..<watched.lines.count).map { try watched.json($0) }.filter { $0["part"] != nil }
        #expect(watched.status == 0 && changes.count == 3, "\(watched.stdout) \(watched.stderr)")
        // An endpoint that implies no publish endpoint: subscribing says so instead of hearing nothing.
        let odd = try await beacon(["watch", "e."], runtimeDirectory: nil,
                                   environment: ["BEACON_ENDPOINT": "ipc://\(dir)/odd.sock", "BEACON_PUB_ENDPOINT": ""], limitSeconds: 60)
        #expect(odd.status != 0 && odd.stderr.contains("--pub-endpoint"), "\(odd.stderr)")
    }

    @Test func connectionOptionsGoAnywhereAndAMissingDaemonFailsAtOnce() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        #expect(try await beacon(["--runtime-dir", run, "set", "o.a", "1"], runtimeDirectory: nil).status == 0)
        let first = try await beacon(["--runtime-dir=" + run, "--json", "get", "o.a"], runtimeDirectory: nil)
        #expect(first.status == 0, "\(first.stderr)")
        #expect(try first.json()["value"] as? Int == 1)
        // Endpoints from the environment.
        let byEnvironment = try await beacon(["get", "o.a"], runtimeDirectory: nil, environment: [
            "BEACON_ENDPOINT": "ipc://\(run)/beacon.req", "BEACON_PUB_ENDPOINT": "ipc://\(run)/beacon.pub",
        ])
        #expect(byEnvironment.stdout == "1\n", "\(byEnvironment.stderr)")
        // No daemon: exit 69 at once, for a request and for a watch, naming where it looked —
        // not after the request timeout (60 s here; the bound leaves room for a loaded machine).
        let empty = try temporaryDirectory()
        for arguments in [["get", "o.a"], ["watch", "o."], ["pub"]] {
            let started = ContinuousClock.now
            let missing = try await beacon(["--timeout", "60000"] + arguments, input: "", runtimeDirectory: empty)
            #expect(missing.status == 69, "\(arguments)")
            #expect(missing.stderr.contains("no daemon at \(empty)"))
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    @Test func getTakesSeveralKeysAndPrefixesAndDeleteHasItsAliases() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        _ = try await beacon(["pub"], input: "g.a 1\ng.b \"x\"\nh.c 3\n", runtimeDirectory: run)
        let several = try await beacon(["get", "g.a", "g.missing", "h.c"], runtimeDirectory: run)
        #expect(several.status == 1)
        #expect(several.lines == ["g.a = 1", "h.c = 3"])
        #expect(several.stderr.contains("g.missing"))
        let prefixed = try await beacon(["get", "--prefix", "g.", "--json"], runtimeDirectory: run)
        #expect(try (0..<prefixed.lines.count).map { try prefixed.json($0)["key"] as? String } == ["g.a", "g.b"])
        #expect(try await beacon(["del", "g.a"], runtimeDirectory: run).status == 0)
        #expect(try await beacon(["rm", "g.b"], runtimeDirectory: run).status == 0)
        #expect(try await beacon(["get", "--prefix", "g."], runtimeDirectory: run).stdout.isEmpty)
    }
    @Test func strictPubStopsAtTheFirstRefusedLine() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let strict = try await beacon(["pub", "--strict", "--json"], input: "s.a 1\ns.b {\"x\"\ns.c 3\n", runtimeDirectory: run)
        #expect(strict.status == 65)
        let summary = try strict.json()
        #expect(summary["committed"] as? Int == 1)
        #expect(summary["lines"] as? Int == 2)
        #expect(summary["stopped"] as? Bool == true)
        #expect(try await beacon(["get", "s.c"], runtimeDirectory: run).status == 1)
        // Without --strict the rest still goes.
        #expect(try await beacon(["pub"], input: "s.b {\"x\"\ns.c 3\n", runtimeDirectory: run).status == 65)
        #expect(try await beacon(["get", "s.c"], runtimeDirectory: run).stdout == "3\n")
    }

    @Test func pubStoppedBySIGTERMSaysWhereToResume() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacon"))
        process.arguments = ["pub", "--json", "--runtime-dir", daemon.runtimeDirectory]
        let out = Pipe.forChild(), err = Pipe.forChild(), input = Pipe.forChild()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.runSerially()
        // Lines keep coming until the signal; the feeder then stops at the closed pipe.
        signal(SIGPIPE, SIG_IGN)
        let feeder = input.fileHandleForWriting
        let total = 2_000_000
        Thread.detachNewThread {
            var next = 0
            while next < total {
                let chunk = Array((next..<min(next + 1000, total)).map { "t.k\($0 % 100) \($0)\n" }.joined().utf8)
                var offset = 0
                while offset < chunk.count {
                    let written = chunk.withUnsafeBytes { write(feeder.fileDescriptor, $0.baseAddress! + offset, $0.count - offset) }
                    if written <= 0 { try? feeder.close(); return }
                    offset += written
                }
                next += 1000
            }
            try? feeder.close()
        }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let deadline = ContinuousClock.now + .seconds(30)
        while try wire.stats().headRevision < 20_000 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        kill(process.processIdentifier, SIGTERM)
        let output = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationReason == .exit)
        #expect(process.terminationStatus == 143)
        let summary = try #require(try JSONSerialization.jsonObject(with: output) as? [String: Any])
        #expect(summary["interrupted"] as? String == "SIGTERM")
        let lines = try #require(summary["lines"] as? Int)
        #expect(lines > 0 && lines < total)
        // Everything read was committed, and the last revision is the daemon's head: line N was
        // revision N, so the input resumes at line N + 1.
        #expect(summary["committed"] as? Int == lines)
        #expect(summary["last_revision"] as? Int == lines)
        #expect(try Int(wire.stats().headRevision) == lines)
    }
    @Test func deletePrefixTxnAndRemainingTTL() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        _ = try await beacon(["pub"], input: "d.a 1\nd.b 2\nd.c 3\ne.keep 4\n", runtimeDirectory: run)
        // Every key under the prefix goes at one revision.
        let deleted = try await beacon(["delete", "--prefix", "d.", "--json"], runtimeDirectory: run)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(try deleted.json()["deleted"] as? Int == 3)
        #expect(try deleted.json()["revision"] as? Int == 5)
        let wire = try WireClient.patient(runtimeDirectory: run)
        #expect(try wire.snapshot(prefix: "d.").kvs.isEmpty)
        #expect(try wire.get("e.keep").value.kind == .intValue(4))
        #expect(try await beacon(["rm", "--prefix", "d."], runtimeDirectory: run).stdout == "nothing under d.\n")
        // A transaction from standard input: all at one revision, or nothing.
        let applied = try await beacon(["txn", "--json"], input: """
            t.a 1
            {"key":"t.b","value":2.5}
            {"key":"e.keep","op":"delete","if_version":1}
            """, runtimeDirectory: run)
        #expect(applied.status == 0, "\(applied.stderr)")
        let revision = try #require(try applied.json()["revision"] as? Int)
        #expect(try wire.get("t.a").modRevision == UInt64(revision))
        #expect(try wire.get("t.b").modRevision == UInt64(revision))
        #expect(throws: WireError.self) { try wire.get("e.keep") }
        let refused = try await beacon(["txn"], input: """
            t.c 1
            {"key":"t.a","value":9,"if_version":7}
            """, runtimeDirectory: run)
        #expect(refused.status == 3)
        #expect(throws: WireError.self) { try wire.get("t.c") }
        #expect(try wire.get("t.a").value.kind == .intValue(1))
        // The time a key with a TTL has left.
        _ = try await beacon(["set", "ttl.k", "1", "--ttl", "60000"], runtimeDirectory: run)
        let got = try await beacon(["get", "ttl.k", "--json"], runtimeDirectory: run)
        let left = try #require(try got.json()["ttl_ms"] as? Int)
        #expect(left > 50_000 && left <= 60_000)
        #expect(try await beacon(["ls", "ttl."], runtimeDirectory: run).stdout.contains("(expires in "))
        #expect(try await beacon(["get", "e.none", "t.a", "--json"], runtimeDirectory: run).json()["ttl_ms"] == nil)
    }
    @Test func valuesAloneAndAlignedColumnsOnATerminal() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        _ = try await beacon(["pub"], input: "al.a 1\nal.longer.key \"x\"\n", runtimeDirectory: run)
        #expect(try await beacon(["get", "al.a", "al.longer.key", "--print-value-only"], runtimeDirectory: run).lines == ["1", "\"x\""])
        // Into a pipe, one space each side of "=", for scripts.
        #expect(try await beacon(["ls", "al."], runtimeDirectory: run).lines == ["al.a = 1", "al.longer.key = \"x\""])
        // On a terminal (script(1) gives it one), the keys are aligned.
        let command = "\(try binary("beacon")) ls al. --runtime-dir \(run)"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
        process.arguments = ["-qec", command, "/dev/null"]
        let out = Pipe.forChild()
        process.standardOutput = out
        process.standardInput = FileHandle.nullDevice
        try process.runSerially()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        // A terminal ends lines with "\r\n".
        let lines = text.replacingOccurrences(of: "\r", with: "").split(separator: "\n").map(String.init)
        #expect(lines == ["al.a          = 1", "al.longer.key = \"x\""], "\(text)")
    }
    @Test func backupWhileWritingRestoresToTheRevisionItNames() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let lines = (0..<5_000).map { "b.k\($0 % 2_000) \"\(String(repeating: "v", count: 200))\($0)\"" }
        #expect(try await beacon(["pub"], input: lines.joined(separator: "\n") + "\n", runtimeDirectory: run).status == 0)
        // A writer keeps writing while the copy is made and read.
        let writing = Task.detached {
            let writer = try WireClient.patient(runtimeDirectory: run)
            for index in 0..<3_000 where !Task.isCancelled {
                _ = try writer.put("w.k\(index % 100)", .with { $0.intValue = Int64(index) })
            }
        }
        let file = dir + "/copy.sqlite"
        let backup = try await beacon(["backup", file, "--json"], runtimeDirectory: run)
        writing.cancel()
        _ = try? await writing.value
        #expect(backup.status == 0, "\(backup.stderr)")
        let revision = try #require(try backup.json()["revision"] as? Int)
        #expect(revision >= 5_000)
        #expect(try backup.json()["bytes"] as? Int == Int(try FileManager.default.attributesOfItem(atPath: file)[.size] as? UInt64 ?? 0))
        // The daemon let go of its copy.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir + "/state").filter { $0.hasPrefix("backup-") }.isEmpty)
        #expect(try await beacon(["backup", file], runtimeDirectory: run).status == 64)
        // Restored: a daemon on the copy holds exactly the state at that revision.
        try FileManager.default.createDirectory(atPath: dir + "/restored", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: file, toPath: dir + "/restored/journal.sqlite")
        let restored = try DaemonProcess(runtimeDirectory: dir + "/run2", stateDirectory: dir + "/restored")
        defer { restored.stop() }
        let original = try WireClient.patient(runtimeDirectory: run)
        let copy = try WireClient.patient(runtimeDirectory: restored.runtimeDirectory)
        #expect(try copy.ping().headRevision == UInt64(revision))
        // An epoch of its own: clients that saw later revisions resync rather than mistake the
        // restored daemon's next revisions for ones they have.
        #expect(try copy.ping().epoch == UInt64(try #require(try backup.json()["epoch"] as? Int)))
        #expect(try copy.ping().epoch != original.ping().epoch)
        let then = try original.snapshot(prefix: "", revision: UInt64(revision))
        let now = try copy.snapshot(prefix: "")
        #expect(now.kvs == then.kvs)
        #expect(now.kvs.count >= 2_000)
    }

    /// `backup FILE --force` replaced whatever FILE was: as root `backup /dev/full --force` left a
    /// regular file where the device was, and a pipe or a symbolic link (the link itself) went
    /// the same way; `-` wrote a file named `-`.
    @Test func backupReplacesOnlyARegularFileAndWritesToStandardOutputWithADash() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        _ = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory).put("b.k", .with { $0.intValue = 1 })
        func kind(_ path: String) -> mode_t {
            var status = stat()
            return lstat(path, &status) == 0 ? status.st_mode & S_IFMT : 0
        }
        try "kept".write(toFile: dir + "/target", atomically: true, encoding: .utf8)
        #expect(symlink(dir + "/target", dir + "/link") == 0)
        #expect(mkfifo(dir + "/fifo", 0o600) == 0)
        var refused: [(String, mode_t)] = [(dir + "/link", S_IFLNK), (dir + "/fifo", S_IFIFO), (dir, S_IFDIR)]
        if getuid() == 0 && mknod(dir + "/full", S_IFCHR | 0o600, dev_t(1 << 8 | 7)) == 0 { refused.append((dir + "/full", S_IFCHR)) }
        for (path, expected) in refused {
            let run = try await beacon(["backup", path, "--force"], runtimeDirectory: daemon.runtimeDirectory)
            #expect(run.status == 73, "\(path): \(run.stderr)")
            #expect(run.stderr.contains("replaces only a regular file"), "\(run.stderr)")
            #expect(kind(path) == expected, "\(path) was replaced")
        }
        #expect(try String(contentsOfFile: dir + "/target", encoding: .utf8) == "kept")
        #expect(try await beacon(["backup", dir + "/target"], runtimeDirectory: daemon.runtimeDirectory).status == 64)
        #expect(try await beacon(["backup", dir + "/target", "--force"], runtimeDirectory: daemon.runtimeDirectory).status == 0)

        // `-`: the copy on standard output, the summary on standard error.
        let copy = dir + "/stdout.sqlite"
        _ = FileManager.default.createFile(atPath: copy, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacon"))
        process.arguments = ["backup", "-", "--json", "--runtime-dir", daemon.runtimeDirectory]
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: copy))
        let errors = Pipe.forChild()
        process.standardError = errors
        try process.runSerially()
        let summaryData = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(String(decoding: summaryData, as: UTF8.self))")
        let summary = try #require(try JSONSerialization.jsonObject(with: summaryData) as? [String: Any])
        let bytes = try Data(contentsOf: URL(fileURLWithPath: copy))
        #expect(summary["bytes"] as? Int == bytes.count)
        #expect(bytes.starts(with: Array("SQLite format 3\u{0}".utf8)))
        #expect(!FileManager.default.fileExists(atPath: daemon.runtimeDirectory + "/-"))
    }

    /// A request over 16 MiB was blamed on the daemon ("no reply … is beacond running?", 69)
    /// after the timeout, and reading standard input had no bound (`set k - < /dev/zero` reached
    /// 1.3 GB in 2 s). Now the CLI refuses it at once, naming the line.
    @Test func inputOverTheProtocolsLimitsIsRefusedLocallyWithItsLine() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let huge = String(repeating: "a", count: 20_000_000)
        let set = try await beacon(["set", "k", "-"], input: huge, runtimeDirectory: run)
        #expect(set.status == 65, "\(set.stderr)")
        #expect(set.stderr.contains("a value is at most 1048576 bytes"), "\(set.stderr)")
        let lines = ["ok.a 1", String(repeating: "a", count: 17_000_000), "ok.b 2",
                     "big.v \"\(String(repeating: "b", count: 1_100_000))\"", "ok.c 3"]
        let pub = try await beacon(["pub", "--json"], input: lines.joined(separator: "\n") + "\n", runtimeDirectory: run)
        #expect(pub.status == 65, "\(pub.stderr)")
        #expect(pub.stderr.contains("line 2: longer than 16777216 bytes"), "\(pub.stderr)")
        #expect(pub.stderr.contains("line 4: a value of"), "\(pub.stderr)")
        #expect(try pub.json()["committed"] as? Int == 3)
        let txn = try await beacon(["txn"], input: "t.a 1\n" + String(repeating: "a", count: 17_000_000) + "\n", runtimeDirectory: run)
        #expect(txn.status == 65, "\(txn.stderr)")
        #expect(txn.stderr.contains("line 2: longer than"), "\(txn.stderr)")
        let wire = try WireClient.patient(runtimeDirectory: run)
        #expect(try wire.snapshot(prefix: "").kvs.map(\.key) == ["ok.a", "ok.b", "ok.c"])
    }

    /// `watch --from` above the head said nothing and showed nothing; `replay --from 50 --to 10`
    /// exited 0 with no output.
    @Test func aRangeThatCannotHoldAnythingIsSaidSo() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let wire = try WireClient.patient(runtimeDirectory: run)
        for index in 1...2 { _ = try wire.put("w.k\(index)", .with { $0.intValue = Int64(index) }) }
        for command in [["replay"], ["history", "w.k1"]] {
            let ranged = try await beacon(command + ["--from", "50", "--to", "10"], runtimeDirectory: run)
            #expect(ranged.status == 64, "\(command): \(ranged.stderr)")
            #expect(ranged.stderr.contains("--from 50 is after --to 10"), "\(ranged.stderr)")
        }

        // Above the head (2): the watch says so, then shows revision 5 on, not 3 and 4.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try binary("beacon"))
        process.arguments = ["watch", "w.", "--from", "5", "--count", "1", "--json", "--runtime-dir", run]
        let out = Pipe.forChild(), err = Pipe.forChild()
        process.standardOutput = out
        process.standardError = err
        try process.runSerially()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        var warning = Data()
        #expect(waitUntil(seconds: 30) {
            warning += err.fileHandleForReading.availableData
            return String(decoding: warning, as: UTF8.self).contains("--from 5 is above the head (revision 2)")
        }, "\(String(decoding: warning, as: UTF8.self))")
        for index in 3...5 { _ = try wire.put("w.k\(index)", .with { $0.intValue = Int64(index) }) }
        let printed = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.waitUntilExit(orKillAfterSeconds: 30))
        #expect(printed.split(separator: "\n").count == 1 && printed.contains("\"w.k5\""), "\(printed)")
    }

    /// With compaction: `watch --from 1` exited 70 where the docs promise a `resync` record, and
    /// `history c.k` started at the compaction point while `history c.k --from` it was refused.
    @Test func compactedHistoryShowsWhatIsKeptAndAWatchFromBeforeItResyncs() async throws {
        let (daemon, _) = try daemonWithConfiguration("retention_revisions = 5\ncompaction_interval_s = 1")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let wire = try WireClient.patient(runtimeDirectory: run)
        for index in 1...20 { _ = try wire.put("c.k", .with { $0.intValue = Int64(index) }) }
        #expect(waitUntil(seconds: 60) { ((try? wire.ping().compactedRevision) ?? 0) >= 15 })
        let compacted = try wire.ping().compactedRevision

        let plain = try await beacon(["history", "c.k", "--json"], runtimeDirectory: run)
        let ranged = try await beacon(["history", "c.k", "--json", "--from", "\(compacted)"], runtimeDirectory: run)
        #expect(ranged.status == 0, "\(ranged.stderr)")
        #expect(ranged.stdout == plain.stdout, "from the compaction point: what is kept, as without --from")
        #expect(try ranged.json()["revision"] as? Int == Int(compacted))
        #expect(ranged.stderr.contains("changes through revision \(compacted) were compacted"), "\(ranged.stderr)")
        let after = try await beacon(["history", "c.k", "--json", "--from", "\(compacted + 2)"], runtimeDirectory: run)
        #expect(after.status == 0 && after.stderr.isEmpty, "\(after.stderr)")
        #expect(try after.json()["revision"] as? Int == Int(compacted + 2))

        let watch = try await beacon(["watch", "c.", "--from", "1", "--count", "1", "--json"], runtimeDirectory: run)
        #expect(watch.status == 0, "\(watch.stderr)")
        #expect(try watch.json(0)["op"] as? String == "resync")
        #expect(try watch.json(1)["key"] as? String == "c.k")
        #expect(try watch.json(1)["value"] as? Int == 20)
        #expect(try watch.json(1)["resync"] as? Bool == true)
    }

    /// `delete --prefix` of more keys than a transaction holds (1,024) was refused, with advice
    /// that keys `sg.n1…sg.n64792` cannot follow. Now it deletes them in transactions of 1,024.
    @Test func deletingAPrefixOfMoreKeysThanATransactionHoldsTakesSeveral() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let run = daemon.runtimeDirectory
        let input = (1...3_000).map { "sg.n\($0) \($0)" }.joined(separator: "\n") + "\nsh.kept 1\n"
        #expect(try await beacon(["pub"], input: input, runtimeDirectory: run).status == 0)
        let deleted = try await beacon(["delete", "--prefix", "sg.", "--json"], runtimeDirectory: run)
        #expect(deleted.status == 0, "\(deleted.stderr)")
        #expect(try deleted.json()["deleted"] as? Int == 3_000)
        #expect(try deleted.json()["transactions"] as? Int == 3)
        let wire = try WireClient.patient(runtimeDirectory: run)
        #expect(try wire.snapshot(prefix: "sg.").kvs.isEmpty)
        #expect(try wire.snapshot(prefix: "sh.").kvs.count == 1)
        let small = try await beacon(["delete", "--prefix", "sh.", "--json"], runtimeDirectory: run)
        #expect(try small.json()["transactions"] as? Int == 1)
        #expect(try small.json()["first_revision"] as? Int == small.json()["revision"] as? Int)
        let none = try await beacon(["delete", "--prefix", "sg."], runtimeDirectory: run)
        #expect(none.status == 0 && none.stdout.contains("nothing under sg."), "\(none.stdout)")
    }
}
