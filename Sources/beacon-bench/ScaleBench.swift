import ArgumentParser
import Beacon
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// Puts `count` writes with at most `window` in flight; returns acknowledged writes per second.
func floodPuts(runtimeDirectory: String, count: Int, window: Int = 10_000, key: (Int) -> String,
               value: (Int) -> [UInt8]) throws -> Double {
    let context = try ZMQContext()
    let dealer = try ZMQSocket(context, type: .dealer)
    try dealer.setSendHighWaterMark(0)
    try dealer.setReceiveHighWaterMark(0)
    try dealer.connect(WireEndpoint.request(inRuntimeDirectory: runtimeDirectory))
    let poller = ZMQPoller()
    poller.add(dealer)
    let reply = ZMQMessage()
    let start = now()
    var sent = 0, acknowledged = 0
    while acknowledged < count {
        while sent < count && sent - acknowledged < window {
            try dealer.send(WireEncoder.putRequest(id: UInt64(sent + 1), key: key(sent), encodedValue: value(sent)))
            sent += 1
        }
        // Wait (bounded) only when no reply is there already.
        while try !dealer.receive(into: reply, flags: .dontWait) {
            guard try poller.poll(timeoutMilliseconds: 30_000) > 0 else {
                throw PeerError("no reply from beacond for 30 s after \(acknowledged) of \(count) writes")
            }
        }
        acknowledged += 1
    }
    return Double(count) / (Double(now() - start) / 1e9)
}

/// An int value, encoded (field 3 of Value, zigzag varint).
func encodedInt(_ value: Int) -> [UInt8] {
    (try? Beacon_V1_Value.with { $0.intValue = Int64(value) }.serializedBytes()) ?? []
}

/// A figure of a process's memory from `/proc/PID/status`, in bytes: `VmRSS` (all resident
/// pages), `RssAnon` (its own heap and stacks) or `RssFile` (mapped files, such as SQLite's
/// memory-mapped journal, which are page cache the kernel can reclaim).
func residentBytes(of pid: Int32, _ field: String = "VmRSS") -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }) else { return 0 }
    return (Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") ?? 0) * 1024
}

struct ScaleBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "scale",
        abstract: "Catch-up after missed changes, journal size per change, daemon start-up time and memory with many keys.")

    @Option(help: "Changes the client misses.") var missed = 1_000_000
    @Option(help: "Keys those changes go to.") var keys = 10_000
    @Option(help: "Distinct keys in the start-up and memory run.") var manyKeys = 1_000_000
    @Option(help: "Repetitions of the catch-up and start-up timings.") var runs = 3
    @Option(help: "Only one part: catch-up, or memory (start-up time and memory).") var only: String?

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        print("beacon-bench scale: release beacond, durability normal, ipc")
        print("")
        print("| figure | median [min–max] | target |")
        print("| --- | --- | --- |")
        if only == nil || only == "catch-up" { try catchUp(directory: directory + "/catchup") }
        if only == nil || only == "memory" { try startUpAndMemory(directory: directory + "/many") }
    }

    private func spread(_ values: [Double], _ show: (Double) -> String) -> String {
        "\(show(median(values))) [\(show(values.min()!))–\(show(values.max()!))]"
    }

    private func milliseconds(_ value: Double) -> String { String(format: "%.0f ms", value) }

    /// A mirroring client with a local journal stops; `missed` changes over `keys` keys go by;
    /// it starts again and is timed until its mirror shows the last of them.
    private func catchUp(directory: String) throws {
        let daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048)
        defer { daemon.stop() }
        let prefix = "bench.c."
        let keyNames = (0..<keys).map { "\(prefix)k\($0)" }
        _ = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: keys, key: { keyNames[$0] }, value: { encodedInt($0) })

        var current = Dictionary(uniqueKeysWithValues: keyNames.enumerated().map { ($1, $0) })
        var resumed: [Double] = [], fresh: [Double] = [], deltas: [Double] = [], streamed: [Double] = [], replayed: [Double] = []
        var perChange: Double = 0
        for run in 0..<runs {
            let cache = "\(directory)/client\(run).sqlite"
            // The client mirrors the prefix once (filling its local journal), then goes away.
            _ = try timeMirror(daemon, prefix: prefix, cache: cache, expected: current)
            let base = (run + 1) * 10_000_000
            let rate = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: missed, key: { keyNames[$0 % keys] },
                                     value: { encodedInt(base + $0) })
            var expected = current
            for index in max(0, missed - keys)..<missed { expected[keyNames[index % keys]] = base + index }
            current = expected
            let wire = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
            let stats = try wire.stats()
            perChange = Double(stats.journalBytes) / Double(stats.headRevision)
            if run == 0 { print("| writes committed while the client was away (\(missed) over \(keys) keys) | \(format(rate))/s | |") }
            resumed.append(try timeMirror(daemon, prefix: prefix, cache: cache, expected: expected))
            fresh.append(try timeMirror(daemon, prefix: prefix, cache: nil, expected: expected))
            // What the same catch-up costs as a delta (every missed change), for comparison.
            let since = stats.headRevision - UInt64(missed)
            let start = now()
            var through = since
            while true {
                let page = try wire.delta(prefix: prefix, since: through, limit: 50_000)
                through = page.revision
                if !page.more { break }
            }
            deltas.append(Double(now() - start) / 1e6)
            streamed.append(try timeHistory(daemon, prefix: prefix, after: since, through: stats.headRevision))
            replayed.append(try timeReplay(daemon, prefix: prefix, from: since + 1))
        }
        let met = median(resumed) < 1000
        print("| catch-up of \(missed) missed changes over \(keys) keys: client with a local journal, start → mirror at head | \(spread(resumed, milliseconds)) | < 1 s: \(met ? "**met**" : "**not met**") |")
        print("| the same for a new client (no local journal) | \(spread(fresh, milliseconds)) | |")
        let deltaRate = Double(missed) / median(deltas) * 1000
        print("| the same changes fetched as deltas (`Delta` pages of 50,000, read and decoded) | \(spread(deltas, milliseconds)) "
            + "(\(format(deltaRate))/s) | ≥ 1 M/s: \(deltaRate >= 1_000_000 ? "**met**" : "**not met**") |")
        let rate = { (milliseconds: Double) in "\(format(Double(missed) / milliseconds * 1000))/s" }
        print("| the same changes as a client's history stream (`client.history(of:from:)`), until the last arrives | "
            + "\(spread(streamed, milliseconds)) (\(rate(median(streamed)))) | |")
        print("| the same changes as `beacon replay` JSON lines (to /dev/null) | \(spread(replayed, milliseconds)) (\(rate(median(replayed)))) | |")
        print("| journal size per change (SQLite file and WAL ÷ revisions) | \(String(format: "%.0f B", perChange)) | |")
    }

    /// Time `beacon replay` (beside this binary) takes to print the changes under `prefix` from
    /// revision `from` on to /dev/null, in ms.
    private func timeReplay(_ daemon: DaemonUnderTest, prefix: String, from: UInt64) throws -> Double {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("beacon")
        process.arguments = ["replay", prefix, "--from", "\(from)", "--runtime-dir", daemon.runtimeDirectory]
        process.standardOutput = FileHandle.nullDevice
        let start = now()
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw PeerError("beacon replay exited with \(process.terminationStatus)") }
        return Double(now() - start) / 1e6
    }

    /// Time from asking a client for the history of `prefix` after `since` until the change at
    /// `head` arrives, in ms; every change between is counted.
    private func timeHistory(_ daemon: DaemonUnderTest, prefix: String, after since: UInt64, through head: UInt64) throws -> Double {
        var configuration = BeaconConfiguration(runtimeDirectory: daemon.runtimeDirectory)
        configuration.requestTimeout = .seconds(30)
        let client = try BeaconClient(configuration: configuration)
        defer { client.close() }
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<(Double, Int), any Error> = .failure(PeerError("no history"))
        let start = now()
        Task {
            do {
                var count = 0
                for try await event in client.history(of: prefix, from: since + 1) {
                    guard case .change(let change) = event else { throw PeerError("the history resynced instead of streaming") }
                    count += 1
                    if change.revision >= head { break }
                }
                result = .success((Double(now() - start) / 1e6, count))
            } catch {
                result = .failure(error)
            }
            done.signal()
        }
        done.wait()
        let (milliseconds, count) = try result.get()
        guard count == Int(head - since) else { throw PeerError("the history streamed \(count) changes, not \(head - since)") }
        return milliseconds
    }

    /// Time from creating a client to its mirror of `prefix` equal to `expected`, in ms.
    private func timeMirror(_ daemon: DaemonUnderTest, prefix: String, cache: String?, expected: [String: Int]) throws -> Double {
        let queue = DispatchQueue(label: "bench-mirror")
        var configuration = BeaconConfiguration(runtimeDirectory: daemon.runtimeDirectory)
        configuration.delivery = .queue(queue)
        configuration.localJournalPath = cache
        configuration.requestTimeout = .seconds(30)
        let start = now()
        let client = try BeaconClient(configuration: configuration)
        defer { client.close() }
        nonisolated(unsafe) let map = try queue.sync { try client.mirror(prefix: prefix, as: Int.self) }
        let deadline = start + 30_000_000_000
        while now() < deadline {
            if queue.sync(execute: { map.peek().count == expected.count && map.peek() == expected }) { return Double(now() - start) / 1e6 }
            usleep(1_000)
        }
        let (count, differing) = queue.sync { () -> (Int, [String]) in
            let state = map.peek()
            return (state.count, expected.keys.filter { state[$0] != expected[$0] }.sorted().prefix(3).map { "\($0)=\(state[$0].map(String.init) ?? "nil") not \(expected[$0]!)" })
        }
        throw PeerError("the mirror never reached the head: \(count) keys of \(expected.count), \(differing), statistics \(client.statistics)")
    }

    /// Start-up time and resident memory of a daemon whose journal holds `manyKeys` keys. The
    /// memory per key is the slope between half and all of them, so that bounded costs (SQLite's
    /// page cache, the libraries) do not count.
    private func startUpAndMemory(directory: String) throws {
        let value = [UInt8](repeating: 0x61, count: 64)
        let encodedValue = try Beacon_V1_Value.with { $0.bytesValue = Data(value) }.serializedBytes() as [UInt8]
        let keyName = { (index: Int) in "bench.many.\(index)" }
        let half = manyKeys / 2
        var daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048)
        _ = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: half, key: keyName, value: { _ in encodedValue })
        daemon.stop()

        /// Restarts the daemon `runs` times: start-up times (ms) and resident bytes once loaded.
        func restarts(lastKey: String) throws -> (startUps: [Double], resident: [Double], anonymous: [Double]) {
            var startUps: [Double] = [], resident: [Double] = [], anonymous: [Double] = []
            for _ in 0..<runs {
                let start = now()
                daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048)
                startUps.append(Double(now() - start) / 1e6)
                _ = try WireClient(runtimeDirectory: daemon.runtimeDirectory).get(lastKey)
                resident.append(Double(residentBytes(of: daemon.process.processIdentifier)))
                anonymous.append(Double(residentBytes(of: daemon.process.processIdentifier, "RssAnon")))
                daemon.stop()
            }
            return (startUps, resident, anonymous)
        }
        let atHalf = try restarts(lastKey: keyName(half - 1))
        daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048)
        _ = try floodPuts(runtimeDirectory: daemon.runtimeDirectory, count: manyKeys - half, key: { keyName(half + $0) },
                          value: { _ in encodedValue })
        daemon.stop()
        let atAll = try restarts(lastKey: keyName(manyKeys - 1))

        let keyBytes = Double((0..<manyKeys).reduce(0) { $0 + keyName($1).utf8.count }) / Double(manyKeys)
        let perKey = (median(atAll.resident) - median(atHalf.resident)) / Double(manyKeys - half)
        let overhead = perKey - Double(encodedValue.count)
        let anonymousPerKey = (median(atAll.anonymous) - median(atHalf.anonymous)) / Double(manyKeys - half)
        let anonymousOverhead = anonymousPerKey - Double(encodedValue.count)
        print("| daemon start-up with \(manyKeys) keys in the journal (process start → first answer) | \(spread(atAll.startUps, milliseconds)) | |")
        print("| the same with \(half) keys | \(spread(atHalf.startUps, milliseconds)) | |")
        print("| daemon resident memory with \(half) → \(manyKeys) keys | \(String(format: "%.0f MB → %.0f MB", median(atHalf.resident) / 1e6, median(atAll.resident) / 1e6)) | |")
        print("| of which the daemon's own (anonymous) memory | \(String(format: "%.0f MB → %.0f MB", median(atHalf.anonymous) / 1e6, median(atAll.anonymous) / 1e6)) | |")
        print("| resident memory per key beyond its \(encodedValue.count)-byte encoded value (the slope; its \(String(format: "%.0f", keyBytes))-byte key included; mapped journal pages included) | \(String(format: "%.0f B", overhead)) | |")
        print("| the daemon's own memory per key beyond the value (the slope of RssAnon; mapped journal pages excluded) | \(String(format: "%.0f B", anonymousOverhead)) | < 200 B: \(anonymousOverhead < 200 ? "**met**" : "**not met**") |")
    }
}
