import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct WriteTests {
    @Test func anAcknowledgedWriteIsJournaledAndPublishedWithItsRevision() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        try client.subscribe("net.")
        // Wait until the daemon sequences the prefix, so the diff carries its mark.
        try awaitSequencing(client, prefix: "net.")
        let first = try client.put("net.link", .string("up"))
        let second = try client.put("net.link", .string("down"))
        #expect(first.revision == 1 && first.versions == [1])
        #expect(second.revision == 2 && second.versions == [2])

        var diffs: [Beacon_V1_Diff] = []
        while diffs.count < 2, let publication = try awaitPublication(client, where: { if case .diff = $0 { true } else { false } }) {
            if case .diff(let diff) = publication { diffs.append(diff) }
        }
        #expect(diffs.map(\.event.revision) == [1, 2])
        #expect(diffs.map(\.event.change.value.stringValue) == ["up", "down"])
        #expect(diffs[1].marks.map(\.prefix) == ["net."])
        #expect(diffs[1].marks[0].previousRevision == 1)
        #expect(diffs[1].marks[0].parts == 1)
        await daemon.stop()

        let journal = try Journal(path: daemon.configuration.journalPath)
        let changes = try journal.changes(prefix: "", from: 1, to: 10, limit: 10).changes
        #expect(changes.map(\.revision) == [1, 2])
        #expect(changes.map(\.key) == ["net.link", "net.link"])
        #expect(journal.headRevision == 2)
    }

    @Test func compareAndSetCreateOnlyAndDeleteFollowVersions() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        #expect(try client.put("k", .int(1), createOnly: true).versions == [1])
        let exists = expectRejection(.alreadyExists) { _ = try client.put("k", .int(2), createOnly: true) }
        #expect(exists?.currentVersion == 1)
        let stale = expectRejection(.versionConflict) { _ = try client.put("k", .int(2), ifVersion: 7) }
        #expect(stale?.currentVersion == 1 && stale?.key == "k")
        #expect(try client.put("k", .int(2), ifVersion: 1).versions == [2])
        expectRejection(.versionConflict) { _ = try client.delete("k", ifVersion: 1) }
        #expect(try client.delete("k", ifVersion: 2).revision == 3)
        expectRejection(.notFound) { _ = try client.get("k") }
        expectRejection(.notFound) { _ = try client.delete("k") }
        // Re-created: a new life with a new create revision.
        #expect(try client.put("k", .int(3), ifVersion: 0).versions == [1])
        #expect(try client.get("k").createRevision == 4)
        await daemon.stop()
    }

    @Test func aTransactionIsOneRevisionOrNothing() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        try client.subscribe("")
        // Wait until the subscription is live and "" is sequenced: a diff published before that
        // would be missed, and the commit marker would carry no mark for "".
        try awaitSequencing(client, prefix: "")
        _ = try client.put("a", .int(0))
        let committed = try client.transaction([putOp("a", .int(1), ifVersion: 1), putOp("b", .int(2)), putOp("c", .int(3)), deleteOp("a")])
        #expect(committed.revision == 2)
        #expect(committed.versions == [2, 1, 1, 0])
        expectRejection(.notFound) { _ = try client.get("a") }
        let failed = expectRejection(.versionConflict) {
            _ = try client.transaction([putOp("b", .int(20)), putOp("c", .int(30), ifVersion: 9)])
        }
        #expect(failed?.opIndex == 1)
        #expect(try client.get("b").value.intValue == 2)
        #expect(try client.stats().headRevision == 2)

        var parts: [Beacon_V1_Event] = []
        var marker: Beacon_V1_CommitMarker?
        // Heartbeats do not count, so that a missed marker ends the wait instead of prolonging it.
        while marker == nil, let publication = try awaitPublication(client, where: { if case .heartbeat = $0 { false } else { true } }) {
            switch publication {
            case .diff(let diff) where diff.event.revision == 2: parts.append(diff.event)
            case .commit(let commit): marker = commit
            default: break
            }
        }
        #expect(parts.map(\.change.key) == ["a", "b", "c", "a"])
        #expect(parts.map(\.part) == [0, 1, 2, 3])
        #expect(parts.allSatisfy { $0.parts == 4 })
        #expect(marker?.revision == 2 && marker?.parts == 4)
        #expect(marker?.marks.first { $0.prefix == "" }?.parts == 4)
        await daemon.stop()
    }

    @Test func aRetriedWriteIDIsAnsweredWithTheFirstResult() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        let first = try client.put("k", .int(1), writeID: [9, 9, 9])
        let retry = try client.put("k", .int(1), writeID: [9, 9, 9])
        #expect(retry.revision == first.revision)
        #expect(retry.replayed && !first.replayed)
        #expect(try client.stats().headRevision == 1)
        await daemon.stop()

        // Also after a restart, from the journal.
        let restarted = try TestDaemon { $0.stateDirectory = daemon.configuration.stateDirectory }
        defer { restarted.stopNow() }
        let again = try restarted.client().put("k", .int(1), writeID: [9, 9, 9])
        #expect(again.revision == 1 && again.replayed && again.versions == [1])
        await restarted.stop()
    }

    @Test func aKeyWithATTLExpiresAsAJournaledEvent() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        _ = try client.put("session.x", .int(1), ttlMilliseconds: 2000)
        _ = try client.put("keep", .int(1))
        #expect(try client.get("session.x").expiresAtMs > 0)
        // Gone once the TTL has run out: waited for, not slept on.
        let deadline = ContinuousClock.now + .seconds(30)
        while (try? client.get("session.x")) != nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        expectRejection(.notFound) { _ = try client.get("session.x") }
        let history = try client.history("session.x", exact: true)
        #expect(history.events.map(\.change.kind) == [.put, .expire])
        #expect(history.events.map(\.revision) == [1, 3])
        await daemon.stop()
    }

    @Test func revisionsContinueAcrossARestart() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        for i in 0..<5 { _ = try client.put("k\(i)", .int(Int64(i))) }
        let epoch = try client.ping().epoch
        await daemon.stop()
        let restarted = try TestDaemon { $0.stateDirectory = daemon.configuration.stateDirectory }
        defer { restarted.stopNow() }
        let again = try restarted.client()
        #expect(try again.ping().epoch == epoch)
        #expect(try again.put("k9", .int(9)).revision == 6)
        #expect(try again.get("k3").value.intValue == 3)
        await restarted.stop()
    }

    /// A current value carries its last write's commit time (`mod_time_ms`): the event's
    /// `timestamp_ms`, the same through Get, List, snapshots at the head and below it, and a restart.
    @Test func currentValuesCarryTheirLastWritesCommitTime() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        let before = Journal.nowMilliseconds()
        _ = try client.put("t.a", .int(1))
        try await Task.sleep(for: .milliseconds(20))
        let second = try client.put("t.a", .int(2))
        _ = try client.put("t.b", .int(3))
        let after = Journal.nowMilliseconds()
        let events = try client.history("t.", from: 1).events
        let times = Dictionary(events.map { ($0.revision, $0.timestampMs) }, uniquingKeysWith: { first, _ in first })
        #expect(events.allSatisfy { $0.timestampMs >= before && $0.timestampMs <= after })
        #expect(times[second.revision]! > times[1]!)

        func expectTimes(_ client: WireClient) throws {
            #expect(try client.get("t.a").modTimeMs == times[second.revision])
            let list = try client.call(.list(.with { $0.prefix = "t." })).list
            #expect(list.kvs.map(\.modTimeMs) == [times[second.revision], times[3]])
            #expect(try client.snapshot(prefix: "t.").kvs.map(\.modTimeMs) == [times[second.revision], times[3]])
            #expect(try client.snapshot(prefix: "t.", revision: 1).kvs.map(\.modTimeMs) == [times[1]])
        }
        try expectTimes(client)
        await daemon.stop()
        let restarted = try TestDaemon { $0.stateDirectory = daemon.configuration.stateDirectory }
        defer { restarted.stopNow() }
        try expectTimes(try restarted.client())
        await restarted.stop()
    }
}

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct PipelineTests {
    @Test func pipelinedWritesThroughATinyBatchAreAllAnsweredInOrder() async throws {
        let daemon = try TestDaemon { $0.maxBatch = 4 }
        defer { daemon.stopNow() }
        let client = try daemon.client()
        let count = 2_000
        for i in 0..<count {
            try client.send(.put(.with { $0.key = "k\(i % 7)"; $0.value = .int(Int64(i)) }))
        }
        var revisions: [UInt64] = []
        while revisions.count < count, let reply = try client.receiveReply(timeoutMilliseconds: expectedReplyWait) {
            guard case .write(let write) = reply.result else { Issue.record("\(reply)"); break }
            #expect(reply.id == UInt64(revisions.count + 1))
            revisions.append(write.revision)
        }
        #expect(revisions == Array(1...UInt64(count)))
        // The last value written to k6 is the largest i < count with i % 7 == 6.
        let lastK6 = (0..<count).last { $0 % 7 == 6 }!
        #expect(try client.get("k6").value.intValue == Int64(lastK6))
        await daemon.stop()
    }
}

extension WriteTests {
    @Test func aBatchsRequestsAreHandledInOrderEachWithItsOwnRevisionAndReply() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        try client.subscribe("b.")
        try awaitSequencing(client, prefix: "b.")
        let replies = try client.batch([
            .put(.with { $0.key = "b.one"; $0.value = .int(1) }),                        // the fast path
            .put(.with { $0.key = "b.two"; $0.value = .with { $0.listValue.items = [.int(2)] } }),  // SwiftProtobuf
            .put(.with { $0.key = "b.one"; $0.value = .int(9); $0.ifVersion = 5 }),      // refused, changes nothing
            .txn(.with { $0.ops = [putOp("b.three", .int(3)), putOp("b.four", .int(4))] }),
            .delete(.with { $0.key = "b.one" }),
            .get(.with { $0.key = "b.two" }),                                              // sees the writes before it
            .ping(.init()),
        ])
        try #require(replies.count == 7)
        #expect(replies.map(\.id) == Array(replies[0].id...(replies[0].id + 6)), "each reply echoes its request's id")
        #expect(replies[0].write.revision == 1 && replies[0].write.versions == [1])
        #expect(replies[1].write.revision == 2)
        #expect(replies[2].error.code == .versionConflict && replies[2].error.currentVersion == 1)
        #expect(replies[3].write.revision == 3 && replies[3].write.versions == [1, 1])
        #expect(replies[4].write.revision == 4 && replies[4].write.versions == [0])
        #expect(replies[5].get.kv.value.listValue.items == [.int(2)] && replies[5].get.revision == 4)
        #expect(replies[6].ping.headRevision == 4)

        var revisions: [UInt64] = []
        while revisions.count < 5, let publication = try awaitPublication(client, where: { if case .diff = $0 { true } else { false } }) {
            if case .diff(let diff) = publication { revisions.append(diff.event.revision) }
        }
        #expect(revisions == [1, 2, 3, 3, 4], "each write of the batch is published with its own revision")
        #expect(try client.stats().headRevision == 4)
        await daemon.stop()

        let journal = try Journal(path: daemon.configuration.journalPath)
        #expect(try journal.changes(prefix: "", from: 1, to: 10, limit: 10).changes.map(\.revision) == [1, 2, 3, 3, 4])
    }

    @Test func pipelinedBatchesAndSingleRequestsAreAnsweredInTheOrderSent() async throws {
        let daemon = try TestDaemon { $0.maxBatch = 16 }  // batches span several group commits
        defer { daemon.stopNow() }
        let client = try daemon.client()
        var expected: [UInt64] = []  // the id of each message sent, in order
        var writes = 0
        for round in 0..<40 {
            if round % 3 == 2 {
                expected.append(try client.send(.put(.with { $0.key = "s\(round)"; $0.value = .int(Int64(round)) })))
                writes += 1
            } else {
                let requests = try (0..<(round % 2 == 0 ? 50 : 7)).map { i in
                    WireEncoder.putRequest(id: UInt64(10_000 * (round + 1) + i), key: "k\(i % 9)",
                                           encodedValue: try Beacon_V1_Value.int(Int64(i)).serializedBytes())
                }
                let id = UInt64(1_000_000 + round)
                try client.send(rawBody: WireEncoder.batchRequest(id: id, requests: requests))
                expected.append(id)
                writes += requests.count
            }
        }
        var revision: UInt64 = 0
        var received: [UInt64] = []
        while received.count < expected.count, let reply = try client.receiveReply(timeoutMilliseconds: expectedReplyWait) {
            received.append(reply.id)
            let writeReplies = if case .batch(let batch) = reply.result { batch.replies } else { [reply] }
            for write in writeReplies {
                guard case .write(let committed) = write.result else { Issue.record("\(write)"); continue }
                #expect(committed.revision == revision + 1, "revisions follow the order of the requests")
                revision = committed.revision
            }
        }
        #expect(received == expected)
        #expect(revision == UInt64(writes))
        #expect(try client.stats().writes == UInt64(writes))
        await daemon.stop()
    }
}

extension PipelineTests {
    @Test func compactionByPolicyRunsSafelyUnderPipelinedLoad() async throws {
        let daemon = try TestDaemon {
            $0.retention = .init(revisions: 500, maxAgeMilliseconds: nil)
            $0.compactionIntervalSeconds = 1
        }
        defer { daemon.stopNow() }
        let client = try daemon.client()
        let count = 30_000
        var sent = 0, answered = 0
        let started = Date()
        // Keep writes in flight for more than one compaction interval.
        while answered < count || Date().timeIntervalSince(started) < 1.5 {
            while sent < answered + 2_000 {
                try client.send(.put(.with { $0.key = "k\(sent % 50)"; $0.value = .int(Int64(sent)) }))
                sent += 1
            }
            let reply = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
            guard case .write = reply.result else { Issue.record("\(reply)"); break }
            answered += 1
        }
        while answered < sent, try client.receiveReply(timeoutMilliseconds: expectedReplyWait) != nil { answered += 1 }
        let stats = try client.stats()
        #expect(stats.headRevision == UInt64(sent))
        #expect(stats.compactedRevision > 0, "compaction ran during the load")
        #expect(try client.get("k49").version > 0)
        #expect(try client.delta(prefix: "", since: stats.headRevision - 10).events.count == 10)
        await daemon.stop()
    }
}

extension PipelineTests {
    @Test func aLargeCompactionRunsInStepsWhileTheDaemonKeepsAnswering() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let writer = try daemon.client()
        // Enough rows for many steps, few enough to write quickly in a busy debug run (60,000 took
        // up to a minute there, nearly all of it the puts).
        let count = 30_000
        var sent = 0, answered = 0
        while answered < count {
            while sent < min(answered + 2_000, count) {
                try writer.send(.put(.with { $0.key = "k\(sent % 100)"; $0.value = .int(Int64(sent)) }))
                sent += 1
            }
            let reply = try #require(try writer.receiveReply(timeoutMilliseconds: expectedReplyWait))
            guard case .write = reply.result else { Issue.record("\(reply)"); break }
            answered += 1
        }
        _ = try writer.delete("k7")

        // The compaction is announced at once and answered when its last step is done; between
        // steps the daemon serves other clients, writes included.
        let admin = try daemon.client()
        let target = UInt64(count + 1)  // the delete too
        let compactID = try admin.send(.compact(.with { $0.revision = target }))
        var compactReply: Beacon_V1_Reply?
        var servedWhileCompacting = 0
        var writesMeanwhile = 0
        while compactReply == nil {
            if try writer.ping().compactedRevision == target {
                servedWhileCompacting += 1
            }
            _ = try writer.put("during", .int(Int64(writesMeanwhile)))
            writesMeanwhile += 1
            compactReply = try admin.receiveReply(timeoutMilliseconds: 0)
        }
        #expect(compactReply?.id == compactID)
        #expect(servedWhileCompacting >= 2, "the daemon answered \(servedWhileCompacting) pings between announcing and finishing")
        // 30,000 puts to 100 keys and a delete: all but the latest put of the 99 live keys go.
        #expect(compactReply?.compact.removed == UInt64(count + 1 - 99))
        #expect(compactReply?.compact.compactedRevision == target)

        let snapshot = try writer.snapshot(prefix: "k", revision: target)
        #expect(snapshot.kvs.count == 99)
        #expect(snapshot.kvs.first { $0.key == "k42" }?.value.intValue == Int64(count - 58))
        #expect(try writer.history("", from: 0).events.count == 99 + writesMeanwhile)
        await daemon.stop()
    }
}
