import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

// The peer comparison: raw libzmq (the ceiling), beacond, Mosquitto and Redis, driven by
// the same code with the same workload in one run. Every system is reached over a Unix socket
// on this machine; every write carries a 64-byte value whose first bytes are its sequence number
// and its send time, so subscribers measure delivery the same way for all of them.

/// A writer: `send` queues one write; `flush` sends what a batching writer holds back;
/// `awaitAcknowledgement` waits for the oldest unacknowledged one (flushing first).
protocol PeerWriter: AnyObject {
    func send(key: String, value: [UInt8]) throws
    func flush() throws
    func awaitAcknowledgement() throws
}

extension PeerWriter {
    func flush() {}
}

/// A subscriber to every key the writers write: `receive` returns the next value.
protocol PeerSubscriber: AnyObject {
    func receive() throws -> ArraySlice<UInt8>
}

/// A system under comparison, started on its own directory.
protocol ComparedSystem: AnyObject {
    var name: String { get }
    /// What is measured: durability, delivery guarantee.
    var variant: String { get }
    func makeWriter() throws -> any PeerWriter
    func makeSubscriber() throws -> any PeerSubscriber
    func stop()
}

/// A value of the workload: sequence number, send time (ns), filler to 64 bytes.
enum BenchValue {
    static let size = 64
    static let warmUpBit: UInt64 = 1 << 63

    static func make(sequence: UInt64, sentAt: UInt64) -> [UInt8] {
        var bytes = [UInt8](repeating: 0x61, count: size)
        withUnsafeBytes(of: sequence.littleEndian) { bytes.replaceSubrange(0..<8, with: $0) }
        withUnsafeBytes(of: sentAt.littleEndian) { bytes.replaceSubrange(8..<16, with: $0) }
        return bytes
    }

    static func read(_ bytes: ArraySlice<UInt8>) -> (sequence: UInt64, sentAt: UInt64)? {
        guard bytes.count >= 16 else { return nil }
        var sequence: UInt64 = 0, sentAt: UInt64 = 0
        withUnsafeMutableBytes(of: &sequence) { $0.copyBytes(from: bytes.prefix(8)) }
        withUnsafeMutableBytes(of: &sentAt) { $0.copyBytes(from: bytes.dropFirst(8).prefix(8)) }
        return (UInt64(littleEndian: sequence), UInt64(littleEndian: sentAt))
    }
}

// MARK: The systems

/// libzmq PUB→SUB with nothing in between: the ceiling. Nothing is acknowledged.
final class RawZMQSystem: ComparedSystem {
    let name = "raw libzmq"
    let variant = "PUB→SUB, 2 frames, no broker, no journal"
    private let context: ZMQContext
    private let endpoint: String

    init(directory: String) throws {
        context = try ZMQContext()
        endpoint = "ipc://\(directory)/raw-peer"
    }

    private final class Writer: PeerWriter {
        let socket: ZMQSocket
        init(_ socket: ZMQSocket) { self.socket = socket }
        func send(key: String, value: [UInt8]) throws {
            try socket.send(Array(key.utf8), flags: .sendMore)
            try socket.send(value)
        }
        func awaitAcknowledgement() {}
    }

    private final class Subscriber: PeerSubscriber {
        let socket: ZMQSocket
        let frame = ZMQMessage()
        init(_ socket: ZMQSocket) { self.socket = socket }
        func receive() throws -> ArraySlice<UInt8> {
            try socket.receive(into: frame)
            try socket.receive(into: frame)
            return frame.bytes[...]
        }
    }

    private var publisher: ZMQSocket?

    func makeWriter() throws -> any PeerWriter {
        let socket = try ZMQSocket(context, type: .pub)
        try socket.setSendHighWaterMark(0)
        try socket.bind(endpoint)
        publisher = socket
        return Writer(socket)
    }

    func makeSubscriber() throws -> any PeerSubscriber {
        let socket = try ZMQSocket(context, type: .sub)
        try socket.setReceiveHighWaterMark(0)
        try socket.connect(endpoint)
        try socket.subscribe(Array("bench.".utf8))
        return Subscriber(socket)
    }

    func stop() { publisher = nil }
}

/// A release beacond: every write journaled (WAL, synchronous=NORMAL) before its diff is published.
/// With `batch` above 1, the writer sends its puts in `Batch` requests of up to that many, as
/// the client library does with writes queued together. Subscribers take bundles, as the client
/// library does, unless `bundles` is false: then one message per diff.
final class BeaconSystem: ComparedSystem {
    let name: String
    let variant: String
    private let daemon: DaemonUnderTest
    private let context: ZMQContext
    private let batch: Int
    private let bundles: Bool

    init(directory: String, batch: Int = 1, bundles: Bool = true) throws {
        self.batch = batch
        self.bundles = bundles
        name = (batch == 1 ? "Beacon" : "Beacon, batched") + (bundles ? "" : ", diffs")
        variant = "journaled in SQLite before publishing, diff with version and revision"
            + (batch == 1 ? "; one request per write" : "; up to \(batch) writes per Batch request")
            + (bundles ? "; subscribers take bundles" : "; subscribers take one message per diff")
        daemon = try DaemonUnderTest(directory: directory + "/" + name.filter(\.isLetter), durability: "normal", maxBatch: 2048)
        context = try ZMQContext()
    }

    private final class Writer: PeerWriter {
        let socket: ZMQSocket
        let batch: Int
        let reply = ZMQMessage()
        var id: UInt64 = 0
        var queued: [[UInt8]] = []
        /// Writes acknowledged by a batch reply already read, not yet awaited one by one.
        var acknowledgedAhead = 0
        init(_ socket: ZMQSocket, batch: Int) {
            self.socket = socket
            self.batch = batch
        }
        func send(key: String, value: [UInt8]) throws {
            id += 1
            // A bytes value (field 6 of Value): tag, length, the bytes.
            let request = WireEncoder.putRequest(id: id, key: key, encodedValue: [0x32, UInt8(value.count)] + value)
            guard batch > 1 else {
                try socket.send(request)
                return
            }
            queued.append(request)
            if queued.count == batch { try flush() }
        }
        func flush() throws {
            guard !queued.isEmpty else { return }
            try socket.send(queued.count == 1 ? queued[0] : WireEncoder.batchRequest(id: id, requests: queued))
            queued.removeAll(keepingCapacity: true)
        }
        func awaitAcknowledgement() throws {
            if acknowledgedAhead > 0 {
                acknowledgedAhead -= 1
                return
            }
            try flush()
            try socket.receive(into: reply)
            // A BatchReply has the layout of a Batch request: id, then field 22 holding the replies.
            if let replies = reply.withUnsafeBytes({ FastBatch.parse($0) }) { acknowledgedAhead = replies.requests.count - 1 }
        }
    }

    private final class Subscriber: PeerSubscriber {
        let socket: ZMQSocket
        let topic = ZMQMessage()
        let body = ZMQMessage()
        /// The rest of the last bundle's diffs.
        var bundled: [Beacon_V1_Diff] = []
        var next = 0
        init(_ socket: ZMQSocket) { self.socket = socket }
        func receive() throws -> ArraySlice<UInt8> {
            while true {
                let diff: Beacon_V1_Diff
                if next < bundled.count {
                    diff = bundled[next]
                    next += 1
                } else {
                    try socket.receive(into: topic)
                    try socket.receive(into: body)
                    // As the client library reads them: by hand, SwiftProtobuf only for what that declines.
                    if topic.withUnsafeBytes({ WireTopic.kind(of: $0) }) == .bundle {
                        bundled = (try? Beacon_V1_Bundle.diffs(frame: body)) ?? []
                        next = 0
                        continue
                    }
                    guard let one = try? Beacon_V1_Diff(frame: body) else { continue }
                    diff = one
                }
                guard case .bytesValue(let value)? = diff.event.change.value.kind else { continue }
                return Array(value)[...]
            }
        }
    }

    func makeWriter() throws -> any PeerWriter {
        let socket = try ZMQSocket(context, type: .dealer)
        try socket.setSendHighWaterMark(0)
        try socket.setReceiveHighWaterMark(0)
        try socket.connect(WireEndpoint.request(inRuntimeDirectory: daemon.runtimeDirectory))
        return Writer(socket, batch: batch)
    }

    func makeSubscriber() throws -> any PeerSubscriber {
        let socket = try ZMQSocket(context, type: .sub)
        try socket.setReceiveHighWaterMark(0)
        try socket.connect(WireEndpoint.publish(inRuntimeDirectory: daemon.runtimeDirectory))
        try socket.subscribe(WireTopic.subscription(to: "bench.", bundled: bundles))
        return Subscriber(socket)
    }

    func stop() { daemon.stop() }
}

/// Starts a server process and waits for its socket to appear.
func startServer(_ executable: String, _ arguments: [String], socket: String, log: String) throws -> Process {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    _ = FileManager.default.createFile(atPath: log, contents: nil)
    let output = FileHandle(forWritingAtPath: log)
    process.standardOutput = output
    process.standardError = output
    try process.run()
    for _ in 0..<500 where !FileManager.default.fileExists(atPath: socket) { usleep(10_000) }
    guard FileManager.default.fileExists(atPath: socket) else {
        process.terminate()
        throw PeerError("\(executable) did not open \(socket); see \(log)")
    }
    return process
}

func findExecutable(_ names: [String]) -> String? {
    for name in names {
        for directory in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] where FileManager.default.isExecutableFile(atPath: "\(directory)/\(name)") {
            return "\(directory)/\(name)"
        }
    }
    return nil
}

/// Mosquitto with persistence; QoS 1 retained publishes, a QoS 1 subscription to `bench/#`.
final class MosquittoSystem: ComparedSystem {
    let name = "Mosquitto"
    let variant = "MQTT QoS 1, retained, persistence on (periodic snapshot)"
    private let process: Process
    private let socket: String
    private var clients = 0

    init(directory: String, executable: String) throws {
        let home = directory + "/mosquitto"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        socket = home + "/mosquitto.sock"
        var settings = [
            "listener 0 \(socket)", "allow_anonymous true", "persistence true", "persistence_location \(home)/",
            // Without these, a subscriber that falls behind loses messages (1,000 queued by default).
            "max_queued_messages 0", "max_queued_bytes 0",
        ]
        if getuid() == 0 { settings.append("user root") }  // otherwise it drops to a user that cannot bind here
        try (settings.joined(separator: "\n") + "\n").write(toFile: home + "/mosquitto.conf", atomically: true, encoding: .utf8)
        process = try startServer(executable, ["-c", home + "/mosquitto.conf"], socket: socket, log: home + "/mosquitto.log")
    }

    private final class Writer: PeerWriter {
        let connection: MQTTConnection
        init(_ connection: MQTTConnection) { self.connection = connection }
        func send(key: String, value: [UInt8]) throws {
            try connection.publish(topic: key.replacingOccurrences(of: ".", with: "/"), payload: value)
        }
        func awaitAcknowledgement() throws { try connection.awaitAcknowledgement() }
    }

    private final class Subscriber: PeerSubscriber {
        let connection: MQTTConnection
        init(_ connection: MQTTConnection) { self.connection = connection }
        func receive() throws -> ArraySlice<UInt8> { try connection.receive() }
    }

    private func nextClientID() -> String {
        clients += 1
        return "bench-\(getpid())-\(clients)"
    }

    func makeWriter() throws -> any PeerWriter {
        Writer(try MQTTConnection(path: socket, clientID: nextClientID()))
    }

    func makeSubscriber() throws -> any PeerSubscriber {
        let connection = try MQTTConnection(path: socket, clientID: nextClientID())
        try connection.subscribe(filter: "bench/#")
        return Subscriber(connection)
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}

/// Redis with an append-only file (fsync every second); a write is SET plus PUBLISH of the
/// value on a channel named by the key, a subscriber PSUBSCRIBEs to `bench.*`.
final class RedisSystem: ComparedSystem {
    let name = "Redis"
    let variant = "SET + PUBLISH of the value, AOF appendfsync everysec"
    private let process: Process
    private let socket: String

    init(directory: String, executable: String) throws {
        let home = directory + "/redis"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        socket = home + "/redis.sock"
        process = try startServer(executable, [
            "--port", "0", "--unixsocket", socket, "--dir", home, "--appendonly", "yes", "--appendfsync", "everysec",
            "--save", "", "--client-output-buffer-limit", "pubsub 0 0 0",
        ], socket: socket, log: home + "/redis.log")
    }

    private final class Writer: PeerWriter {
        let connection: RedisConnection
        static let set = Array("SET".utf8), publish = Array("PUBLISH".utf8)
        init(_ connection: RedisConnection) { self.connection = connection }
        func send(key: String, value: [UInt8]) throws {
            let key = Array(key.utf8)
            try connection.send([Self.set, key, value])
            try connection.send([Self.publish, key, value])
        }
        func awaitAcknowledgement() throws {
            try connection.reply()
            try connection.reply()
        }
    }

    private final class Subscriber: PeerSubscriber {
        let connection: RedisConnection
        init(_ connection: RedisConnection) { self.connection = connection }
        func receive() throws -> ArraySlice<UInt8> { try connection.receiveMessage() }
    }

    func makeWriter() throws -> any PeerWriter { Writer(try RedisConnection(path: socket)) }

    func makeSubscriber() throws -> any PeerSubscriber {
        let connection = try RedisConnection(path: socket)
        try connection.send([Array("PSUBSCRIBE".utf8), Array("bench.*".utf8)])
        try connection.reply()
        return Subscriber(connection)
    }

    func stop() {
        process.terminate()
        process.waitUntilExit()
    }
}

// MARK: The workload

/// Subscribers on threads of their own, each counting the workload's values and timing them.
final class SubscriberThreads: @unchecked Sendable {
    private let lock = NSLock()
    private let arrived = NSCondition()
    private var lastSequence: [UInt64]
    private var counts: [Int]
    private var finishedAt: [UInt64]
    private var warmedUp: [Bool]
    private var latencies: [Double] = []
    private var failure: String?
    private let expected: Int

    /// Starts one thread per subscriber; each stops after `expected` workload values.
    init(_ subscribers: [any PeerSubscriber], expected: Int) {
        self.expected = expected
        lastSequence = Array(repeating: 0, count: subscribers.count)
        counts = Array(repeating: 0, count: subscribers.count)
        finishedAt = Array(repeating: 0, count: subscribers.count)
        warmedUp = Array(repeating: false, count: subscribers.count)
        let created = now()
        for (index, subscriber) in subscribers.enumerated() {
            nonisolated(unsafe) let subscriber = subscriber
            Thread.detachNewThread { [self] in
                do {
                    while true {
                        guard let (sequence, sentAt) = BenchValue.read(try subscriber.receive()) else { continue }
                        // Retained values of earlier runs (Mosquitto sends them on subscribing) do not count.
                        guard sentAt >= created else { continue }
                        let arrival = now()
                        arrived.lock()
                        if sequence & BenchValue.warmUpBit != 0 {
                            warmedUp[index] = true
                        } else {
                            counts[index] += 1
                            lastSequence[index] = sequence
                            if index == 0 { latencies.append(Double(arrival - sentAt) / 1000) }
                            if counts[index] == expected { finishedAt[index] = arrival }
                        }
                        arrived.broadcast()
                        let done = counts[index] >= expected
                        arrived.unlock()
                        if done { return }
                    }
                } catch {
                    arrived.lock()
                    failure = "\(error)"
                    arrived.broadcast()
                    arrived.unlock()
                }
            }
        }
    }

    /// Waits until `condition` holds or `seconds` pass; throws a subscriber's failure.
    private func wait(seconds: Double, _ condition: () -> Bool) throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        arrived.lock()
        defer { arrived.unlock() }
        while !condition() {
            if let failure { throw PeerError("subscriber: \(failure)") }
            if !arrived.wait(until: deadline) { return condition() }
        }
        return true
    }

    var allWarmedUp: Bool { arrived.withLock { warmedUp.allSatisfy { $0 } } }

    func waitForWarmUp(seconds: Double) throws -> Bool { try wait(seconds: seconds) { warmedUp.allSatisfy { $0 } } }

    /// Waits until the first subscriber has seen `sequence`.
    func waitFor(sequence: UInt64, seconds: Double) throws -> Bool {
        try wait(seconds: seconds) { counts[0] > 0 && lastSequence[0] >= sequence }
    }

    /// Waits for every subscriber to finish; returns the last arrival time.
    func waitForAll(seconds: Double) throws -> UInt64? {
        guard try wait(seconds: seconds, { counts.allSatisfy { $0 >= expected } }) else { return nil }
        return arrived.withLock { finishedAt.max() }
    }

    var receivedLatencies: [Double] { arrived.withLock { latencies } }
    var received: [Int] { arrived.withLock { counts } }
}

/// Sends warm-up values until every subscriber has seen one (subscriptions take a moment to arrive).
func warmUp(_ writer: any PeerWriter, _ threads: SubscriberThreads, acknowledged: Bool) throws {
    var sequence = BenchValue.warmUpBit
    for _ in 0..<500 {
        try writer.send(key: "bench.warmup", value: BenchValue.make(sequence: sequence, sentAt: now()))
        if acknowledged { try writer.awaitAcknowledgement() }
        sequence += 1
        if try threads.waitForWarmUp(seconds: 0.02) { return }
    }
    throw PeerError("subscribers never received the warm-up writes")
}

struct PeerRunResult {
    var writeRate: Double  // acknowledged writes per second
    var deliveryRate: Double  // values per second at the slowest subscriber, first send to last arrival
}

/// `writes` pipelined writes over `keys` keys with at most `window` unacknowledged.
func pipelinedRun(_ system: any ComparedSystem, subscribers count: Int, writes: Int, keys: Int, window: Int,
                  acknowledged: Bool) throws -> PeerRunResult {
    let writer = try system.makeWriter()
    let threads = SubscriberThreads(try (0..<count).map { _ in try system.makeSubscriber() }, expected: writes)
    try warmUp(writer, threads, acknowledged: acknowledged)
    let keyNames = (0..<keys).map { "bench.k\($0)" }
    let start = now()
    var outstanding = 0
    for i in 0..<writes {
        try writer.send(key: keyNames[i % keys], value: BenchValue.make(sequence: UInt64(i), sentAt: now()))
        outstanding += 1
        if acknowledged && outstanding >= window {
            try writer.awaitAcknowledgement()
            outstanding -= 1
        }
    }
    if acknowledged { for _ in 0..<outstanding { try writer.awaitAcknowledgement() } }
    let committed = now()
    guard let last = try threads.waitForAll(seconds: 120) else {
        throw PeerError("\(system.name): subscribers received \(threads.received) of \(writes)")
    }
    return PeerRunResult(writeRate: Double(writes) / (Double(committed - start) / 1e9),
                         deliveryRate: Double(writes) / (Double(last - start) / 1e9))
}

/// One write at a time, `pause` apart: one-way latency from send to arrival at a subscriber, µs.
func latencyRun(_ system: any ComparedSystem, samples: Int, pauseMicroseconds: UInt32, acknowledged: Bool) throws -> [Double] {
    let writer = try system.makeWriter()
    let threads = SubscriberThreads([try system.makeSubscriber()], expected: samples)
    try warmUp(writer, threads, acknowledged: acknowledged)
    for i in 0..<samples {
        try writer.send(key: "bench.lat\(i % 100)", value: BenchValue.make(sequence: UInt64(i), sentAt: now()))
        try writer.flush()
        guard try threads.waitFor(sequence: UInt64(i), seconds: 10) else { throw PeerError("\(system.name): value \(i) never arrived") }
        if acknowledged { try writer.awaitAcknowledgement() }
        usleep(pauseMicroseconds)
    }
    return threads.receivedLatencies.sorted()
}

struct PeerBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peers",
        abstract: "Raw libzmq, Beacon, Mosquitto and Redis on the same workload in one run: write rate, delivery rate, latency.")

    @Option(help: "Writes per throughput run.") var writes = 100_000
    @Option(help: "Distinct keys written.") var keys = 1_000
    @Option(help: "Unacknowledged writes allowed in flight (pipelining).") var window = 1_000
    @Option(help: "Subscriber counts (threads of this process, each with its own connection).") var subscribers: [Int] = [1, 8]
    @Option(help: "Latency samples per run.") var samples = 2_000
    @Option(help: "Pause between latency samples, µs (moderate load).") var pause: UInt32 = 500
    @Option(help: "Repetitions; medians and spread are printed.") var runs = 3
    @Option(help: "Writes per Batch request for beacon-batched.") var batch = 64
    @Option(help: "Systems to run, by name (beacon-diffs, beacon-batched-diffs: subscribers take one message per diff).")
    var systems: [String] = ["zmq", "beacon", "beacon-batched", "beacon-diffs", "beacon-batched-diffs", "mosquitto", "redis"]

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("beacon-bench peers: \(writes) writes of \(BenchValue.size)-byte values over \(keys) keys, window \(window), \(runs) runs, Unix sockets")

        var started: [any ComparedSystem] = []
        defer { started.forEach { $0.stop() } }
        for name in systems {
            switch name {
            case "zmq": started.append(try RawZMQSystem(directory: directory))
            case "beacon": started.append(try BeaconSystem(directory: directory))
            case "beacon-batched": started.append(try BeaconSystem(directory: directory, batch: batch))
            case "beacon-diffs": started.append(try BeaconSystem(directory: directory, bundles: false))
            case "beacon-batched-diffs": started.append(try BeaconSystem(directory: directory, batch: batch, bundles: false))
            case "mosquitto":
                guard let executable = findExecutable(["mosquitto"]) else {
                    print("Mosquitto is not installed (apt-get install mosquitto): left out"); continue
                }
                started.append(try MosquittoSystem(directory: directory, executable: executable))
            case "redis":
                guard let executable = findExecutable(["redis-server"]) else {
                    print("Redis is not installed (apt-get install redis-server): left out"); continue
                }
                started.append(try RedisSystem(directory: directory, executable: executable))
            default:
                throw ValidationError("unknown system \(name): zmq, beacon, beacon-batched, beacon-diffs, beacon-batched-diffs, mosquitto or redis")
            }
        }

        var figures: [String: [String: [Double]]] = [:]  // system → figure → one value per run
        func record(_ system: String, _ figure: String, _ value: Double) { figures[system, default: [:]][figure, default: []].append(value) }
        for run in 1...runs {
            for system in started {
                let acknowledged = !(system is RawZMQSystem)
                for count in subscribers {
                    let result = try pipelinedRun(system, subscribers: count, writes: writes, keys: keys, window: window, acknowledged: acknowledged)
                    record(system.name, "write\(count)", result.writeRate)
                    record(system.name, "delivery\(count)", result.deliveryRate)
                }
                let latencies = try latencyRun(system, samples: samples, pauseMicroseconds: pause, acknowledged: acknowledged)
                record(system.name, "p50", percentile(latencies, 0.5))
                record(system.name, "p99", percentile(latencies, 0.99))
                record(system.name, "p999", percentile(latencies, 0.999))
                print("  run \(run): \(system.name) done")
            }
        }
        printReport(started, figures)
    }

    private func printReport(_ systems: [any ComparedSystem], _ figures: [String: [String: [Double]]]) {
        func spread(_ values: [Double]?, _ show: (Double) -> String) -> String {
            guard let values, !values.isEmpty else { return "–" }
            return "\(show(median(values))) [\(show(values.min()!))–\(show(values.max()!))]"
        }
        func rate(_ value: Double) -> String { format(value) + "/s" }
        func micro(_ value: Double) -> String { value >= 1000 ? String(format: "%.2f ms", value / 1000) : String(format: "%.0f µs", value) }
        func figure(_ system: String, _ name: String) -> Double? { figures[system]?[name].map(median) }

        print("")
        print("| system | what is measured |")
        print("| --- | --- |")
        for system in systems { print("| \(system.name) | \(system.variant) |") }
        print("")
        print("Medians [min–max] over the runs. Delivery: values per second at the slowest subscriber, first send to last arrival.")
        print("")
        var header = "| system |"
        var rule = "| --- |"
        for count in subscribers {
            header += " writes/s, \(count) sub | delivery/s, \(count) sub (each) |"
            rule += " --- | --- |"
        }
        print(header + " one-way p50 | p99 | p99.9 |")
        print(rule + " --- | --- | --- |")
        for system in systems {
            var row = "| \(system.name) |"
            for count in subscribers {
                row += system is RawZMQSystem ? " – |" : " \(spread(figures[system.name]?["write\(count)"], rate)) |"
                row += " \(spread(figures[system.name]?["delivery\(count)"], rate)) |"
            }
            row += " \(spread(figures[system.name]?["p50"], micro)) | \(spread(figures[system.name]?["p99"], micro)) | \(spread(figures[system.name]?["p999"], micro)) |"
            print(row)
        }

        guard let beaconRate = figure("Beacon", "delivery1") else { return }
        print("")
        print("Ratios of medians (Beacon ÷ other; for latency, Beacon ÷ raw libzmq):")
        print("")
        print("| figure | ratio | target |")
        print("| --- | --- | --- |")
        func verdict(_ met: Bool) -> String { met ? "**met**" : "**not met**" }
        let beaconWrite = figure("Beacon", "write1") ?? .nan
        if let raw = figure("raw libzmq", "delivery1") {
            let ratio = beaconRate / raw
            print("| Beacon delivered rate ÷ raw libzmq, 1 subscriber | \(String(format: "%.2f", ratio)) | ≥ 0.25: \(verdict(ratio >= 0.25)) |")
        }
        if let mosquitto = figure("Mosquitto", "write1") {
            let ratio = beaconWrite / mosquitto
            print("| Beacon ÷ Mosquitto, committed-and-published writes/s | \(String(format: "%.2f", ratio)) | ≥ 5: \(verdict(ratio >= 5)) |")
            if let delivered = figure("Mosquitto", "delivery1") {
                print("| Beacon ÷ Mosquitto, delivered/s, 1 subscriber | \(String(format: "%.2f", beaconRate / delivered)) | |")
            }
        }
        if let redis = figure("Redis", "write1") {
            let ratio = beaconWrite / redis
            print("| Beacon ÷ Redis, committed-and-published writes/s | \(String(format: "%.2f", ratio)) | ≥ 1.5: \(verdict(ratio >= 1.5)) |")
            if let delivered = figure("Redis", "delivery1") {
                print("| Beacon ÷ Redis, delivered/s, 1 subscriber | \(String(format: "%.2f", beaconRate / delivered)) | |")
            }
        }
        if let batched = figure("Beacon, batched", "write1") {
            for (peer, target) in [("Mosquitto", 5.0), ("Redis", 2.0)] {
                if let peerRate = figure(peer, "write1") {
                    let ratio = batched / peerRate
                    print("| Beacon, batched ÷ \(peer), committed-and-published writes/s | \(String(format: "%.2f", ratio)) | ≥ \(Int(target)): \(verdict(ratio >= target)) |")
                }
            }
            if let raw = figure("raw libzmq", "delivery1"), let delivered = figure("Beacon, batched", "delivery1") {
                let ratio = delivered / raw
                print("| Beacon, batched, delivered rate ÷ raw libzmq, 1 subscriber | \(String(format: "%.2f", ratio)) | ≥ 0.25: \(verdict(ratio >= 0.25)) |")
            }
        }
        for count in subscribers where count > 1 {
            for peer in ["Mosquitto", "Redis"] {
                if let peerRate = figure(peer, "delivery\(count)"), let ours = figure("Beacon", "delivery\(count)") {
                    let ratio = ours / peerRate
                    let target = peer == "Redis" ? "≥ 1.2: \(verdict(ratio >= 1.2))" : ""
                    print("| Beacon ÷ \(peer), delivered/s to each of \(count) subscribers | \(String(format: "%.2f", ratio)) | \(target) |")
                }
            }
        }
        if let raw50 = figure("raw libzmq", "p50"), let raw99 = figure("raw libzmq", "p99"),
           let p50 = figure("Beacon", "p50"), let p99 = figure("Beacon", "p99") {
            print("| Beacon p50 ÷ raw libzmq p50, one-way | \(String(format: "%.1f×", p50 / raw50)) | ≤ 3×: \(verdict(p50 <= 3 * raw50)) |")
            print("| Beacon p99 ÷ raw libzmq p99, one-way | \(String(format: "%.1f×", p99 / raw99)) | ≤ 10×: \(verdict(p99 <= 10 * raw99)) |")
            for peer in ["Mosquitto", "Redis"] {
                if let peer50 = figure(peer, "p50") {
                    let target = peer == "Redis" ? "≤ 2×: \(verdict(p50 <= 2 * peer50))" : ""
                    print("| Beacon p50 ÷ \(peer) p50 | \(String(format: "%.1f×", p50 / peer50)) | \(target) |")
                }
            }
        }
        // How much a system's write rate moves from run to run: its fastest run ÷ its slowest.
        func runSpread(_ system: String) -> Double? {
            guard let rates = figures[system]?["write1"], let low = rates.min(), low > 0 else { return nil }
            return rates.max()! / low
        }
        if runs > 1, let ours = runSpread("Beacon"), let redis = runSpread("Redis") {
            print("| Beacon's spread of writes/s (fastest run ÷ slowest), beside Redis's \(String(format: "%.2f", redis)) | \(String(format: "%.2f", ours)) | ≤ 1.5 × Redis's: \(verdict(ours <= 1.5 * redis)) |")
        }
    }
}
