import ArgumentParser
import Beacon
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine.
func monotonicNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// The resident set size of this process, in bytes.
/// CPU time this process has used (user and system, every thread), in nanoseconds.
func processCPUNanoseconds() -> UInt64 {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let micros = (Int(usage.ru_utime.tv_sec) + Int(usage.ru_stime.tv_sec)) * 1_000_000 + Int(usage.ru_utime.tv_usec) + Int(usage.ru_stime.tv_usec)
    return UInt64(micros) * 1000
}

func residentBytes() -> Int {
    guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
    let fields = statm.split(separator: " ")
    return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

struct ClientBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client",
        abstract: "Write-to-effect latency across processes, mirror throughput with 1/8/32 subscriber processes, mirror memory.")

    @Option(help: "Latency samples (one write at a time, 200 µs apart).") var samples = 3_000
    @Option(help: "Writes per throughput run (below beacond's publish high-water mark of 100,000).") var writes = 80_000
    @Option(help: "Distinct keys written in the throughput runs.") var keys = 1_000
    @Option(help: "Subscriber process counts for the throughput runs.") var subscribers: [Int] = [1, 8, 32]
    @Option(help: "Keys in the memory run.") var memoryKeys = 100_000
    /// A part of the benchmark that runs alone.
    enum Part: String, ExpressibleByArgument, CaseIterable {
        case latency, throughput, memory
    }

    @Option(help: "Only one part: latency, throughput or memory.") var only: Part?
    @Option(help: ArgumentHelp("Run each mirroring subscriber process under this command, to profile it (a backlog run's freeze then stops the command, not the process: read the live runs).", valueName: "command"))
    var profileWith: String?
    @Option(help: "How the mirroring processes take publications: bundles (as the client library does once the daemon offers them) or diffs (one message per change).")
    var publications = "bundles"

    func validate() throws {
        guard ["bundles", "diffs"].contains(publications) else { throw ValidationError("--publications is bundles or diffs") }
    }

    /// Arguments for every Beacon subscriber process.
    private var clientArguments: [String] { publications == "diffs" ? ["--no-bundles"] : [] }

    /// Writes `key` (a different value each time) until every process printed READY: a process
    /// that takes bundles is ready once it has received one, which needs writes to happen.
    private func warmUp(_ probes: [SubscriberProcess], writer: WireClient, key: String, values: (Int) -> Int64) throws {
        let deadline = Date().addingTimeInterval(60)
        var round = 0
        while !probes.allSatisfy({ $0.hasPrinted("READY") }) {
            guard Date() < deadline else { throw ValidationError("a subscriber process was not ready within 60 s") }
            _ = try writer.put(key, .with { $0.intValue = values(round) })
            round += 1
            usleep(50_000)
        }
    }

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("beacon-bench client: Beacon client library in separate processes against a release beacond, ipc, publications as \(publications)")
        let rawOneWay = percentile(try RawZMQ.oneWayLatencies(samples: 5_000, directory: directory).sorted(), 0.5)
        // Frozen subscribers fall behind by a whole backlog: the daemon keeps it for them (by
        // default it closes the connections of those that stall past 256 MiB, and they catch up
        // from the journal), so that each mirror applies every update.
        let configuration = directory + "/beacond.conf"
        try "publish_buffer_bytes = \(1 << 30)\n".write(toFile: configuration, atomically: true, encoding: .utf8)
        let daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048, extraArguments: ["--config", configuration])
        defer { daemon.stop() }
        let writer = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        let commit = percentile(try serialCommitLatencies(writer).sorted(), 0.5)

        print("")
        print("| figure | value | vs target |")
        print("| --- | --- | --- |")
        if only == nil || only == .latency {
            // Latency: a write in this process, an effect in another.
            let latencyProbe = try SubscriberProcess(runtimeDirectory: daemon.runtimeDirectory, arguments: ["--mode", "latency"] + clientArguments)
            // Warm-up values below -1 are not samples.
            try warmUp([latencyProbe], writer: writer, key: "bench.lat") { -2 - Int64($0) }
            for _ in 0..<samples {
                _ = try writer.put("bench.lat", .with { $0.intValue = Int64(monotonicNanoseconds()) })
                usleep(200)
            }
            _ = try writer.put("bench.lat", .with { $0.intValue = -1 })  // the end of the run
            let latency = try latencyProbe.waitFor("LAT").split(separator: " ").dropFirst().compactMap { Double($0) }
            latencyProbe.stop()
            print("| raw libzmq one-way latency, p50 | \(String(format: "%.1f µs", rawOneWay)) | |")
            print("| one journaled write, request → reply, p50 | \(String(format: "%.1f µs", commit)) | |")
            let bound = 3 * rawOneWay + commit
            print("| write → effect in another process, p50 | \(String(format: "%.1f µs", latency[0])) | target ≤ 3×one-way + commit = \(String(format: "%.1f µs", bound)): \(latency[0] <= bound ? "met" : "NOT met") |")
            let ratio = latency[0] / rawOneWay
            print("| write → effect p50 ÷ raw libzmq one-way p50 | \(String(format: "%.1f×", ratio)) | target ≤ 3×: \(ratio <= 3 ? "met" : "NOT met") |")
            print("| write → effect in another process, p99 | \(String(format: "%.1f µs", latency[1])) | |")
            print("| write → effect in another process, p99.9 | \(String(format: "%.1f µs", latency[2])) | |")
            print("| (latency samples seen by the effect: \(Int(latency[3])) of \(samples) writes) | | |")
        }
        if only == nil || only == .throughput { try throughputs(daemon: daemon, directory: directory) }
        if only == nil || only == .memory {
            let memory = try mirrorMemory(daemon: daemon)
            print("| mirror of \(memoryKeys) keys (64-byte string values), client RSS growth | \(String(format: "%.1f MB", memory / 1_000_000)) | target < 100 MB: \(memory < 100_000_000 ? "met" : "NOT met") |")
        }
    }

    private func throughputs(daemon: DaemonUnderTest, directory: String) throws {
        let rawRate = try RawZMQ.pubSubRate(messages: 1_000_000, directory: directory)
        print("| raw libzmq PUB→SUB, one process, 2 frames, 64 B | \(format(rawRate)) msg/s | |")
        for count in subscribers {
            let live = try throughput(daemon: daemon, subscriberCount: count, frozen: false)
            let backlog = try throughput(daemon: daemon, subscriberCount: count, frozen: true)
            let (raw, rawCPU) = try rawBacklog(directory: directory, subscriberCount: count)
            let processes = "\(count) subscriber process\(count == 1 ? "" : "es")"
            print("| \(processes), live: writes committed by one pipelined writer | \(format(live.writeRate))/s | |")
            print("| \(processes), live: updates into each mirror (slowest) | \(format(live.mirrorRate))/s | |")
            print("| \(processes), backlog of \(writes): updates into each mirror (slowest) | \(format(backlog.mirrorRate))/s "
                + "(\(format(backlog.mirrorRate * Double(count)))/s in all) | |")
            let cpu = [backlog.cpuPerUpdate, rawCPU].map { String(format: "%.2f", $0) }
            print("| \(processes), backlog: CPU per update in each process (all its threads), mirror / raw | \(cpu[0]) µs / \(cpu[1]) µs | |")
            let share = backlog.mirrorRate / raw
            // A mirror that caught up more than 1% of the backlog from the journal did not measure ingest.
            let repairs = backlog.repaired == 0 ? "" : "; \(backlog.repaired) of \(count) mirrors caught up by reading the journal "
                + "(the fewest updates applied one by one: \(backlog.fewestApplied) of \(writes))"
            let verdict = backlog.fewestApplied * 100 < UInt64(writes) * 99 ? "not measured" + repairs
                : "target ≥ 0.50: \(share >= 0.5 ? "met" : "NOT met")" + repairs
            print("| \(processes), the same backlog as raw libzmq messages, received by each (slowest) | \(format(raw))/s "
                + "(\(format(raw * Double(count)))/s in all) | mirrors ÷ raw = \(String(format: "%.2f", share)); \(verdict) |")
        }
    }

    private func serialCommitLatencies(_ writer: WireClient) throws -> [Double] {
        try (0..<2_000).map { i in
            let start = monotonicNanoseconds()
            _ = try writer.put("bench.commit", .with { $0.intValue = Int64(i) })
            return Double(monotonicNanoseconds() - start) / 1000
        }
    }

    /// Floods `writes` pipelined puts under a prefix that every subscriber mirrors. Live: the
    /// subscribers run while the writes flow. Backlog: they are frozen (SIGSTOP) during the
    /// writes and timed from SIGCONT until they applied the last one — the client's own ingest
    /// capacity, without the writer and daemon competing for the two cores.
    private func throughput(daemon: DaemonUnderTest, subscriberCount: Int,
                            frozen: Bool) throws -> (writeRate: Double, mirrorRate: Double, cpuPerUpdate: Double, repaired: Int, fewestApplied: UInt64) {
        let prefix = "bench.t\(subscriberCount)\(frozen ? "f" : "l")."
        let probes = try (0..<subscriberCount).map { _ in
            try SubscriberProcess(runtimeDirectory: daemon.runtimeDirectory, arguments: ["--mode", "mirror", "--prefix", prefix] + clientArguments,
                                  under: profileWith)
        }
        defer { probes.forEach { $0.stop() } }
        try warmUp(probes, writer: try WireClient(runtimeDirectory: daemon.runtimeDirectory), key: prefix + "warm-up") { Int64($0) }
        let ready = try probes.map { try $0.waitFor("READY").split(separator: " ").dropFirst().compactMap { UInt64($0) } }
        let readyCPU = ready.map { $0.first ?? 0 }
        if frozen { probes.forEach { $0.signal(SIGSTOP) } }
        var start = monotonicNanoseconds()
        _ = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: writes, window: 5_000,
                          key: { $0 == writes - 1 ? prefix + "done" : prefix + "k\($0 % keys)" }, value: encodedInt)
        let committed = monotonicNanoseconds()
        let writeRate = Double(writes) / (Double(committed - start) / 1e9)
        if frozen {
            start = monotonicNanoseconds()
            probes.forEach { $0.signal(SIGCONT) }
        }
        let finishes = try probes.map { try $0.waitFor("DONE", timeout: 300).split(separator: " ") }
        let slowest = finishes.compactMap { UInt64($0[1]) }.max() ?? committed
        let applied = finishes.compactMap { Int($0[2]) }.min() ?? 0
        // The keys written, "done" and "warm-up".
        if applied != min(writes, keys + 1) + 1 {
            print("warning: a mirror holds \(applied) keys, expected \(min(writes, keys + 1) + 1)")
        }
        let cpu = zip(finishes, readyCPU).compactMap { finish, ready in finish.count > 3 ? UInt64(finish[3]).map { Double($0 - ready) } : nil }
        // Under --profile-with the freeze stops the wrapper, not the process, which may finish first.
        let elapsed = slowest > start ? slowest - start : 1
        // A process that fell behind what the daemon keeps for a subscriber caught up by reading
        // the journal (a delta of each key's last change), not by applying each update.
        let appliedOneByOne = zip(finishes, ready).compactMap { finish, ready -> UInt64? in
            guard finish.count > 4, ready.count > 1, let handed = UInt64(finish[4]), handed >= ready[1] else { return nil }
            return handed - ready[1]
        }
        let repaired = appliedOneByOne.filter { $0 < UInt64(writes) }.count
        return (writeRate, Double(writes) / (Double(elapsed) / 1e9), cpu.reduce(0, +) / Double(max(cpu.count, 1)) / Double(writes) / 1000,
                repaired, appliedOneByOne.min() ?? 0)
    }

    /// The ceiling for ``throughput(daemon:subscriberCount:frozen:)``'s backlog: the same number
    /// of messages of the same shape (the key as topic, a `Diff` as body) from a raw PUB socket to
    /// as many processes with a raw SUB socket, frozen while they are sent, timed from SIGCONT
    /// until each has received them all. Messages per second into each (the slowest), and the
    /// CPU each process spent per message, in µs (the mean).
    private func rawBacklog(directory: String, subscriberCount: Int) throws -> (rate: Double, cpuPerMessage: Double) {
        let context = try ZMQContext()
        let endpoint = "ipc://\(directory)/raw-fanout"
        let pub = try ZMQSocket(context, type: .pub)
        try pub.setSendHighWaterMark(0)
        try pub.bind(endpoint)
        defer { pub.close() }
        let probes = try (0..<subscriberCount).map { _ in
            try SubscriberProcess(runtimeDirectory: directory, arguments: ["--mode", "raw", "--endpoint", endpoint, "--count", "\(writes)"])
        }
        defer { probes.forEach { $0.stop() } }
        // Until every process has its subscription in: it answers the first message it gets.
        let hello = [ZMQMessage(string: "hello"), ZMQMessage(bytes: [0])]
        let deadline = Date().addingTimeInterval(30)
        while probes.contains(where: { !$0.hasPrinted("READY") }) {
            guard Date() < deadline else { throw ValidationError("a raw subscriber process never got a message") }
            try pub.send(frames: hello)
            usleep(5_000)
        }
        probes.forEach { $0.signal(SIGSTOP) }
        let prefix = "bench.raw."
        let messages = (0..<writes).map { index in
            let key = prefix + "k\(index % keys)"
            let body = WireEncoder.diff(epoch: 1, revision: UInt64(index + 1), part: 0, parts: 1, kind: .put, key: key,
                                        encodedValue: encodedInt(index), version: UInt64(index / keys + 1), createRevision: 1,
                                        expiresAtMilliseconds: 0, timestampMilliseconds: 1_700_000_000_000,
                                        marks: [.with { $0.prefix = prefix; $0.previousRevision = UInt64(index); $0.parts = 1 }])
            return (Array(key.utf8), body)
        }
        for (topic, body) in messages {
            try pub.send(topic, flags: .sendMore)
            try pub.send(body)
        }
        let start = monotonicNanoseconds()
        probes.forEach { $0.signal(SIGCONT) }
        let finishes = try probes.map { try $0.waitFor("DONE", timeout: 300).split(separator: " ") }
        let slowest = finishes.compactMap { UInt64($0[1]) }.max() ?? start
        let cpu = finishes.compactMap { $0.count > 3 ? UInt64($0[3]).map { Double($0) } : nil }
        return (Double(writes) / (Double(slowest - start) / 1e9), cpu.reduce(0, +) / Double(max(cpu.count, 1)) / Double(writes) / 1000)
    }

    private func mirrorMemory(daemon: DaemonUnderTest) throws -> Double {
        let prefix = "bench.m."
        let value = try Beacon_V1_Value.with { $0.stringValue = String(repeating: "v", count: 64) }.serializedBytes() as [UInt8]
        _ = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: memoryKeys, window: 5_000,
                          key: { prefix + "k\($0)" }, value: { _ in value })
        let probe = try SubscriberProcess(runtimeDirectory: daemon.runtimeDirectory,
                                          arguments: ["--mode", "memory", "--prefix", prefix, "--count", "\(memoryKeys)"])
        defer { probe.stop() }
        let fields = try probe.waitFor("MEM", timeout: 120).split(separator: " ")
        return Double(fields[1]) ?? .nan
    }
}

/// One `beacon-bench client-subscriber` child process and its output lines.
final class SubscriberProcess: @unchecked Sendable {
    private let process = Process()
    private let output = Pipe()
    private let lock = NSLock()
    private var lines: [String] = []
    private var partial = Data()

    /// Starts `beacon-bench client-subscriber` with `arguments`; with `wrapper` (a command and
    /// its arguments, split at spaces), under that command.
    init(runtimeDirectory: String, arguments: [String], under wrapper: String? = nil) throws {
        let own = [CommandLine.arguments[0], "client-subscriber", "--runtime-dir", runtimeDirectory] + arguments
        let command = (wrapper?.split(separator: " ").map(String.init) ?? []) + own
        process.executableURL = URL(fileURLWithPath: command[0].hasPrefix("/") ? command[0] : "/usr/bin/env")
        process.arguments = command[0].hasPrefix("/") ? Array(command.dropFirst()) : command
        process.standardOutput = output
        try process.run()
        // A thread of its own reads until end of file (Foundation traps when a readability
        // handler reads a pipe that has been closed meanwhile).
        let handle = output.fileHandleForReading
        Thread.detachNewThread { [self] in
            while let data = readSome(handle) {
                lock.withLock {
                    partial.append(data)
                    while let newline = partial.firstIndex(of: 0x0A) {
                        lines.append(String(decoding: partial[partial.startIndex..<newline], as: UTF8.self))
                        partial.removeSubrange(partial.startIndex...newline)
                    }
                }
            }
        }
    }

    /// Whether a line starting with `word` was printed.
    func hasPrinted(_ word: String) -> Bool { lock.withLock { lines.contains { $0.hasPrefix(word) } } }

    /// Waits for a line starting with `word` and returns it.
    @discardableResult
    func waitFor(_ word: String, timeout: Double = 60) throws -> String {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let line = lock.withLock({ lines.first { $0.hasPrefix(word) } }) { return line }
            usleep(2_000)
        }
        throw ValidationError("a subscriber process did not print \(word) within \(Int(timeout)) s")
    }

    func signal(_ signal: Int32) {
        kill(process.processIdentifier, signal)
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
    }
}

/// The other end of ``ClientBench``: a Beacon client process that mirrors and reports.
struct ClientSubscriber: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "client-subscriber", abstract: "A subscriber process started by `beacon-bench client`.", shouldDisplay: false)

    @Option(help: "The daemon's runtime directory.") var runtimeDir: String
    @Option(help: "latency, mirror, memory or raw.") var mode: String
    @Option(help: "The prefix mirrored (mirror, memory).") var prefix = ""
    @Option(help: "Keys expected (memory), messages expected after the first (raw).") var count = 0
    @Option(help: "The raw publisher's endpoint (raw).") var endpoint = ""
    @Flag(help: "Take one message per change, not bundles.") var noBundles = false

    func run() throws {
        if mode == "raw" { return try receiveRaw() }
        let baseline = residentBytes()
        // Updates are applied on a queue of the process's own, not the main queue: the main
        // thread only waits, and never leaves as `dispatchMain()` makes it (which valgrind
        // does not survive, so that the process could not be profiled with callgrind).
        let delivery = DispatchQueue(label: "beacon-bench.delivery")
        var configuration = BeaconConfiguration(runtimeDirectory: runtimeDir)
        configuration.receivesBundles = !noBundles
        configuration.delivery = .queue(delivery)
        let client = try BeaconClient(configuration: configuration)
        let subscriber = Subscriber(client: client, baseline: baseline, bundles: !noBundles)
        try delivery.sync {
            switch mode {
            case "latency": try subscriber.measureLatency()
            case "mirror": try subscriber.mirror(prefix: prefix)
            default: try subscriber.measureMemory(prefix: prefix, count: count)
            }
        }
        // The subscriber holds the client and the effects: an optimized build may otherwise end
        // its life after its last use above, disposing of effects that do not capture it.
        withExtendedLifetime(subscriber) {
            while true { pause() }
        }
    }
}

extension ClientSubscriber {
    /// A raw SUB socket: says READY at its first message, then DONE with the time once `count`
    /// more have arrived (both frames of each read, nothing decoded).
    func receiveRaw() throws {
        let context = try ZMQContext()
        let sub = try ZMQSocket(context, type: .sub)
        try sub.setReceiveHighWaterMark(0)
        try sub.connect(endpoint)
        try sub.subscribe([])
        let frame = ZMQMessage()
        try sub.receive(into: frame)
        try sub.receive(into: frame)
        emit("READY")
        let readyCPU = processCPUNanoseconds()
        var received = 0
        while received < count {
            try sub.receive(into: frame)
            if frame.bytes == Array("hello".utf8) {  // the publisher's greetings to slower processes
                try sub.receive(into: frame)
                continue
            }
            try sub.receive(into: frame)
            received += 1
        }
        let now = monotonicNanoseconds()
        emit("DONE \(now) \(received) \(processCPUNanoseconds() - readyCPU)")
    }
}

/// State of a subscriber process, touched only on the main queue (the client's delivery queue).
final class Subscriber: @unchecked Sendable {
    let client: BeaconClient
    let baseline: Int
    /// Whether the client should take bundles: then it is ready once one has arrived.
    let bundles: Bool
    var handles: [Effect] = []

    init(client: BeaconClient, baseline: Int, bundles: Bool) {
        self.client = client
        self.baseline = baseline
        self.bundles = bundles
    }

    /// Live, and on bundles if it takes them (the statistics are read, not tracked: the caller
    /// runs on each update).
    var isSettled: Bool { client.connection.value == .live && (!bundles || client.statistics.bundles > 0) }

    func measureLatency() throws {
        let sent = try client.signal("bench.lat", as: Int.self, default: 0)
        var latencies: [Double] = []
        var ready = false
        handles.append(effect { [self] in
            let stamp = sent.value
            if !ready, self.isSettled {
                ready = true
                emit("READY")
            }
            guard ready, stamp > 0 || stamp == -1 else { return }  // 0 and below -1: warm-up
            if stamp == -1 {  // end of the run; updates that arrived together counted once
                let sorted = latencies.dropFirst(min(100, latencies.count / 10)).sorted()
                emit("LAT \(percentile(sorted, 0.5)) \(percentile(sorted, 0.99)) \(percentile(sorted, 0.999)) \(latencies.count)")
                return
            }
            latencies.append(Double(monotonicNanoseconds() - UInt64(stamp)) / 1000)
        })
    }

    func mirror(prefix: String) throws {
        let map = try client.mirror(prefix: prefix, as: Int.self)
        let done = try client.signal(prefix + "done", as: Int.self, default: -1)
        var ready = false
        handles.append(effect { [self] in
            if !ready {
                _ = map.value  // runs again at each warm-up write until ready; not once measuring
                if self.isSettled, map.status == .live {
                    ready = true
                    emit("READY \(processCPUNanoseconds()) \(self.client.statistics.revisions)")
                }
            }
            if done.value >= 0 {
                emit("DONE \(monotonicNanoseconds()) \(map.count) \(processCPUNanoseconds()) \(self.client.statistics.revisions)")
            }
        })
    }

    func measureMemory(prefix: String, count: Int) throws {
        let map = try client.mirror(prefix: prefix, as: String.self)
        let baseline = baseline
        handles.append(effect {
            if map.count >= count { emit("MEM \(residentBytes() - baseline)") }
        })
    }
}

func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The bytes a pipe has now, waiting for some; nil at end of file or on an error.
func readSome(_ handle: FileHandle) -> Data? {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        return count > 0 ? Data(buffer[0..<count]) : nil
    }
}
