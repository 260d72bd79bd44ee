import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// How long the daemon stops answering while it compacts a large journal.
struct CompactionBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "compaction",
        abstract: "Request round trips to beacond while it compacts a journal of --changes changes, against the same round trips at rest.")

    @Option(help: "Changes written before compacting (64-byte values, pipelined in Batch requests).") var changes = 2_000_000
    @Option(help: "Distinct keys written.") var keys = 10_000
    @Option(help: "Revisions kept above the compaction point.") var keep = 10_000
    @Option(help: "Round trips measured at rest.") var samples = 2_000

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("beacon-bench compaction: \(changes) changes over \(keys) keys, compacted through head − \(keep), ipc")
        // No count limit: only the explicit Compact request compacts.
        let daemon = try DaemonUnderTest(directory: directory + "/d", durability: "normal", maxBatch: 2048,
                                         extraArguments: ["--retention-revisions", "0"])
        defer { daemon.stop() }
        let fillStart = now()
        try fill(daemon)
        print("  filled at " + format(Double(changes) / (Double(now() - fillStart) / 1e9)) + " writes/s")

        let probe = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        var atRest: [Double] = []
        for _ in 0..<samples {
            let start = now()
            _ = try probe.ping()
            atRest.append(Double(now() - start) / 1000)
        }
        let admin = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        let target = try probe.ping().headRevision - UInt64(keep)
        let started = now()
        _ = try admin.send(.compact(.with { $0.revision = target }))
        var during: [Double] = []
        var reply: Beacon_V1_Reply?
        while reply == nil {
            let start = now()
            _ = try probe.ping(timeoutMilliseconds: 600_000)
            during.append(Double(now() - start) / 1000)
            reply = try admin.receiveReply(timeoutMilliseconds: 0)
        }
        let seconds = Double(now() - started) / 1e9
        guard case .compact(let compacted)? = reply?.result else { throw ValidationError("compaction refused: \(reply!)") }
        atRest.sort()
        during.sort()
        func row(_ name: String, _ values: [Double]) -> String {
            "| \(name) | \(values.count) | " + [0.5, 0.99].map { String(format: "%.0f µs", percentile(values, $0)) }.joined(separator: " | ")
                + String(format: " | %.1f ms |", values.last! / 1000)
        }
        print("")
        print(String(format: "compaction through %llu: %llu changes removed in %.2f s (%.2f µs each)",
                     target, compacted.removed, seconds, seconds / Double(max(compacted.removed, 1)) * 1e6))
        print("")
        print("| ping round trips | count | p50 | p99 | max |")
        print("| --- | ---: | ---: | ---: | ---: |")
        print(row("at rest", atRest))
        print(row("while compacting", during))
    }

    /// Writes `changes` puts, 64 per Batch request, 20,000 in flight.
    private func fill(_ daemon: DaemonUnderTest) throws {
        let context = try ZMQContext()
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.setSendHighWaterMark(0)
        try dealer.setReceiveHighWaterMark(0)
        try dealer.connect(WireEndpoint.request(inRuntimeDirectory: daemon.runtimeDirectory))
        let value = try Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 0x61, count: 64) }.serializedBytes() as [UInt8]
        let keyNames = (0..<keys).map { "bench.compact.\($0)" }
        var sent = 0, acknowledged = 0
        var requests: [[UInt8]] = []
        let reply = ZMQMessage()
        while acknowledged < changes {
            while sent < changes && sent - acknowledged < 20_000 {
                requests.append(WireEncoder.putRequest(id: UInt64(sent + 1), key: keyNames[sent % keys], encodedValue: value))
                sent += 1
                if requests.count == 64 || sent == changes {
                    try dealer.send(WireEncoder.batchRequest(id: UInt64(sent), requests: requests))
                    requests.removeAll(keepingCapacity: true)
                }
            }
            try dealer.receive(into: reply)
            guard let replies = reply.withUnsafeBytes({ FastBatch.parse($0)?.requests.count }) else {
                throw ValidationError("unexpected reply: \((try? Beacon_V1_Reply(serializedBytes: reply.bytes)).map { "\($0)" } ?? "undecodable")")
            }
            acknowledged += replies
        }
    }
}
