import ArgumentParser
import BeaconJournal
import BeaconLocking
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// Relays: the latency each hop adds, beside one raw libzmq tcp hop and one journal commit
/// measured in the same run, and fan-out through two relays against every subscriber on the
/// primary.
struct RelayBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relay", abstract: "Latency per relay hop vs a raw libzmq tcp hop plus a commit; fan-out through relays vs direct.")

    @Option(help: "Latency samples per run.") var samples = 2_000
    @Option(help: "Writes in each fan-out run.") var writes = 50_000
    @Option(help: "Subscribers in the fan-out runs.") var subscribers = 8
    @Option(help: "Repetitions; medians are printed.") var runs = 3
    @Option(help: "beacond --loop-cpu for every daemon (auto puts all three loops on one CPU here).") var loopCpu = "auto"

    func run() throws {
        print("beacon-bench relay: a primary and two relays in a chain (primary → near → far) over tcp on loopback "
            + "(no CURVE), durability normal; \(samples) latency samples, \(writes) writes × \(subscribers) subscribers, \(runs) runs")
        var hop: [[Double]] = [[], [], []]
        var remote: [[Double]] = [[], []]  // subscribers of the primary and of the near relay across tcp
        var raw: [Double] = []
        var rawIPC: [Double] = []
        var commit: [Double] = []
        var direct: [Double] = [], relayed: [Double] = []
        var directCPU: [Double] = [], relayedCPU: [Double] = []
        for run in 1...runs {
            let directory = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let chain = try RelayChain(directory: directory, extraArguments: ["--loop-cpu", loopCpu])
            let latencies = try chain.writeToDiffLatencies(samples: samples)
            for index in 0..<3 { hop[index].append(median(latencies[index])) }
            for index in 0..<2 { remote[index].append(median(latencies[3 + index])) }
            chain.stop()
            raw.append(median(try RawZMQ.oneWayLatencies(samples: samples, endpoint: "tcp://127.0.0.1:\(RelayChain.port(directory) + 10)")))
            rawIPC.append(median(try RawZMQ.oneWayLatencies(samples: samples, directory: directory)))
            commit.append(median(try Self.commitLatencies(samples: samples, directory: directory)))

            let fan = try RelayChain(directory: directory + "/fan", relays: 2, sideBySide: true, extraArguments: ["--loop-cpu", loopCpu])
            let (directRate, directSeconds) = try fan.fanOut(writes: writes, subscribers: subscribers, throughRelays: false)
            let (relayedRate, relayedSeconds) = try fan.fanOut(writes: writes, subscribers: subscribers, throughRelays: true)
            fan.stop()
            direct.append(directRate)
            relayed.append(relayedRate)
            directCPU.append(directSeconds)
            relayedCPU.append(relayedSeconds)
            print(String(format: "  run %d: write→diff p50 %.0f / %.0f / %.0f µs (primary / near / far, ipc), %.0f / %.0f µs (primary / near, tcp); "
                + "raw tcp hop %.0f µs, raw ipc hop %.0f µs, commit %.0f µs; fan-out %@/s direct, %@/s through relays", run, hop[0].last!,
                hop[1].last!, hop[2].last!, remote[0].last!, remote[1].last!, raw.last!, rawIPC.last!, commit.last!,
                format(directRate), format(relayedRate)))
        }
        let added = median(hop[1]) - median(hop[0]), addedSecond = median(hop[2]) - median(hop[1])
        print("")
        print("| figure (median of \(runs) runs) | value |")
        print("| --- | --- |")
        print(String(format: "| write → diff at a subscriber of the primary, p50 | %.0f µs |", median(hop[0])))
        print(String(format: "| … of the near relay (one hop), p50 | %.0f µs (+%.0f µs) |", median(hop[1]), added))
        print(String(format: "| … of the far relay (two hops), p50 | %.0f µs (+%.0f µs) |", median(hop[2]), addedSecond))
        print(String(format: "| write → diff at a process across the link subscribed to the primary itself (tcp), p50 | %.0f µs |", median(remote[0])))
        print(String(format: "| … to the near relay itself (tcp), p50 | %.0f µs |", median(remote[1])))
        print(String(format: "| what a local relay adds for that process: near (ipc) − primary (tcp), p50 | %+.0f µs |", median(hop[1]) - median(remote[0])))
        print(String(format: "| … the second hop: far (ipc) − near (tcp), p50 | %+.0f µs |", median(hop[2]) - median(remote[1])))
        print(String(format: "| raw libzmq tcp hop (one way) + one journal commit, p50 | %.0f + %.0f = %.0f µs |",
                     median(raw), median(commit), median(raw) + median(commit)))
        print(String(format: "| … + the relay's own publication to its subscriber (a raw ipc hop), p50 | %.0f + %.0f + %.0f = %.0f µs |",
                     median(raw), median(commit), median(rawIPC), median(raw) + median(commit) + median(rawIPC)))
        print("| delivered to each of \(subscribers) subscribers, all on the primary (tcp) | \(format(median(direct)))/s |")
        print("| … half on each of two relays (ipc), the relays on the primary (tcp) | \(format(median(relayed)))/s |")
        print(String(format: "| the primary's CPU for %d writes: direct / through relays | %.2f s / %.2f s |", writes, median(directCPU), median(relayedCPU)))
    }

    /// One journal commit of one 64-byte change, in µs.
    static func commitLatencies(samples: Int, directory: String) throws -> [Double] {
        let journal = try Journal(path: directory + "/commit.sqlite")
        defer { journal.close() }
        let value = [UInt8](repeating: 0x61, count: 64)
        var latencies: [Double] = []
        for revision in 1...UInt64(samples + 200) {
            let change = JournalChange(revision: revision, kind: .put, key: "bench.k\(revision % 100)", value: value,
                                       version: revision, createRevision: 1, timestampMilliseconds: 0)
            let start = now()
            try journal.append([change])
            if revision > 200 { latencies.append(Double(now() - start) / 1000) }
        }
        return latencies
    }
}

/// A primary and relays as `beacond` child processes, on tcp ports of their own.
final class RelayChain {
    let daemons: [DaemonUnderTest]
    let ports: [Int]

    static func port(_ directory: String) -> Int { 20_000 + Int(UInt32(truncatingIfNeeded: directory.hashValue) % 20_000) & ~15 }

    /// With `sideBySide`, every relay follows the primary; else each follows the one before it.
    init(directory: String, relays: Int = 2, sideBySide: Bool = false, extraArguments: [String] = []) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let base = Self.port(directory)
        var daemons: [DaemonUnderTest] = []
        var ports: [Int] = []
        for index in 0...relays {
            let port = base + 2 * index
            var arguments = ["--request-endpoint", "tcp://127.0.0.1:\(port)", "--publish-endpoint", "tcp://127.0.0.1:\(port + 1)", "--tcp-insecure"] + extraArguments
            if index > 0 {
                let upstream = sideBySide ? base : ports[index - 1]
                arguments += ["--upstream", "tcp://127.0.0.1:\(upstream)"]
            }
            daemons.append(try DaemonUnderTest(directory: directory + "/d\(index)", durability: "normal", maxBatch: 2048, extraArguments: arguments))
            ports.append(port)
        }
        self.daemons = daemons
        self.ports = ports
        // Every relay in step with the primary before anything is measured.
        let primary = try WireClient(runtimeDirectory: daemons[0].runtimeDirectory)
        _ = try primary.put("bench.ready", .with { $0.boolValue = true })
        let head = try primary.ping().headRevision
        for daemon in daemons.dropFirst() {
            let client = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
            while (try? client.ping(timeoutMilliseconds: 1000).headRevision) ?? 0 < head { usleep(10_000) }
        }
    }

    func stop() { for daemon in daemons.reversed() { daemon.stop() } }

    /// Per daemon, the time from sending a put to the primary until its diff reaches a
    /// subscriber of that daemon on ipc (the first `daemons.count` lists), then on tcp — a process
    /// across the link subscribing to it directly — for each but the last, in µs; one write at a
    /// time.
    func writeToDiffLatencies(samples: Int) throws -> [[Double]] {
        let context = try ZMQContext()
        let endpoints = daemons.map { WireEndpoint.publish(inRuntimeDirectory: $0.runtimeDirectory) }
            + ports.dropLast().map { "tcp://127.0.0.1:\($0 + 1)" }
        let subscribers = try endpoints.map { endpoint in
            let socket = try ZMQSocket(context, type: .sub)
            try socket.connect(endpoint)
            try socket.subscribe(Array("lat.".utf8))
            return socket
        }
        let dealer = try ZMQSocket(context, type: .dealer)
        try dealer.connect(WireEndpoint.request(inRuntimeDirectory: daemons[0].runtimeDirectory))
        let value = try Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 0x61, count: 48) }.serializedBytes() as [UInt8]
        usleep(300_000)  // the subscriptions reach every daemon
        var latencies = Array(repeating: [Double](), count: subscribers.count)
        let poller = ZMQPoller()
        for socket in subscribers { poller.add(socket) }
        for sample in 0..<(samples + 100) {
            let start = now()
            _ = try dealer.send(WireEncoder.putRequest(id: UInt64(sample + 1), key: "lat.k", encodedValue: value))
            var arrived = Array(repeating: UInt64(0), count: subscribers.count)
            let deadline = start + 5_000_000_000
            while arrived.contains(0) && now() < deadline {
                _ = try poller.poll(timeoutMilliseconds: 100)
                for (index, socket) in subscribers.enumerated() where arrived[index] == 0 {
                    if try socket.receiveMessage(flags: .dontWait) != nil { arrived[index] = now() }
                }
            }
            _ = try dealer.receiveMessage()  // the reply: one write in flight at a time
            guard sample >= 100, !arrived.contains(0) else { continue }
            for index in arrived.indices { latencies[index].append(Double(arrived[index] - start) / 1000) }
        }
        return latencies
    }

    /// Delivered writes per second to each subscriber: all of them on the primary's tcp publish
    /// endpoint, or (`throughRelays`) split over the relays' ipc endpoints. Also the primary's CPU
    /// seconds meanwhile.
    func fanOut(writes: Int, subscribers count: Int, throughRelays: Bool) throws -> (rate: Double, primaryCPU: Double) {
        let topic = "fan\(throughRelays ? "r" : "d")."
        let batches = max(writes / 64, 1), total = batches * 64
        let ready = Atomic<Int>(0), done = DispatchGroup()
        let finished = Locked<[UInt64]>([])
        for index in 0..<count {
            let endpoint = throughRelays
                ? WireEndpoint.publish(inRuntimeDirectory: daemons[1 + index % (daemons.count - 1)].runtimeDirectory)
                : "tcp://127.0.0.1:\(ports[0] + 1)"
            done.enter()
            Thread.detachNewThread {
                defer { done.leave() }
                guard let context = try? ZMQContext(), let socket = try? ZMQSocket(context, type: .sub) else { return }
                try? socket.setReceiveHighWaterMark(0)
                try? socket.connect(endpoint)
                try? socket.subscribe(Array(topic.utf8))
                ready.wrappingAdd(1, ordering: .relaxed)
                let frame = ZMQMessage()
                var received = 0
                while received < total {
                    guard (try? socket.receive(into: frame)) == true else { return }
                    if !frame.hasMore { received += 1 }
                }
                let at = now()
                finished.withLock { $0.append(at) }
                socket.close()
            }
        }
        while ready.load(ordering: .relaxed) < count { usleep(1000) }
        usleep(500_000)  // the subscriptions reach the daemons, and the relays' their upstream's
        let cpuBefore = daemons[0].cpuSecondsByThread().values.reduce(0) { $0 + $1.seconds }
        let dealer = try ZMQSocket(try ZMQContext(), type: .dealer)
        try dealer.connect(WireEndpoint.request(inRuntimeDirectory: daemons[0].runtimeDirectory))
        let value = try Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 0x61, count: 48) }.serializedBytes() as [UInt8]
        let start = now()
        var sent = 0, answered = 0, id: UInt64 = 0
        while answered < batches {
            while sent < total && sent - answered * 64 < 64 * 64 {
                id += 1
                let requests = (0..<64).map { offset in
                    WireEncoder.putRequest(id: 0, key: "\(topic)k\((sent + offset) % 1000)", encodedValue: value)
                }
                _ = try dealer.send(WireEncoder.batchRequest(id: id, requests: requests))
                sent += 64
            }
            _ = try dealer.receiveMessage()
            answered += 1
        }
        done.wait()
        let last = finished.withLock { $0.max() ?? now() }
        let cpu = daemons[0].cpuSecondsByThread().values.reduce(0) { $0 + $1.seconds } - cpuBefore
        return (Double(total) / (Double(last - start) / 1e9), cpu)
    }
}
