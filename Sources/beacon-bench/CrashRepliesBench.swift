import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation

/// Hundreds of kill -9 trials of the durability rule for refusals (proto/PROTOCOL.md §4.1):
/// pipeline puts to new keys, ask a `create_only` put of the first of them (on the writer's own
/// connection or a second one), kill -9 `beacond` the moment the answer arrives, restart it,
/// and check that what the answer said survived.
struct CrashRepliesBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crash-replies",
        abstract: "kill -9 the moment a refusal decided against pipelined writes arrives; count refusals that did not survive.")

    @Option(help: "Trials (a beacond restart each).") var trials = 300
    @Option(help: "Puts pipelined before the create-only put.") var puts = 200
    @Option(help: "beacond --durability.") var durability = "normal"

    func run() throws {
        let directory = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var daemon = try DaemonUnderTest(directory: directory, durability: durability, maxBatch: 2048)
        var counts = (refused: 0, acknowledged: 0, keyLost: 0, versionLost: 0, revisionAhead: 0, unanswered: 0)
        let started = now()
        for trial in 0..<trials {
            let writer = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
            let asker = trial % 2 == 0 ? writer : try WireClient(runtimeDirectory: daemon.runtimeDirectory)
            for index in 0..<puts {
                _ = try writer.send(.put(.with { $0.key = "t\(trial).k\(index)"; $0.value.intValue = Int64(index) }))
            }
            let probe = try asker.send(.put(.with { $0.key = "t\(trial).k0"; $0.value.intValue = -1; $0.createOnly = true }))
            var answer: Beacon_V1_Reply?
            while answer == nil, let reply = try asker.receiveReply(timeoutMilliseconds: 5000) {
                if reply.id == probe { answer = reply }
            }
            kill(daemon.process.processIdentifier, SIGKILL)
            daemon.process.waitUntilExit()
            daemon = try DaemonUnderTest(directory: directory, durability: durability, maxBatch: 2048)
            guard let answer else {
                counts.unanswered += 1
                continue
            }
            let reader = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
            let head = try reader.ping().headRevision
            switch answer.result {
            case .error(let error) where error.code == .alreadyExists:
                counts.refused += 1
                if let kv = try? reader.get("t\(trial).k0") {
                    if kv.version < error.currentVersion { counts.versionLost += 1 }
                } else {
                    counts.keyLost += 1
                }
                if error.headRevision > head { counts.revisionAhead += 1 }
            case .write(let write):
                counts.acknowledged += 1
                if write.revision > head { counts.revisionAhead += 1 }
            default:
                counts.unanswered += 1
            }
        }
        daemon.stop()
        let seconds = Double(now() - started) / 1e9
        print("beacon-bench crash-replies: \(trials) trials of \(puts) pipelined puts + a create-only put, kill -9 on its answer, durability \(durability) (\(String(format: "%.0f", seconds)) s)")
        print("  answers: \(counts.refused) ALREADY_EXISTS, \(counts.acknowledged) acknowledged (the second connection's put came first), \(counts.unanswered) other or none")
        print("  after restart: key told to exist but absent \(counts.keyLost), at a lower version \(counts.versionLost), revision named above the durable head \(counts.revisionAhead)")
        let violations = counts.keyLost + counts.versionLost + counts.revisionAhead + counts.unanswered
        print("  target: no answer taken back by a crash: \(violations == 0 ? "met" : "NOT met")")
        if violations > 0 { throw ExitCode.failure }
    }
}
