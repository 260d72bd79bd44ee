import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// A well-behaved client's write latency alone, then while another peer abuses the daemon:
/// floods it with writes (once rate-limited, once not), starts sessions, takes snapshot leases
/// on ever new prefixes, opens connections, asks for large replies it never reads, or
/// subscribes and never reads while it writes 1 MiB values, each until a limit holds it.
struct FloodBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flood",
        abstract: "Write latency of a well-behaved client while another peer floods writes, sessions, leases, connections, or replies and publications it never reads.")

    @Option(help: "Latency samples per phase.") var samples = 3000
    @Option(help: "writes_per_second for the limited run.") var limit: UInt32 = 2000

    /// What the other peer does while the well-behaved client writes.
    enum Abuse: String, CaseIterable {
        case writesLimited = "writes, limited"
        case writes = "writes, no limit"
        case keepAlives = "KeepAlive, new sessions"
        case leases = "Snapshot, new prefixes"
        case connections = "tcp connections, never handshaking"
        case unreadReplies = "Lists of 2 MB, replies never read"
        case unreadPublications = "1 MiB values, a subscriber never reads"
    }

    func run() throws {
        guard ZMQCurveKeyPair.isSupported else { throw ValidationError("the flooder is a CURVE peer; this libzmq has no CURVE") }
        print("beacon-bench flood: \(samples) serial writes by a well-behaved ipc client; the flooder is another peer (a CURVE key on loopback tcp)")
        for abuse in Abuse.allCases {
            let result = try measure(abuse)
            let p50Ratio = result.loaded.p50 / result.unloaded.p50
            print(String(format: "  %@: unloaded p50 %.0f µs p99 %.0f µs | under flood p50 %.0f µs (%.2f×) p99 %.0f µs (%.2f×) | flooder sent %@/s, accepted %@/s, refused %@/s | %@",
                         abuse.rawValue.padding(toLength: 34, withPad: " ", startingAt: 0),
                         result.unloaded.p50, result.unloaded.p99, result.loaded.p50, p50Ratio, result.loaded.p99,
                         result.loaded.p99 / result.unloaded.p99, format(result.floodSent), format(result.floodAccepted),
                         format(result.floodRefused), result.held))
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
    }

    private func measure(_ abuse: Abuse) throws -> Result {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let server = try ZMQCurveKeyPair.generate()
        let flooderKeys = try ZMQCurveKeyPair.generate()
        try CurveKeyFile(publicKey: server.publicKey, secretKey: server.secretKey).text
            .write(toFile: directory + "/server.key", atomically: true, encoding: .utf8)
        let port = Int.random(in: 20_000...50_000)
        try """
            request_endpoint = tcp://127.0.0.1:\(port)
            curve_secret_key_file = \(directory)/server.key
            allow = uid:\(getuid()) read=* write=*
            publish_endpoint = tcp://127.0.0.1:\(port + 1)
            allow = key:\(flooderKeys.publicKey) read=flood. write=flood.
            writes_per_second = \(abuse == .writesLimited ? limit : 0)
            write_burst = \(abuse == .writesLimited ? samples * 3 : 0)
            """.write(toFile: directory + "/flood.conf", atomically: true, encoding: .utf8)
        let daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 4096,
                                         extraArguments: ["--config", directory + "/flood.conf"])
        defer { daemon.stop() }
        let client = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        if abuse == .unreadReplies {
            // 500 keys of 4,000 bytes: a List of them is a 2 MB reply.
            let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 7, count: 4_000) }
            for chunk in stride(from: 0, to: 500, by: 100) {
                _ = try client.batch((chunk..<chunk + 100).map { index in .put(.with { $0.key = "flood.big.k\(index)"; $0.value = value }) })
            }
        }
        let unloaded = try latencies(client)

        let stop = Atomic<Bool>(false)
        let counts = Mutex<(sent: Int, accepted: Int, refused: Int)>((0, 0, 0))
        let endpoint = "tcp://127.0.0.1:\(port)"
        let flooder = Thread {
            guard let wire = try? WireClient(requestEndpoint: endpoint, publishEndpoint: endpoint,
                                             curve: CurveCredentials(serverKey: server.publicKey, keys: flooderKeys)) else { return }
            var sent = 0, accepted = 0, refused = 0, index = 0
            if abuse == .unreadReplies || abuse == .unreadPublications {
                counts.withLock { $0 = neverReading(abuse, wire: wire, port: port, server: server, keys: flooderKeys, stop: stop) }
                return
            }
            if abuse == .connections {
                // Raw connections to the CURVE port, each held until 1,100 are open, then renewed.
                var held: [Int32] = []
                while !stop.load(ordering: .relaxed) {
                    if held.count >= 1100 { close(held.removeFirst()) }
                    let fd = openTCP(port: UInt16(port))
                    sent += 1
                    if fd >= 0 { held.append(fd); accepted += 1 } else { refused += 1 }
                }
                for fd in held { close(fd) }
                counts.withLock { $0 = (sent, accepted, refused) }
                return
            }
            while !stop.load(ordering: .relaxed) {
                while sent - accepted - refused < 1000 {
                    let op: Beacon_V1_Request.OneOf_Op
                    switch abuse {
                    case .writes, .writesLimited, .connections, .unreadReplies, .unreadPublications:
                        op = .put(.with { $0.key = "flood.k\(index % 1000)"; $0.value.intValue = Int64(index) })
                    case .keepAlives:
                        op = .keepAlive(.with { $0.session = Data("flood-\(index)".utf8); $0.ttlMs = 3_600_000 })
                    case .leases:
                        op = .snapshot(.with { $0.prefix = "flood.p\(index)."; $0.limit = 1 })
                    }
                    guard (try? wire.send(op)) != nil else { break }
                    sent += 1
                    index += 1
                }
                while let reply = try? wire.receiveReply(timeoutMilliseconds: 0) {
                    if case .error = reply.result { refused += 1 } else { accepted += 1 }
                }
            }
            counts.withLock { $0 = (sent, accepted, refused) }
        }
        flooder.start()
        Thread.sleep(forTimeInterval: 0.5)
        let started = now()
        let loaded = try latencies(client)
        let seconds = Double(now() - started) / 1e9
        stop.store(true, ordering: .relaxed)
        while !flooder.isFinished { usleep(10_000) }
        usleep(100_000)
        let flood = counts.withLock { $0 }
        let total = seconds + 0.5
        let stats = try client.stats()
        let held = "daemon holds \(stats.sessions) sessions, \(stats.trackedPrefixes) followed prefixes, "
            + "\(stats.requestConnections) request connections (\(stats.connectionsShed) shed), "
            + "\(stats.quotaExceeded + stats.leasesRefused) refused by a limit, "
            + "\(stats.replyBytesKept >> 20) MiB of replies kept (\(stats.slowReadersClosed) slow readers closed), "
            + "\(stats.publishBytesUnsent >> 20) MiB unsent (\(stats.slowSubscribersClosed) slow subscribers closed), "
            + "peak memory \(residentBytes(of: daemon.process.processIdentifier, "VmHWM") >> 20) MiB"
        return Result(unloaded: unloaded, loaded: loaded, floodSent: Double(flood.sent) / total,
                      floodAccepted: Double(flood.accepted) / total, floodRefused: Double(flood.refused) / total, held: held)
    }

    /// The flooder that never reads (on the flooder's thread until `stop`): batches of 8 Lists of
    /// 2 MB each on a connection that reads nothing, again on each new connection once the
    /// daemon closes it; or a subscriber that reads nothing while `wire` writes 1 MiB values.
    /// - Returns: requests sent, accepted (replies read) and refused.
    private func neverReading(_ abuse: Abuse, wire: WireClient, port: Int, server: ZMQCurveKeyPair, keys: ZMQCurveKeyPair,
                              stop: borrowing Atomic<Bool>) -> (sent: Int, accepted: Int, refused: Int) {
        guard let context = try? ZMQContext() else { return (0, 0, 0) }
        var sent = 0, accepted = 0, refused = 0
        if abuse == .unreadReplies {
            let list = Beacon_V1_Request.with { $0.list = .with { $0.prefix = "flood.big." } }
            let batch = (try? Beacon_V1_Request.with { $0.batch = .with { $0.requests = Array(repeating: list, count: 8) } }
                .serializedBytes() as [UInt8]) ?? []
            while !stop.load(ordering: .relaxed) {
                // A connection whose libzmq takes in one reply and then reads nothing more.
                guard let dealer = try? ZMQSocket(context, type: .dealer, linger: 0) else { break }
                try? dealer.setReceiveHighWaterMark(1)
                try? dealer.enableCurveClient(serverKey: server.publicKey, keys: keys)
                try? dealer.connect("tcp://127.0.0.1:\(port)")
                for _ in 0..<20 where (try? dealer.send(batch, flags: .dontWait)) == true { sent += 8 }
                usleep(500_000)
                dealer.close()
            }
            return (sent, accepted, refused)
        }
        guard let subscriber = try? ZMQSocket(context, type: .sub, linger: 0) else { return (0, 0, 0) }
        try? subscriber.setReceiveHighWaterMark(1)
        try? subscriber.enableCurveClient(serverKey: server.publicKey, keys: keys)
        try? subscriber.connect("tcp://127.0.0.1:\(port + 1)")
        try? subscriber.subscribe(Array("flood.".utf8))
        usleep(300_000)
        let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 1, count: 1_000_000) }
        while !stop.load(ordering: .relaxed) {
            while sent - accepted - refused < 8 {
                guard (try? wire.send(.put(.with { $0.key = "flood.v\(sent % 10)"; $0.value = value }))) != nil else { break }
                sent += 1
            }
            while let reply = try? wire.receiveReply(timeoutMilliseconds: 1) {
                if case .error = reply.result { refused += 1 } else { accepted += 1 }
            }
        }
        subscriber.close()
        return (sent, accepted, refused)
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

/// A plain tcp connection to a loopback port; -1 when none could be made.
private func openTCP(port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    if connected != 0 {
        close(fd)
        return -1
    }
    return fd
}
