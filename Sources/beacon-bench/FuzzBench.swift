import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// Throws random and mutated frames at every socket of a running beacond under an access policy,
/// and checks that it neither crashes, nor changes what it must not, nor grows without bound.
struct FuzzBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fuzz",
        abstract: "Random and mutated frames on the request socket, the publish socket and the raw ipc streams.")

    @Option(help: "Frames to send in all (60% requests, 30% subscriptions, 10% raw stream chunks).")
    var frames = 3_000_000

    @Option(help: "Seed of the generator, to replay a run.")
    var seed: UInt64 = 0xBEAC_F022

    @Option(help: "Most the daemon's resident memory may grow in the second half of the run, in MiB.")
    var growthLimit = 32

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // A key written before the policy exists, which the fuzzing peer may read but not write.
        var daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 4096)
        _ = try WireClient(runtimeDirectory: daemon.runtimeDirectory).put("guarded", .with { $0.stringValue = "original" })
        daemon.stop()
        let config = directory + "/fuzz.conf"
        try """
            allow = uid:\(getuid()) read=* write=fuzz.
            subscriptions_per_peer = 1000
            """.write(toFile: config, atomically: true, encoding: .utf8)
        daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 4096, extraArguments: ["--config", config])
        defer { daemon.stop() }
        let pid = daemon.process.processIdentifier
        let observer = try WireClient(runtimeDirectory: daemon.runtimeDirectory)

        var generator = FrameGenerator(seed: seed)
        let requestShare = frames * 6 / 10, subscriptionShare = frames * 3 / 10
        let rawShare = frames - requestShare - subscriptionShare
        var memory: [(String, Int)] = [("start", Self.residentBytes(of: pid))]
        let start = now()

        let requests = try RequestFuzzer(runtimeDirectory: daemon.runtimeDirectory)
        try requests.send(requestShare / 2, from: &generator)
        memory.append(("half of the requests", Self.residentBytes(of: pid)))
        try requests.send(requestShare - requestShare / 2, from: &generator)
        let replies = try requests.finish()
        memory.append(("all requests", Self.residentBytes(of: pid)))

        try SubscriptionFuzzer.send(subscriptionShare, to: WireEndpoint.publish(inRuntimeDirectory: daemon.runtimeDirectory), from: &generator)
        try RawStreamFuzzer.send(rawShare, to: [WireEndpoint.requestSocketName, WireEndpoint.publishSocketName]
            .map { daemon.runtimeDirectory + "/" + $0 }, from: &generator)
        let seconds = Double(now() - start) / 1e9
        memory.append(("end", Self.residentBytes(of: pid)))

        // Verdict: alive, honest, unchanged where it must be, bounded.
        var failures: [String] = []
        if !daemon.process.isRunning { failures.append("beacond died (status \(daemon.process.terminationStatus))") }
        let stats = try observer.stats(timeoutMilliseconds: 10_000)
        if replies != requestShare { failures.append("\(requestShare) requests got \(replies) replies") }
        if (try? observer.get("guarded").value.stringValue) != "original" { failures.append("the guarded key changed") }
        let outside = try observer.call(.list(.init()), timeoutMilliseconds: 10_000).list.kvs.filter { $0.key != "guarded" && !$0.key.hasPrefix("fuzz.") }
        if !outside.isEmpty { failures.append("keys outside fuzz. were written: \(outside.prefix(5).map(\.key))") }
        _ = try observer.put("fuzz.after", .with { $0.intValue = 1 })
        let growth = memory[memory.count - 1].1 - memory[1].1
        if growth > growthLimit << 20 { failures.append("resident memory grew \(growth >> 20) MiB in the second half") }

        print("beacon-bench fuzz: \(frames) frames in \(String(format: "%.1f", seconds)) s (\(format(Double(frames) / seconds)) frames/s), seed \(seed)")
        print("  requests: \(requestShare), each answered once (\(replies) replies); access denied \(stats.accessDenied), rejected \(stats.rejected)")
        print("  subscription frames: \(subscriptionShare); refused \(stats.subscriptionsRefused); tracked prefixes now \(stats.trackedPrefixes)")
        print("  raw stream chunks: \(rawShare) on the ipc sockets")
        print("  beacond resident memory: " + memory.map { "\($0.0) \($0.1 >> 20) MiB" }.joined(separator: ", "))
        if failures.isEmpty {
            print("  verdict: no crash, every request answered, guarded key intact, memory bounded")
        } else {
            for failure in failures { print("  FAILED: \(failure)") }
            throw ExitCode(1)
        }
    }

    static func residentBytes(of pid: Int32) -> Int {
        guard let statm = try? String(contentsOfFile: "/proc/\(pid)/statm", encoding: .utf8) else { return 0 }
        let fields = statm.split(separator: " ")
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}

/// Deterministic frames: noise, valid requests mutated, and prefixes.
struct FrameGenerator {
    private var state: UInt64
    private let templates: [[UInt8]]

    init(seed: UInt64) {
        state = seed
        let requests: [Beacon_V1_Request] = [
            .with { $0.id = 11; $0.get.key = "guarded" },
            .with { $0.id = 12; $0.list = .with { $0.prefix = "fuzz."; $0.limit = 10 } },
            .with { $0.id = 13; $0.snapshot.prefix = "fuzz." },
            .with { $0.id = 14; $0.delta = .with { $0.prefix = "fuzz."; $0.sinceRevision = 1; $0.limit = 10 } },
            .with { $0.id = 15; $0.history = .with { $0.prefix = "guarded"; $0.exact = true } },
            .with { $0.id = 16; $0.put = .with { $0.key = "fuzz.k"; $0.value.listValue.items = [.with { $0.boolValue = true }] } },
            .with { $0.id = 17; $0.put = .with { $0.key = "guarded"; $0.value.stringValue = "stolen" } },
            .with { $0.id = 18; $0.delete.key = "guarded" },
            .with { $0.id = 19; $0.txn.ops = [.with { $0.delete.key = "fuzz.k" }, .with { $0.put = .with { $0.key = "fuzz.m"; $0.value.intValue = 2 } }] },
            .with { $0.id = 20; $0.keepAlive = .with { $0.session = Data([1, 2, 3]); $0.ttlMs = 1000 } },
            .with { $0.id = 21; $0.compact.revision = 1 },
        ]
        templates = requests.map { (try? $0.serializedBytes()) ?? [] }
    }

    mutating func next() -> UInt64 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        var mixed = state
        mixed ^= mixed >> 33
        mixed = mixed &* 0xFF51_AFD7_ED55_8CCD
        return mixed ^ (mixed >> 33)
    }

    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }

    mutating func noise(upTo length: Int) -> [UInt8] {
        (0..<below(length + 1)).map { _ in UInt8(truncatingIfNeeded: next()) }
    }

    /// A request body: a template as is, mutated, or noise.
    mutating func requestBody() -> [UInt8] {
        let choice = below(10)
        if choice == 0 { return noise(upTo: 96) }
        var body = templates[below(templates.count)]
        if choice < 3 { return body }
        for _ in 0..<(1 + below(4)) where !body.isEmpty {
            let at = below(body.count)
            switch below(4) {
            case 0: body[at] = UInt8(truncatingIfNeeded: next())
            case 1: body.removeSubrange(at...)
            case 2: body.insert(contentsOf: noise(upTo: 8), at: at)
            default: body[at] ^= 0x80
            }
        }
        return body
    }

    /// A subscription frame: mostly (un)subscriptions to prefixes, sometimes anything.
    mutating func subscriptionFrame() -> [UInt8] {
        switch below(8) {
        case 0: return noise(upTo: 40)
        case 1: return [0] + Array("fuzz.\(below(5000))".utf8)
        case 2: return [1, UInt8(ascii: "!")] + noise(upTo: 4)
        default:
            let prefixes = ["", "fuzz.", "guarded", "net.", "fuzz.\(below(100_000)).", "a..b"]
            return [UInt8(below(4) == 0 ? 0 : 1)] + Array(prefixes[below(prefixes.count)].utf8)
        }
    }
}

/// Pipelines fuzzed requests on one DEALER and counts the replies.
final class RequestFuzzer {
    private let socket: ZMQSocket
    private var sent = 0
    private var replies = 0

    init(runtimeDirectory: String) throws {
        socket = try ZMQSocket(try ZMQContext(), type: .dealer)
        try socket.setSendHighWaterMark(0)
        try socket.setReceiveHighWaterMark(0)
        try socket.connect(WireEndpoint.request(inRuntimeDirectory: runtimeDirectory))
    }

    func send(_ count: Int, from generator: inout FrameGenerator) throws {
        for _ in 0..<count {
            var parts: [[UInt8]] = []
            if generator.below(8) == 0 { parts = (0..<generator.below(3)).map { _ in generator.noise(upTo: 12) } }
            parts.append(generator.requestBody())
            try socket.send(frames: parts.map { ZMQMessage(bytes: $0) })
            sent += 1
            // Keep at most ~20,000 in flight so that the daemon's queues, not ours, are tested.
            while sent - replies > 20_000, let _ = try socket.receiveMessage() { replies += 1 }
            while try socket.receiveMessage(flags: .dontWait) != nil { replies += 1 }
        }
    }

    /// Waits for the outstanding replies (10 s of silence ends the wait); returns how many came.
    func finish() throws -> Int {
        let poller = ZMQPoller()
        poller.add(socket)
        while replies < sent, try poller.poll(timeoutMilliseconds: 10_000) > 0 {
            while try socket.receiveMessage(flags: .dontWait) != nil { replies += 1 }
        }
        return replies
    }
}

/// Sends fuzzed subscription frames from XSUB sockets, opening a new one now and then so that
/// the daemon also cleans up after connections that close.
enum SubscriptionFuzzer {
    static func send(_ count: Int, to endpoint: String, from generator: inout FrameGenerator) throws {
        let context = try ZMQContext()
        var socket: ZMQSocket?
        for index in 0..<count {
            if index % 20_000 == 0 {
                socket?.close()
                let next = try ZMQSocket(context, type: .xsub)
                try next.setSendHighWaterMark(0)
                try next.connect(endpoint)
                socket = next
            }
            try socket!.send(generator.subscriptionFrame())
            // Drain what the subscriptions bring, so that the daemon is never blocked on us.
            if index % 64 == 0 { while try socket!.receiveMessage(flags: .dontWait) != nil {} }
        }
        usleep(200_000)
        socket?.close()
    }
}

/// Connects plain Unix sockets to the daemon's ipc files and writes garbage (sometimes after a
/// valid ZMTP greeting signature), as a program that is not ZeroMQ at all might.
enum RawStreamFuzzer {
    static func send(_ count: Int, to paths: [String], from generator: inout FrameGenerator) throws {
        let perConnection = 64
        var sent = 0
        while sent < count {
            guard let address = UnixSocketAddress(path: paths[generator.below(paths.count)]) else { throw ExitCode(1) }
            let fd = address.connectStream()
            if fd >= 0 {
                for chunk in 0..<perConnection {
                    var bytes = generator.noise(upTo: 200)
                    if chunk == 0 && generator.below(2) == 0 { bytes = [0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0] + bytes }
                    let written = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if written < 0 { break }
                }
                close(fd)
            }
            sent += perConnection
        }
    }
}
