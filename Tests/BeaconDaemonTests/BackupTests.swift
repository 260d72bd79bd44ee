import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// `Backup` copies the journal in steps between the loop's other work: other clients are
/// served, and write, while the copy is made, and the copy holds exactly the revision it names.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct BackupTests {
    /// A journal of about 48 MiB: 48 values of 1,000,000 random bytes (which SQLite cannot
    /// share between pages).
    private func largeJournal(_ client: WireClient) throws {
        // From the kernel: building them number by number took most of a minute in a debug build
        // on a loaded machine.
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        for index in 0..<48 {
            let bytes = try #require(try random.read(upToCount: 1_000_000))
            _ = try client.put("big.k\(index)", .with { $0.bytesValue = bytes }, timeoutMilliseconds: 30_000)
        }
    }

    @Test func otherClientsAreServedAndWriteWhileACopyIsMade() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let owner = try daemon.client()
        try largeJournal(owner)
        let other = try daemon.client()
        _ = try other.ping()

        let backupID = try owner.send(.backup(.init()))
        // Until the copy's first chunk arrives, the other client writes and reads back.
        var answeredMeanwhile = 0
        var first: Beacon_V1_BackupReply?
        var written: [UInt64] = []
        while first == nil {
            let write = try other.put("w.k", .int(Int64(written.count)))
            written.append(write.revision)
            #expect(try other.get("w.k").modRevision == write.revision)
            if let reply = try owner.receiveReply(timeoutMilliseconds: 0) {
                #expect(reply.id == backupID)
                guard case .backup(let backup) = reply.result else {
                    Issue.record("the backup was refused: \(reply)")
                    break
                }
                first = backup
            } else {
                answeredMeanwhile += 1
            }
        }
        let backup = try #require(first)
        // One step on the loop takes a few milliseconds; copying 48 MiB takes many of them.
        #expect(answeredMeanwhile >= 3, "writes answered while the copy was made: \(answeredMeanwhile)")

        // Read the copy to its end and open it: it holds every revision through the one it
        // names, some of the writes made meanwhile among them, and none after.
        var data = backup.data
        var done = backup.done
        while !done {
            let next = try owner.call(.backup(.with { $0.token = backup.token; $0.offset = UInt64(data.count) })).backup
            data.append(next.data)
            done = next.done
        }
        #expect(UInt64(data.count) == backup.size)
        let directory = try temporaryDirectory()
        try data.write(to: URL(fileURLWithPath: directory + "/journal.sqlite"))
        let copy = try Journal(path: directory + "/journal.sqlite")
        #expect(copy.headRevision == backup.revision)
        #expect(copy.epoch == backup.epoch)
        #expect(backup.revision >= 48)
        let copiedWrites = try copy.changes(prefix: "w.", from: 1, to: copy.headRevision, limit: 10_000).changes.map(\.revision)
        #expect(copiedWrites == written.filter { $0 <= backup.revision })
        let daemonThen = try owner.snapshot(prefix: "", revision: backup.revision).kvs.map(\.key)
        #expect(try copy.snapshot(prefix: "", at: copy.headRevision).map(\.key) == daemonThen)
        await daemon.stop()
    }

    @Test func aDaemonStoppedWhileACopyIsMadeLeavesNoCopyBehind() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let owner = try daemon.client()
        try largeJournal(owner)
        try owner.send(.backup(.init()))
        // Stop once the copy has started (its file exists), then start again on the same journal.
        let state = daemon.configuration.stateDirectory
        func copies() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: state)) ?? []).filter { $0.hasPrefix("backup-") }
        }
        let deadline = Date().addingTimeInterval(10)
        while copies().isEmpty && Date() < deadline { try await Task.sleep(for: .milliseconds(1)) }
        await daemon.stop()
        #expect(copies().isEmpty)
        let restarted = try TestDaemon(reopening: daemon.directory)
        defer { restarted.stopNow() }
        #expect(try restarted.client().get("big.k47").version == 1)
        await restarted.stop()
    }
}
