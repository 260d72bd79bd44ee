import ArgumentParser
import BeaconLocking
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// A well-behaved client's write latency alone, then while another peer abuses the daemon:
/// floods it with writes (once rate-limited, once not), starts sessions, takes snapshot leases
/// on ever new prefixes, opens connections past the daemon's descriptor limit, churns
/// connections while the administrator reloads, sends subscriptions, asks for large replies it
/// never reads, or subscribes and never reads while it writes 1 MiB values, each until a limit
/// holds it.
struct FloodBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flood",
        abstract: "Write latency of a well-behaved client while another peer floods writes, sessions, leases, connections, subscriptions, or replies and publications it never reads.")

    @Option(help: "Latency samples per phase.") var samples = 3000
    @Option(help: "writes_per_second for the limited run.") var limit: UInt32 = 2000
    @Option(help: "Run only the abuses whose names contain this text.") var only: String?

    /// What the other peer does while the well-behaved client writes.
    enum Abuse: String, CaseIterable, Sendable {
        case writesLimited = "writes, limited"
        case writes = "writes, no limit"
        case keepAlives = "KeepAlive, new sessions"
        case leases = "Snapshot, new prefixes"
        case largeRequests = "15 MiB puts, 64 in flight"
        case connections = "tcp connections at 1,024 descriptors"
        case churnDuringReloads = "connections churned during reloads"
        case largeSubscriptions = "1,000-byte subscriptions, 4 connections"
        case manySubscriptions = "8-byte subscriptions, a million"
        case unreadReplies = "Lists of 2 MB, replies never read"
        case unreadRepliesManyConnections = "Lists of 2 MB, 20 connections never read"
        case unreadBatchedReads = "batched reads never read, 20 connections"
        case unreadPublications = "1 MiB values, a subscriber never reads"
        case unreadSmallPublications = "small values, 48 subscribers never read"
    }

    func run() throws {
        guard ZMQCurveKeyPair.isSupported else { throw ValidationError("the flooder is a CURVE peer; this libzmq has no CURVE") }
        print("beacon-bench flood: \(samples) serial writes by a well-behaved ipc client (root); the flooder is another peer (a CURVE key on loopback tcp)")
        for abuse in Abuse.allCases where only.map({ abuse.rawValue.contains($0) }) ?? true {
            let result = try measure(abuse)
            let p50Ratio = result.loaded.p50 / result.unloaded.p50
            print(String(format: "  %@: unloaded p50 %.0f µs p99 %.0f µs | under flood p50 %.0f µs (%.2f×) p99 %.0f µs (%.2f×) | flooder sent %@/s, accepted %@/s, refused %@/s | %@",
                         abuse.rawValue.padding(toLength: 42, withPad: " ", startingAt: 0),
                         result.unloaded.p50, result.unloaded.p99, result.loaded.p50, p50Ratio, result.loaded.p99,
                         result.loaded.p99 / result.unloaded.p99, format(result.floodSent), format(result.floodAccepted),
                         format(result.floodRefused), result.held))
            if let pings = result.pings {
                print(String(format: "    root's Ping round trips, ms: unloaded p50 %.2f p99 %.2f max %.2f | under flood p50 %.2f p99 %.2f max %.2f | from 1 s after it p50 %.2f p99 %.2f max %.2f; target p99 under 50 ms: %@",
                             pings.unloaded.p50, pings.unloaded.p99, pings.unloaded.max, pings.loaded.p50, pings.loaded.p99, pings.loaded.max,
                             pings.after.p50, pings.after.p99, pings.after.max,
                             max(pings.loaded.p99, pings.after.p99) < 50 && pings.unanswered == 0 ? "met" : "NOT met (\(pings.unanswered) unanswered)"))
            }
            if abuse == .writesLimited {
                print("  (the limit applies to every peer; a burst of \(samples * 3) lets the well-behaved client's samples through)")
                print("  target: well-behaved p50 within 2× of unloaded while throttled: \(p50Ratio <= 2 ? "met" : "NOT met")")
            }
        }
    }

    struct Result {
        var unloaded: (p50: Double, p99: Double)
        var loaded: (p50: Double, p99: Double)
        var floodSent: Double
        var floodAccepted: Double
        var floodRefused: Double
        /// What the daemon holds at the end, from its stats.
        var held: String
        /// Root's pings before, during and after the flood (for the batched reads).
        var pings: Pings?
    }

    /// Root's `Ping` round trips in ms, and how many got no answer within 3 s.
    struct Pings {
        var unloaded: (p50: Double, p99: Double, max: Double)
        var loaded: (p50: Double, p99: Double, max: Double)
        var after: (p50: Double, p99: Double, max: Double)
        var unanswered: Int
    }

    /// The loopback tcp port the daemon bound for `role` (`request`, `publish`), from `beacond.endpoints`.
    private static func boundPort(_ role: String, runtimeDirectory: String) throws -> Int {
        let text = try String(contentsOfFile: runtimeDirectory + "/beacond.endpoints", encoding: .utf8)
        for line in text.split(separator: "\n") where line.hasPrefix("\(role) tcp://") {
            if let port = line.split(separator: ":").last.flatMap({ Int($0) }) { return port }
        }
        throw ValidationError("beacond.endpoints names no tcp \(role) endpoint: \(text)")
    }

    private func measure(_ abuse: Abuse) throws -> Result {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try ZMQCurveKeyPair.generate()
        let flooderKeys = try ZMQCurveKeyPair.generate()
        try CurveKeyFile(publicKey: server.publicKey, secretKey: server.secretKey).text
            .write(toFile: directory + "/server.key", atomically: true, encoding: .utf8)
        // Ports the kernel chooses, read back from the endpoints file the daemon writes.
        let configuration = """
            request_endpoint = tcp://127.0.0.1:*
            curve_secret_key_file = \(directory)/server.key
            allow = uid:\(getuid()) read=* write=*
            publish_endpoint = tcp://127.0.0.1:*
            allow = key:\(flooderKeys.publicKey) read=flood. write=flood.
            writes_per_second = \(abuse == .writesLimited ? limit : 0)
            write_burst = \(abuse == .writesLimited ? samples * 3 : 0)
            """
        try configuration.write(toFile: directory + "/flood.conf", atomically: true, encoding: .utf8)
        // Where descriptors run out, the daemon is at the usual limit with no room to raise it.
        let launcher = abuse == .connections ? ["/usr/bin/prlimit", "--nofile=1024:1024"] : []
        let daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 4096,
                                         extraArguments: ["--config", directory + "/flood.conf"], launcher: launcher)
        defer { daemon.stop() }
        let port = try Self.boundPort("request", runtimeDirectory: daemon.runtimeDirectory)
        let publishPort = try Self.boundPort("publish", runtimeDirectory: daemon.runtimeDirectory)
        let client = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        if abuse == .unreadReplies || abuse == .unreadRepliesManyConnections { try fillTwoMegabyteList(client) }
        if abuse == .unreadBatchedReads { try fillTwoThousandKeys(client) }
        let unloaded = try latencies(client)
        var unanswered = 0
        let unloadedPings = abuse == .unreadBatchedReads ? pingLatencies(client, unanswered: &unanswered) : nil

        let target = FloodTarget(runtimeDirectory: daemon.runtimeDirectory, daemonPID: daemon.process.processIdentifier, port: port, publishPort: publishPort,
                                 credentials: CurveCredentials(serverKey: server.publicKey, keys: flooderKeys),
                                 configurationPath: directory + "/flood.conf", configuration: configuration)
        let stop = Atomic<Bool>(false)
        let counts = Locked(FloodCounts())
        let flooder = Thread { counts.withLock { $0 = Flooder(abuse: abuse, target: target).run(until: stop) } }
        flooder.start()
        Thread.sleep(forTimeInterval: 0.5)
        let started = now()
        let loaded = try latencies(client)
        let loadedPings = abuse == .unreadBatchedReads ? pingLatencies(client, unanswered: &unanswered) : nil
        let seconds = Double(now() - started) / 1e9
        stop.store(true, ordering: .relaxed)
        while !flooder.isFinished { usleep(10_000) }
        usleep(100_000)
        var pings: Pings?
        if let unloadedPings, let loadedPings {
            usleep(900_000)  // from 1 s after the flooder's connections closed
            pings = Pings(unloaded: unloadedPings, loaded: loadedPings, after: pingLatencies(client, unanswered: &unanswered),
                          unanswered: unanswered)
        }
        let flood = counts.withLock { $0 }
        let total = seconds + 0.5
        let stats = try client.stats()
        let held = "daemon holds \(stats.sessions) sessions, \(stats.trackedPrefixes) followed prefixes, "
            + "\(stats.requestConnections) request connections (\(stats.connectionsShed) shed), "
            + "\(stats.quotaExceeded + stats.leasesRefused) refused by a limit, \(stats.subscriptionsRefused) subscriptions refused, "
            + "\(stats.replyBytesKept >> 20) MiB of replies kept (\(stats.slowReadersClosed) slow readers closed), "
            + "\(stats.publishBytesUnsent >> 20) MiB unsent (\(stats.slowSubscribersClosed) slow subscribers closed), "
            + "peak memory \(residentBytes(of: daemon.process.processIdentifier, "VmHWM") >> 20) MiB"
        return Result(unloaded: unloaded, loaded: loaded, floodSent: Double(flood.sent) / total,
                      floodAccepted: Double(flood.accepted) / total, floodRefused: Double(flood.refused) / total, held: held,
                      pings: pings)
    }

    /// Fills `flood.app.` with 2,000 keys of 300 bytes: a keys-only List of them is about 70 KB.
    private func fillTwoThousandKeys(_ client: WireClient) throws {
        let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 7, count: 300) }
        for chunk in stride(from: 0, to: 2000, by: 500) {
            _ = try client.batch((chunk..<chunk + 500).map { index in .put(.with { $0.key = "flood.app.k\(index)"; $0.value = value }) })
        }
    }

    /// Root's pings, one after another, for 3 s: p50, p99 and the slowest in ms; a ping with no
    /// answer within 3 s is counted in `unanswered`.
    private func pingLatencies(_ client: WireClient, unanswered: inout Int) -> (p50: Double, p99: Double, max: Double) {
        var values: [Double] = []
        let end = now() + 3_000_000_000
        while now() < end {
            let start = now()
            guard (try? client.ping(timeoutMilliseconds: 3000)) != nil else {
                unanswered += 1
                continue
            }
            values.append(Double(now() - start) / 1e6)
            usleep(2000)
        }
        values.sort()
        return (percentile(values, 0.5), percentile(values, 0.99), values.last ?? 0)
    }

    /// Fills `flood.big.` with 500 keys of 4,000 bytes: a List of them is a 2 MB reply.
    private func fillTwoMegabyteList(_ client: WireClient) throws {
        let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 7, count: 4_000) }
        for chunk in stride(from: 0, to: 500, by: 100) {
            _ = try client.batch((chunk..<chunk + 100).map { index in .put(.with { $0.key = "flood.big.k\(index)"; $0.value = value }) })
        }
    }

    /// p50 and p99 of serial write round trips, in µs.
    private func latencies(_ client: WireClient) throws -> (p50: Double, p99: Double) {
        var values: [Double] = []
        for index in 0..<samples {
            let start = now()
            _ = try client.put("good.k\(index % 100)", .with { $0.intValue = Int64(index) })
            values.append(Double(now() - start) / 1000)
        }
        values.sort()
        return (percentile(values, 0.5), percentile(values, 0.99))
    }
}
