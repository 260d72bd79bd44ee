import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// No reply reveals what a crash can take back (PROTOCOL.md §4.1): a refusal decided against
/// writes still being journaled is released only once they are durable, so kill -9 the moment
/// it arrives leaves the state it described, and no revision it named is given out again.
@Suite(.timeLimit(.minutes(3)), .serialized, .offThePool)
struct DurableRepliesTests {
    @Test func aRefusalSurvivesKillNineTheMomentItArrives() throws {
        let dir = try temporaryDirectory()
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop(signal: SIGKILL) }
        let trials = 24
        for trial in 0..<trials {
            let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            // Odd trials ask on a second connection, even ones on the writer's own.
            let asker = trial % 2 == 0 ? writer : try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            for i in 0..<200 {
                try writer.send(.put(.with { $0.key = "t\(trial).k\(i)"; $0.value = .with { $0.intValue = Int64(i) } }))
            }
            let probe = try asker.send(.put(.with { $0.key = "t\(trial).k0"; $0.value = .with { $0.intValue = -1 }; $0.createOnly = true }))
            var answer: Beacon_V1_Reply?
            while answer == nil, let reply = try asker.receiveReply(timeoutMilliseconds: expectedReplyWait) {
                if reply.id == probe { answer = reply }
            }
            daemon.stop(signal: SIGKILL)
            let reply = try #require(answer, "trial \(trial): no answer to the create-only put")

            daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
            let reader = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            let head = try reader.ping().headRevision
            switch reply.result {
            case .error(let error):
                // Told the key exists: it must exist after the crash, at the version named.
                #expect(error.code == .alreadyExists, "trial \(trial): \(error)")
                let kv = try? reader.get("t\(trial).k0")
                #expect(kv != nil, "trial \(trial): told ALREADY_EXISTS for a key that was not durable")
                #expect(kv.map { $0.version >= error.currentVersion } ?? false)
                #expect(error.headRevision <= head, "trial \(trial): the refusal named revision \(error.headRevision), head after restart \(head)")
            case .write(let write):
                // The second connection's put came first: then it is the acknowledged write.
                #expect(write.revision <= head)
            default:
                Issue.record("trial \(trial): unexpected reply \(reply)")
            }
        }
    }
}
