import ArgumentParser
import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Logging
import Synchronization

@main
struct BeaconBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacon-bench",
        abstract: "Benchmarks that print figures beside the raw libzmq ceiling measured in the same run.",
        subcommands: subcommands)

    static var subcommands: [any ParsableCommand.Type] {
        var commands: [any ParsableCommand.Type] = [
            DaemonBench.self, ClientBench.self, ClientSubscriber.self, PeerBench.self, ScaleBench.self, FuzzBench.self,
            FloodBench.self, CompactionBench.self, CrashRepliesBench.self, RelayBench.self, PubRestartSoak.self]
        #if Etcd
        commands.append(EtcdBench.self)
        #endif
        return commands
    }
}

func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

func median(_ values: [Double]) -> Double { percentile(values.sorted(), 0.5) }

func format(_ rate: Double) -> String {
    if rate >= 1_000_000 { return String(format: "%.2f M", rate / 1_000_000) }
    return rate >= 10_000 ? String(format: "%.0f k", rate / 1000) : String(format: "%.0f ", rate)
}

func temporaryDirectory() -> String {
    var template = Array("/tmp/bbench-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
}

/// The ceiling: raw libzmq with the same message shape, in this process.
enum RawZMQ {
    /// PUB→SUB messages per second: 2 frames (topic, 64-byte body), ipc, no high-water mark.
    static func pubSubRate(messages: Int, directory: String) throws -> Double {
        let context = try ZMQContext()
        let endpoint = "ipc://\(directory)/raw-pub"
        let pub = try ZMQSocket(context, type: .pub)
        try pub.setSendHighWaterMark(0)
        try pub.bind(endpoint)
        let sub = try ZMQSocket(context, type: .sub)
        try sub.setReceiveHighWaterMark(0)
        try sub.connect(endpoint)
        try sub.subscribe([])
        // Wait for the subscription to arrive.
        while true {
            try pub.send(frames: [ZMQMessage(string: "probe"), ZMQMessage(bytes: [0])])
            if try sub.receiveMessage(flags: .dontWait) != nil { break }
            usleep(1000)
        }
        while try sub.receiveMessage(flags: .dontWait) != nil {}
        let body = [UInt8](repeating: 0x61, count: 64)
        let topic = Array("bench.key.0042".utf8)
        let start = now()
        let owned = ZMQSocketTransfer(pub)
        let sender = Thread {
            for _ in 0..<messages {
                _ = try? owned.socket.send(topic, flags: .sendMore)
                _ = try? owned.socket.send(body)
            }
        }
        sender.start()
        let frame = ZMQMessage()
        var received = 0
        while received < messages {
            try sub.receive(into: frame)
            try sub.receive(into: frame)
            received += 1
        }
        let seconds = Double(now() - start) / 1e9
        return Double(messages) / seconds
    }

    /// One-way latency (round trip ÷ 2) in µs, DEALER→ROUTER echo of 64 bytes, ipc.
    static func oneWayLatencies(samples: Int, directory: String) throws -> [Double] {
        try oneWayLatencies(samples: samples, endpoint: "ipc://\(directory)/raw-rtt")
    }

    /// One-way latency (round trip ÷ 2) in µs, DEALER→ROUTER echo of 64 bytes, at `endpoint`.
    static func oneWayLatencies(samples: Int, endpoint: String) throws -> [Double] {
        let context = try ZMQContext()
        let router = try ZMQSocket(context, type: .router)
        try router.bind(endpoint)
        let stop = Atomic<Bool>(false)
        let owned = ZMQSocketTransfer(router)
        let echo = Thread {
            let router = owned.socket
            let poller = ZMQPoller()
            poller.add(router)
            while !stop.load(ordering: .relaxed) {
                guard (try? poller.poll(timeoutMilliseconds: 100)) ?? 0 > 0 else { continue }
                while let frames = try? router.receiveMessage(flags: .dontWait) { _ = try? router.send(frames: frames) }
            }
        }
        echo.start()
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.connect(endpoint)
        let body = [UInt8](repeating: 0x61, count: 64)
        var latencies: [Double] = []
        latencies.reserveCapacity(samples)
        for i in 0..<(samples + 1000) {
            let start = now()
            try dealer.send(body)
            _ = try dealer.receiveMessage()
            if i >= 1000 { latencies.append(Double(now() - start) / 2000) }
        }
        stop.store(true, ordering: .relaxed)
        while echo.isExecuting || !echo.isFinished { usleep(1000) }
        return latencies
    }
}

/// A release `beacond` started as a child process on its own directories, or (`inProcess`) a
/// ``BeaconServer`` run by this process on its own threads, for tools that cannot run `beacond`
/// itself: valgrind 3.19 stops with an internal error at `beacond`'s start, in libdispatch.
final class DaemonUnderTest {
    /// The child process; `nil` for an in-process daemon (only `--only write-rate` makes one).
    let process: Process!
    private let server: BeaconServer?
    let runtimeDirectory: String

    /// - Parameter launcher: a command that runs beacond with its arguments (`prlimit …`); none:
    ///   beacond itself.
    init(directory: String, durability: String, maxBatch: Int, extraArguments: [String] = [], launcher: [String] = [],
         inProcess: Bool = false) throws {
        runtimeDirectory = directory + "/run"
        if inProcess {
            precondition(extraArguments.isEmpty && launcher.isEmpty, "an in-process daemon takes no beacond arguments")
            var configuration = DaemonConfiguration(runtimeDirectory: runtimeDirectory, stateDirectory: directory + "/state")
            guard let mode = Durability(rawValue: durability) else { throw ValidationError("unknown durability '\(durability)'") }
            configuration.durability = mode
            configuration.maxBatch = maxBatch
            var logger = Logger(label: "beacond")
            logger.logLevel = .warning
            let server = try BeaconServer(configuration: configuration, logger: logger)
            try server.start()
            self.server = server
            process = nil
        } else {
            let process = Process()
            let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("beacond")
            let arguments = ["--runtime-dir", runtimeDirectory, "--state-dir", directory + "/state",
                             "--durability", durability, "--max-batch", "\(maxBatch)", "--log-level", "warning"] + extraArguments
            if let command = launcher.first {
                process.executableURL = URL(fileURLWithPath: command)
                process.arguments = launcher.dropFirst() + [binary.path] + arguments
            } else {
                process.executableURL = binary
                process.arguments = arguments
            }
            try process.run()
            self.process = process
            server = nil
        }
        let client = try WireClient(runtimeDirectory: runtimeDirectory)
        for _ in 0..<100 where (try? client.ping(timeoutMilliseconds: 100)) == nil {}
    }

    func stop() {
        if let process {
            process.terminate()
            process.waitUntilExit()
        }
        if let server {
            server.requestStop()
            let stopped = DispatchSemaphore(value: 0)
            Task {
                await server.waitUntilStopped()
                stopped.signal()
            }
            stopped.wait()
        }
    }

    /// CPU seconds (user + system) the daemon has used so far, all its threads (ended ones too).
    func cpuSeconds() -> Double {
        let pid = process?.processIdentifier ?? getpid()
        return Self.cpuUse(statFile: "/proc/\(pid)/stat")?.seconds ?? 0
    }

    /// CPU seconds (user + system) each of the daemon's threads has used so far, by thread id,
    /// with the thread's name.
    func cpuSecondsByThread() -> [String: (name: String, seconds: Double)] {
        let pid = process?.processIdentifier ?? getpid()
        var threads: [String: (name: String, seconds: Double)] = [:]
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? [] {
            threads[task] = Self.cpuUse(statFile: "/proc/\(pid)/task/\(task)/stat")
        }
        return threads
    }

    /// The name and the CPU seconds (user + system) in a process's or thread's `stat` file.
    static func cpuUse(statFile: String) -> (name: String, seconds: Double)? {
        guard let stat = try? String(contentsOfFile: statFile, encoding: .utf8),
              let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return nil }
        // After the name: state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (String(stat[stat.index(after: open)..<close]), (user + system) / Double(sysconf(Int32(_SC_CLK_TCK))))
    }
}

/// Writes at a steady rate from its own thread and connection until stopped ("moderate load").
final class PacedWriter: @unchecked Sendable {
    private let stopFlag = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let acknowledged = Atomic<Int>(0)

    init(runtimeDirectory: String, writesPerSecond: Int, encodedValue: [UInt8]) {
        Thread.detachNewThread { [self] in
            defer { finished.signal() }
            guard let context = try? ZMQContext(), let dealer = try? ZMQSocket(context, type: .dealer),
                  (try? dealer.connect(WireEndpoint.request(inRuntimeDirectory: runtimeDirectory))) != nil else { return }
            let perTick = max(writesPerSecond / 1000, 1)
            let reply = ZMQMessage()
            var id: UInt64 = 0
            var next = now()
            while !stopFlag.load(ordering: .relaxed) {
                for _ in 0..<perTick {
                    id += 1
                    _ = try? dealer.send(WireEncoder.putRequest(id: id, key: "bench.load.\(id % 1000)", encodedValue: encodedValue))
                }
                next += 1_000_000
                while now() < next {
                    while (try? dealer.receive(into: reply, flags: .dontWait)) == true {
                        acknowledged.wrappingAdd(1, ordering: .relaxed)
                    }
                    usleep(100)
                }
            }
        }
    }

    /// Stops writing; returns the writes acknowledged.
    func stop() -> Int {
        stopFlag.store(true, ordering: .relaxed)
        finished.wait()
        return acknowledged.load(ordering: .relaxed)
    }
}

/// Subscribers that only count what arrives, each on a thread of its own: with them the daemon's
/// publish path works as it does for clients (prefix marks, each diff encoded, bundles, libzmq's
/// fan-out), while the figures stay the daemon's. They take bundles, as the client library does.
final class DrainingSubscribers: Sendable {
    private let stopping = Atomic<Bool>(false)
    /// Subscribers that have received something.
    private let started = Atomic<Int>(0)
    private let finished = DispatchGroup()
    let count: Int

    /// Connects `count` subscribers of `prefix`'s bundles and returns once each has received a warm-up write.
    init(count: Int, prefix: String, runtimeDirectory: String) throws {
        self.count = count
        let context = try ZMQContext()
        for _ in 0..<count {
            let socket = try ZMQSocket(context, type: .sub)
            try socket.setReceiveHighWaterMark(0)
            try socket.setReceiveTimeout(milliseconds: 100)
            try socket.connect(WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory))
            try socket.subscribe(WireTopic.subscription(to: prefix, bundled: true))
            nonisolated(unsafe) let owned = socket
            finished.enter()
            Thread.detachNewThread { [self] in
                defer { finished.leave() }
                let frame = ZMQMessage()
                var first = true
                while !stopping.load(ordering: .relaxed) {
                    do {
                        try owned.receive(into: frame)
                    } catch {
                        continue  // the timeout: look at the stop flag again
                    }
                    if first {
                        first = false
                        started.add(1, ordering: .relaxed)
                    }
                }
                owned.close()
            }
        }
        let writer = try WireClient(runtimeDirectory: runtimeDirectory)
        let deadline = Date().addingTimeInterval(10)
        var value = Beacon_V1_Value()
        value.intValue = 0
        while started.load(ordering: .relaxed) < count {
            guard Date() < deadline else { throw ValidationError("subscribers never received the warm-up writes") }
            _ = try writer.put(prefix + "warm-up", value)
            usleep(10_000)
        }
    }

    /// Stops and closes every subscriber.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        finished.wait()
    }
}

struct DaemonBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon", abstract: "beacond's journaled write rate and write-to-subscriber latency vs raw libzmq.")

    @Option(help: "Writes per throughput run.") var writes = 200_000
    @Option(help: "Requests in flight for the pipelined run.") var window = 20_000
    @Option(help: "Writes per Batch request in the batched pipelined run.") var batch = 64
    @Option(help: "Distinct keys written.") var keys = 1_000
    @Option(help: "Latency samples.") var samples = 5_000
    @Option(help: "Repetitions; medians and spread are printed.") var runs = 3
    @Option(help: "Journal durability: normal or full.") var durability = "normal"
    @Option(help: "beacond --max-batch: requests per group commit.") var maxBatch = 2048
    @Option(help: "Background writes per second while latency is measured under load.") var loadRate = 50_000
    @Option(help: "Only the pipelined write rate (write-rate), for profiling the daemon under load alone.") var only: String?
    @Flag(help: "With --only write-rate: run the daemon in this process, for callgrind (valgrind cannot run beacond).")
    var inProcess = false
    @Option(help: "With --only write-rate: subscribers of the written keys' bundles, which only count what arrives (the daemon's publish path under load).")
    var subscribers = 0

    func validate() throws {
        if let only, only != "write-rate" { throw ValidationError("--only takes write-rate") }
        if inProcess && only == nil { throw ValidationError("--in-process needs --only write-rate") }
        if subscribers > 0 && only == nil { throw ValidationError("--subscribers needs --only write-rate") }
    }

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("beacon-bench daemon: \(writes) writes of 64-byte values over \(keys) keys, window \(window), \(runs) runs, durability \(durability), ipc" + (subscribers > 0 ? ", \(subscribers) subscribers" : ""))

        var rawRates: [Double] = []
        var rawLatency: [Double] = []
        var writeRates: [Double] = []
        var batchedRates: [Double] = []
        var serialRates: [Double] = []
        var p50s: [Double] = []
        var p99s: [Double] = []
        var loadedP50s: [Double] = []
        var loadedP99s: [Double] = []
        var loadedP999s: [Double] = []
        var loadedMaxima: [Double] = []
        var readP50s: [Double] = []
        var readP999s: [Double] = []
        var readMaxima: [Double] = []
        var loadRates: [Double] = []
        if only == "write-rate" {
            // As beacond does first thing (SQLite's memory statistics take a global mutex per allocation).
            if inProcess { _ = Journal.disableSQLiteMemoryStatistics() }
            for run in 0..<runs {
                for batch in [1, batch] {
                    let daemon = try DaemonUnderTest(directory: directory + "/d\(run)-\(batch)", durability: durability,
                                                     maxBatch: maxBatch, inProcess: inProcess)
                    defer { daemon.stop() }
                    let draining = subscribers > 0
                        ? try DrainingSubscribers(count: subscribers, prefix: "bench.", runtimeDirectory: daemon.runtimeDirectory) : nil
                    defer { draining?.stop() }
                    writeRates.append(try pipelinedWrites(daemon, batch: batch))
                }
            }
            return
        }
        for run in 0..<runs {
            rawRates.append(try RawZMQ.pubSubRate(messages: 1_000_000, directory: directory))
            rawLatency.append(median(try RawZMQ.oneWayLatencies(samples: samples, directory: directory)))

            let daemon = try DaemonUnderTest(directory: directory + "/d\(run)", durability: durability, maxBatch: maxBatch)
            defer { daemon.stop() }
            writeRates.append(try pipelinedWrites(daemon, batch: 1))
            batchedRates.append(try pipelinedWrites(daemon, batch: batch))
            serialRates.append(try serialWrites(daemon, count: min(writes, 20_000)))
            let latencies = try writeToSubscriberLatencies(daemon).sorted()
            p50s.append(percentile(latencies, 0.5))
            p99s.append(percentile(latencies, 0.99))
            let load = PacedWriter(runtimeDirectory: daemon.runtimeDirectory, writesPerSecond: loadRate,
                                   encodedValue: try value(1).serializedBytes())
            usleep(200_000)
            let started = now()
            let loaded = try writeToSubscriberLatencies(daemon).sorted()
            let reads = try readRoundTrips(daemon, seconds: 2).sorted()
            let background = load.stop()
            loadRates.append(Double(background) / (Double(now() - started) / 1e9 + 0.2))
            loadedP50s.append(percentile(loaded, 0.5))
            loadedP99s.append(percentile(loaded, 0.99))
            loadedP999s.append(percentile(loaded, 0.999))
            loadedMaxima.append(loaded.last ?? 0)
            readP50s.append(percentile(reads, 0.5))
            readP999s.append(percentile(reads, 0.999))
            readMaxima.append(reads.last ?? 0)
        }
        func spread(_ values: [Double], _ show: (Double) -> String) -> String {
            "\(show(median(values))) [\(show(values.min()!))–\(show(values.max()!))]"
        }
        let rawRate = median(rawRates)
        let rawOneWay = median(rawLatency)
        print("")
        print("| figure | median [min–max] | vs raw libzmq |")
        print("| --- | --- | --- |")
        print("| raw libzmq PUB→SUB, 2 frames, 64 B, ipc | \(spread(rawRates) { format($0) + " msg/s" }) | 1.00 |")
        print("| raw libzmq one-way latency (DEALER/ROUTER RTT ÷ 2) | \(spread(rawLatency) { String(format: "%.1f µs", $0) }) | 1.00 |")
        print("| beacond committed+published writes/s, pipelined, one request per write | \(spread(writeRates) { format($0) + "/s" }) | \(String(format: "%.2f", median(writeRates) / rawRate)) of msg rate |")
        print("| beacond committed+published writes/s, pipelined, \(batch) writes per Batch request | \(spread(batchedRates) { format($0) + "/s" }) | \(String(format: "%.2f", median(batchedRates) / rawRate)) of msg rate |")
        print("| beacond writes/s, one at a time | \(spread(serialRates) { format($0) + "/s" }) | \(String(format: "%.2f", median(serialRates) / rawRate)) |")
        print("| write request → diff at subscriber, p50 | \(spread(p50s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(p50s) / rawOneWay)) one-way |")
        print("| write request → diff at subscriber, p99 | \(spread(p99s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(p99s) / rawOneWay)) one-way |")
        print("| same under \(format(median(loadRates)))/s background writes, p50 | \(spread(loadedP50s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(loadedP50s) / rawOneWay)) one-way |")
        print("| same under \(format(median(loadRates)))/s background writes, p99 | \(spread(loadedP99s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(loadedP99s) / rawOneWay)) one-way |")
        print("| same under \(format(median(loadRates)))/s background writes, p99.9 | \(spread(loadedP999s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(loadedP999s) / rawOneWay)) one-way |")
        print("| same under \(format(median(loadRates)))/s background writes, slowest of \(samples) | \(spread(loadedMaxima) { String(format: "%.1f µs", $0) }) | |")
        print("| `Get` of another key, round trip, under \(format(median(loadRates)))/s background writes for 2 s, p50 | \(spread(readP50s) { String(format: "%.1f µs", $0) }) | \(String(format: "%.1f×", median(readP50s) / rawOneWay)) one-way |")
        print("| the same, p99.9 | \(spread(readP999s) { String(format: "%.1f µs", $0) }) | |")
        print("| the same, slowest | \(spread(readMaxima) { String(format: "%.1f µs", $0) }) | |")
    }

    private func value(_ i: Int) -> Beacon_V1_Value {
        .with { $0.bytesValue = Data(repeating: UInt8(truncatingIfNeeded: i), count: 64) }
    }

    /// Keeps `window` puts in flight; returns acknowledged (committed and published) writes per
    /// second. Requests are encoded by hand and replies checked by their first bytes, so that the
    /// client costs about what a C client would and the figure is the daemon's.
    /// - Parameter batch: puts per request message; above 1 they go in `Batch` requests.
    private func pipelinedWrites(_ daemon: DaemonUnderTest, batch: Int) throws -> Double {
        let context = try ZMQContext()
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.setSendHighWaterMark(0)
        try dealer.setReceiveHighWaterMark(0)
        try dealer.connect(WireEndpoint.request(inRuntimeDirectory: daemon.runtimeDirectory))
        // Options read once: an option's getter in the loop costs the client more than the rest of it.
        let writes = self.writes, window = self.window, keys = self.keys
        let keyNames = (0..<keys).map { "bench.key.\($0)" }
        let encodedValues = try (0..<256).map { try value($0).serializedBytes() as [UInt8] }
        // A write reply starts with the id (field 1) and then field 14 (WriteReply): tag 0x72.
        func isWriteReply(_ bytes: UnsafeRawBufferPointer) -> Bool {
            var index = 0
            guard bytes.count > 2, bytes[0] == 0x08 else { return false }
            index = 1
            while index < bytes.count && bytes[index] & 0x80 != 0 { index += 1 }
            return index + 1 < bytes.count && bytes[index + 1] == 0x72
        }
        func isWriteReply(_ frame: ZMQMessage) -> Bool { frame.withUnsafeBytes { isWriteReply($0) } }
        let cpuBefore = daemon.cpuSecondsByThread()
        let start = now()
        var sent = 0, acknowledged = 0
        let reply = ZMQMessage()
        var requests: [[UInt8]] = []
        while acknowledged < writes {
            while sent < writes && sent - acknowledged < window {
                let request = WireEncoder.putRequest(id: UInt64(sent + 1), key: keyNames[sent % keys],
                                                     encodedValue: encodedValues[sent & 255])
                sent += 1
                if batch == 1 {
                    try dealer.send(request)
                    continue
                }
                requests.append(request)
                if requests.count == batch || sent == writes || sent - acknowledged == window {
                    try dealer.send(WireEncoder.batchRequest(id: UInt64(sent), requests: requests))
                    requests.removeAll(keepingCapacity: true)
                }
            }
            try dealer.receive(into: reply)
            // A BatchReply has the layout of a Batch request: id, then field 22 holding the replies.
            let replies = batch == 1 ? nil : reply.withUnsafeBytes { FastBatch.parse($0)?.requests }
            let answered = replies?.count ?? 1
            let allWritten = reply.withUnsafeBytes { bytes in
                replies.map { $0.allSatisfy { isWriteReply(UnsafeRawBufferPointer(rebasing: bytes[$0])) } } ?? isWriteReply(bytes)
            }
            guard allWritten else {
                throw ValidationError("write refused: \((try? Beacon_V1_Reply(serializedBytes: reply.bytes)).map { "\($0)" } ?? "undecodable")")
            }
            acknowledged += answered
        }
        let rate = Double(writes) / (Double(now() - start) / 1e9)
        var cpu: [String: Double] = [:]
        for (id, thread) in daemon.cpuSecondsByThread() {
            cpu[thread.name, default: 0] += thread.seconds - (cpuBefore[id]?.seconds ?? 0)
        }
        let perWrite = { (seconds: Double) in String(format: "%.2f", seconds / Double(writes) * 1e6) }
        let threads = cpu.sorted { $0.value > $1.value }.filter { $0.value > 0 }.map { "\($0.key) \(perWrite($0.value))" }
        let stats = try WireClient(runtimeDirectory: daemon.runtimeDirectory).stats()
        let shape = batch == 1 ? "one request per write" : "\(batch) writes per Batch request"
        print("  pipelined run, \(shape): " + String(format: "%.0f writes/s, %.1f writes per journal commit",
                                                      rate, Double(stats.writes) / Double(max(stats.commits, 1))))
        let whose = inProcess ? "process (daemon and client)" : "daemon"
        print("  \(whose) CPU per write: \(perWrite(cpu.values.reduce(0, +))) µs (\(threads.joined(separator: ", ")))")
        return rate
    }

    private func serialWrites(_ daemon: DaemonUnderTest, count: Int) throws -> Double {
        let client = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        let start = now()
        for i in 0..<count { _ = try client.put("bench.serial.\(i % keys)", value(i)) }
        return Double(count) / (Double(now() - start) / 1e9)
    }

    /// One `Get` at a time for `seconds`, of a key no write touches meanwhile: each one's round
    /// trip, µs. A slow one waited for a commit (one that checkpoints SQLite's write-ahead log
    /// syncs two files), or for the loop.
    private func readRoundTrips(_ daemon: DaemonUnderTest, seconds: Double) throws -> [Double] {
        let reader = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try reader.put("bench.read", value(0))
        var roundTrips: [Double] = []
        let end = now() + UInt64(seconds * 1e9)
        while true {
            let start = now()
            guard start < end else { return roundTrips }
            _ = try reader.get("bench.read")
            roundTrips.append(Double(now() - start) / 1000)
        }
    }

    /// One write at a time; time from sending the request to the diff arriving at a subscriber.
    private func writeToSubscriberLatencies(_ daemon: DaemonUnderTest) throws -> [Double] {
        let writer = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        let subscriber = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        try subscriber.subscribe("bench.lat.")
        // Wait until the subscription is live.
        var live = false
        while !live {
            _ = try writer.put("bench.lat.probe", value(0))
            while let publication = try subscriber.receivePublication(timeoutMilliseconds: 20) {
                if case .diff = publication { live = true }
            }
        }
        var latencies: [Double] = []
        latencies.reserveCapacity(samples)
        for i in 0..<samples {
            let start = now()
            try writer.send(.put(.with { $0.key = "bench.lat.\(i % 100)"; $0.value = value(i) }))
            while true {
                guard let publication = try subscriber.receivePublication(timeoutMilliseconds: 5000) else {
                    throw ValidationError("diff \(i) never arrived")
                }
                if case .diff(let diff) = publication, diff.event.change.key == "bench.lat.\(i % 100)" { break }
            }
            latencies.append(Double(now() - start) / 1000)
            _ = try writer.receiveReply(timeoutMilliseconds: 5000)
        }
        return latencies
    }
}
