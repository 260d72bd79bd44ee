import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation

extension Beacon {
    struct Bench: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Load the running daemon like redis-benchmark: pipelined write throughput and write latency percentiles.",
            discussion: """
                Writes under --prefix (default bench.) to the daemon found like every other command: \
                first --writes puts with --window in flight (throughput), then --samples puts one at \
                a time (latency from request to reply, which includes the journal commit). The keys \
                stay in the journal; delete them or use a scratch daemon.
                """)
        @OptionGroup var connection: Connection
        @Option(name: .long, help: ArgumentHelp("Puts in the throughput run.", valueName: "n")) var writes = 100_000
        @Option(name: .long, help: ArgumentHelp("Puts in flight during the throughput run.", valueName: "n")) var window = 1000
        @Option(name: .long, help: ArgumentHelp("Puts timed one at a time.", valueName: "n")) var samples = 2000
        @Option(name: .long, help: ArgumentHelp("Distinct keys written.", valueName: "n")) var keys = 1000
        @Option(name: .long, help: ArgumentHelp("Bytes per value (a bytes value).", valueName: "n")) var valueSize = 64
        @Option(name: .long, help: ArgumentHelp("Prefix of the keys written.", valueName: "prefix")) var prefix = "bench."

        func validate() throws {
            guard writes >= 0, samples >= 0, window >= 1, keys >= 1, (0...1 << 20).contains(valueSize) else {
                throw ValidationError("--writes and --samples must be >= 0, --window and --keys >= 1, --value-size 0...1048576")
            }
        }

        func run() throws {
            let client = try connection.client()
            let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 0x61, count: valueSize) }
            let names = (0..<keys).map { "\(prefix)\($0)" }

            // Throughput: keep `window` puts in flight.
            var outstanding = 0, refused = 0
            func receive() throws {
                let reply: Beacon_V1_Reply?
                do { reply = try client.receiveReply(timeoutMilliseconds: connection.timeout) } catch { throw connection.failure(error) }
                guard let reply else { throw CommandFailure("beacon: no reply from the daemon within \(connection.timeout) ms", code: ExitCode32.unavailable) }
                if case .error = reply.result { refused += 1 }
                outstanding -= 1
            }
            var progress = ProgressLine()
            let start = DispatchTime.now().uptimeNanoseconds
            for i in 0..<writes {
                do { try client.send(.put(.with { $0.key = names[i % keys]; $0.value = value })) } catch { throw connection.failure(error) }
                outstanding += 1
                while outstanding >= window { try receive() }
                progress.show("beacon bench: pipelined puts \(i + 1) of \(writes)")
            }
            while outstanding > 0 { try receive() }
            let seconds = Double(DispatchTime.now().uptimeNanoseconds - start) / 1e9
            let rate = writes > 0 ? Double(writes) / seconds : 0

            // Latency: one put at a time.
            var latencies: [Double] = []
            latencies.reserveCapacity(samples)
            for i in 0..<samples {
                let begin = DispatchTime.now().uptimeNanoseconds
                _ = try connection.run { (client) throws(WireError) in
                    try client.put(names[i % keys], value, timeoutMilliseconds: connection.timeout)
                }
                latencies.append(Double(DispatchTime.now().uptimeNanoseconds - begin) / 1000)
                progress.show("beacon bench: timed puts \(i + 1) of \(samples)")
            }
            progress.clear()
            latencies.sort()
            func percentile(_ p: Double) -> Double {
                latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]
            }
            let object: [String: Any] = [
                "writes": writes, "window": window, "value_size": valueSize, "refused": refused,
                "writes_per_second": rate.rounded(), "seconds": seconds,
                "samples": samples, "p50_us": percentile(0.5), "p90_us": percentile(0.9), "p99_us": percentile(0.99),
                "p999_us": percentile(0.999), "max_us": latencies.last ?? 0,
            ]
            let text = """
                \(writes) puts of \(valueSize)-byte values over \(keys) keys, \(window) in flight: \
                \(Int(rate.rounded())) writes/s (\(String(format: "%.2f", seconds)) s)\(refused > 0 ? ", \(refused) refused" : "")
                \(samples) puts one at a time, request → reply (journal commit included):
                  p50 \(String(format: "%.1f", percentile(0.5))) µs   p90 \(String(format: "%.1f", percentile(0.9))) µs   \
                p99 \(String(format: "%.1f", percentile(0.99))) µs   p99.9 \(String(format: "%.1f", percentile(0.999))) µs   \
                max \(String(format: "%.1f", latencies.last ?? 0)) µs
                """
            try connection.print(object, text: text)
        }
    }
}
