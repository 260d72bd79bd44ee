import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// A well-behaved client's write latency alone, then while another peer floods the daemon with
/// writes: once with the flooder rate-limited, once without a limit.
struct FloodBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "flood",
        abstract: "Write latency of a well-behaved client while another peer floods, with and without a write-rate limit.")

    @Option(help: "Latency samples per phase.") var samples = 3000
    @Option(help: "writes_per_second for the limited run.") var limit: UInt32 = 2000

    func run() throws {
        guard ZMQCurveKeyPair.isSupported else { throw ValidationError("the flooder is a CURVE peer; this libzmq has no CURVE") }
        print("beacon-bench flood: \(samples) serial writes by a well-behaved ipc client; the flooder is another peer (a CURVE key on loopback tcp) pipelining writes")
        for limited in [true, false] {
            let result = try measure(limited: limited)
            let p50Ratio = result.loaded.p50 / result.unloaded.p50
            print(String(format: "  %@: unloaded p50 %.0f µs p99 %.0f µs | under flood p50 %.0f µs (%.2f×) p99 %.0f µs (%.2f×) | flooder sent %@/s, committed %@/s, refused %@/s",
                         limited ? "flooder limited to \(limit)/s" : "no limit            ",
                         result.unloaded.p50, result.unloaded.p99, result.loaded.p50, p50Ratio, result.loaded.p99,
                         result.loaded.p99 / result.unloaded.p99, format(result.floodSent), format(result.floodAccepted), format(result.floodRefused)))
            if limited {
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
    }

    private func measure(limited: Bool) throws -> Result {
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
            allow = key:\(flooderKeys.publicKey) read=flood. write=flood.
            writes_per_second = \(limited ? limit : 0)
            """.write(toFile: directory + "/flood.conf", atomically: true, encoding: .utf8)
        let daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 4096,
                                         extraArguments: ["--config", directory + "/flood.conf"])
        defer { daemon.stop() }
        let client = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        let unloaded = try latencies(client)

        let stop = Atomic<Bool>(false)
        let counts = Mutex<(sent: Int, accepted: Int, refused: Int)>((0, 0, 0))
        let endpoint = "tcp://127.0.0.1:\(port)"
        let flooder = Thread {
            guard let wire = try? WireClient(requestEndpoint: endpoint, publishEndpoint: endpoint,
                                             curve: CurveCredentials(serverKey: server.publicKey, keys: flooderKeys)) else { return }
            var sent = 0, accepted = 0, refused = 0, index = 0
            while !stop.load(ordering: .relaxed) {
                while sent - accepted - refused < 1000 {
                    guard (try? wire.send(.put(.with { $0.key = "flood.k\(index % 1000)"; $0.value.intValue = Int64(index) }))) != nil else { break }
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
        while counts.withLock({ $0.sent }) == 0 && flooder.isExecuting { usleep(10_000) }
        usleep(100_000)
        let flood = counts.withLock { $0 }
        let total = seconds + 0.5
        return Result(unloaded: unloaded, loaded: loaded, floodSent: Double(flood.sent) / total,
                      floodAccepted: Double(flood.accepted) / total, floodRefused: Double(flood.refused) / total)
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
