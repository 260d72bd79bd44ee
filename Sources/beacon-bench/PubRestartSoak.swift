import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation

/// `beacon pub` of a file while its daemon is stopped (SIGTERM) or killed (-9) and started again,
/// or replaced by one with a new journal, or — through a relay — while the relay's upstream is
/// killed (also while frozen with a window of large writes forwarded to it) and started again, at
/// a random point: every trial checks that each line was applied once and in order (or, with a
/// new journal, that pub stopped and sent nothing to it), and counts holes, duplicates and lines
/// out of order.
struct PubRestartSoak: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pub-restarts",
        abstract: "beacon pub under daemon stops, kill -9, replaced journals and a relay's lost upstream: holes, duplicates and order, per trial.")

    @Option(help: "Trials, taking the five faults in turn.") var trials = 25
    @Option(help: "Lines per trial.") var lines = 20_000

    enum Fault: String, CaseIterable {
        case stop = "SIGTERM, restart"
        case kill = "kill -9, restart"
        case replace = "SIGTERM, new journal"
        case upstreamKill = "through a relay: its upstream kill -9, restart"
        case upstreamFrozenKill = "through a relay: its upstream frozen, kill -9, restart"

        var throughRelay: Bool { self == .upstreamKill || self == .upstreamFrozenKill }
    }

    struct Tally {
        var trials = 0, clean = 0, holes = 0, duplicates = 0, outOfOrder = 0, inNewJournal = 0, exitCodes: [Int32: Int] = [:]
    }

    func run() throws {
        print("beacon-bench pub-restarts: \(trials) trials of `beacon pub` of \(lines) lines, a fault at a random point")
        var tallies: [Fault: Tally] = [:]
        for trial in 0..<trials {
            let fault = Fault.allCases[trial % Fault.allCases.count]
            let result = try runTrial(fault)
            tallies[fault, default: Tally()].add(result)
        }
        print("| fault | trials | pub's exit codes | holes | duplicates | out of order | lines in a new journal | trials without any |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for fault in Fault.allCases {
            guard let tally = tallies[fault] else { continue }
            let codes = tally.exitCodes.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", ")
            print("| \(fault.rawValue) | \(tally.trials) | \(codes) | \(tally.holes) | \(tally.duplicates) | \(tally.outOfOrder) | \(tally.inNewJournal) | \(tally.clean) |")
        }
        let failed = tallies.values.contains { $0.clean < $0.trials }
        if failed { throw ExitCode(1) }
    }

    struct TrialResult {
        var exitCode: Int32
        var holes = 0
        var duplicates = 0
        var outOfOrder = 0
        var inNewJournal = 0
        var clean: Bool { holes + duplicates + outOfOrder + inNewJournal == 0 }
    }

    private func runTrial(_ fault: Fault) throws -> TrialResult {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let input = directory + "/lines.txt"
        // Frozen, the upstream reads nothing: values of 1,000 bytes make a window of writes more
        // than the kernel's socket buffers hold, so that some wait in the relay's queue.
        let value = { (line: Int) in fault == .upstreamFrozenKill ? String(repeating: "v", count: 1_000) : "\(line)" }
        try (1...lines).map { "su.n\($0) \(value($0))\n" }.joined().write(toFile: input, atomically: true, encoding: .utf8)
        let primaryDirectory = fault.throughRelay ? directory + "/primary" : directory
        try FileManager.default.createDirectory(atPath: primaryDirectory, withIntermediateDirectories: true)
        var daemon = try DaemonUnderTest(directory: primaryDirectory, durability: "normal", maxBatch: 2048)
        var relay: DaemonUnderTest?
        if fault.throughRelay {
            relay = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048,
                                        extraArguments: ["--upstream", "ipc://\(daemon.runtimeDirectory)/beacon.req"])
            let relayWire = try WireClient(runtimeDirectory: directory + "/run", requestTimeoutMilliseconds: 30_000)
            while (try? relayWire.ping().upstream.reachable) != true { usleep(10_000) }
        }
        defer { relay?.stop() }
        let pub = Process()
        pub.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("beacon")
        pub.arguments = ["pub", "--json", "--timeout", "30000", "--runtime-dir", (relay ?? daemon).runtimeDirectory]
        let out = Pipe()
        pub.standardOutput = out
        pub.standardError = FileHandle.nullDevice
        pub.standardInput = FileHandle(forReadingAtPath: input)
        try pub.run()

        let faultAt = UInt64.random(in: 1_000...UInt64(lines * 3 / 4))
        let wire = try WireClient(runtimeDirectory: daemon.runtimeDirectory, requestTimeoutMilliseconds: 30_000)
        while pub.isRunning, ((try? wire.ping().headRevision) ?? 0) < faultAt { usleep(1000) }
        if fault == .upstreamFrozenKill, let relay {
            kill(daemon.process.processIdentifier, SIGSTOP)
            let relayWire = try WireClient(runtimeDirectory: relay.runtimeDirectory, requestTimeoutMilliseconds: 30_000)
            // pub keeps 1,000 writes in flight: wait until the relay forwarded most of a window.
            while pub.isRunning, let stats = try? relayWire.stats(), stats.writesForwarded < stats.headRevision + 900 { usleep(1000) }
        }
        if fault == .kill || fault.throughRelay {
            kill(daemon.process.processIdentifier, SIGKILL)
            daemon.process.waitUntilExit()
        } else {
            daemon.stop()
        }
        if fault == .replace { try FileManager.default.moveItem(atPath: directory + "/state", toPath: directory + "/old-state") }
        usleep(useconds_t.random(in: 0...1_500_000))
        daemon = try DaemonUnderTest(directory: primaryDirectory, durability: "normal", maxBatch: 2048)
        defer { daemon.stop() }
        let output = out.fileHandleForReading.readDataToEndOfFile()
        pub.waitUntilExit()
        let summary = (try? JSONSerialization.jsonObject(with: output) as? [String: Any]) ?? [:]

        var result = TrialResult(exitCode: pub.terminationStatus)
        let keys = try journalKeys(daemon.runtimeDirectory)
        if fault == .replace {
            // Nothing reaches the new journal; the old one holds a gapless prefix up to at
            // least the line pub says to resume from.
            result.inNewJournal = keys.count
            daemon.stop()
            try FileManager.default.removeItem(atPath: directory + "/state")
            try FileManager.default.moveItem(atPath: directory + "/old-state", toPath: directory + "/state")
            daemon = try DaemonUnderTest(directory: directory, durability: "normal", maxBatch: 2048)
            let old = try journalKeys(daemon.runtimeDirectory)
            let resumeFrom = summary["resume_from"] as? Int ?? 1
            result.count(old, expectedLines: max(old.count, resumeFrom - 1))
        } else {
            result.count(keys, expectedLines: lines)
        }
        return result
    }

    /// The keys of the journal's changes under `su.`, in revision order.
    private func journalKeys(_ runtimeDirectory: String) throws -> [String] {
        try WireClient(runtimeDirectory: runtimeDirectory, requestTimeoutMilliseconds: 30_000).wholeHistory("su.").map(\.change.key)
    }
}

extension PubRestartSoak.TrialResult {
    /// Compares the journal's keys with lines 1 through `expectedLines`, once each and in order.
    mutating func count(_ keys: [String], expectedLines: Int) {
        let lineNumbers = keys.compactMap { Int($0.dropFirst("su.n".count)) }
        let seen = Dictionary(lineNumbers.map { ($0, 1) }, uniquingKeysWith: +)
        duplicates += seen.values.reduce(0) { $0 + $1 - 1 }
        holes += expectedLines < 1 ? 0 : (1...expectedLines).count { seen[$0] == nil }
        outOfOrder += zip(lineNumbers, lineNumbers.dropFirst()).count { $0 >= $1 }
    }
}

extension PubRestartSoak.Tally {
    mutating func add(_ result: PubRestartSoak.TrialResult) {
        trials += 1
        holes += result.holes
        duplicates += result.duplicates
        outOfOrder += result.outOfOrder
        inNewJournal += result.inNewJournal
        exitCodes[result.exitCode, default: 0] += 1
        if result.clean { clean += 1 }
    }
}
