import BeaconDaemon
import BeaconProtocol
import BeaconWire
import Foundation
import Synchronization
import Testing
import BeaconTestSupport

/// Writes from another thread until stopped; records every acknowledged revision.
final class BackgroundWriter: @unchecked Sendable {
    private let stopFlag = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private(set) var acknowledged: [UInt64] = []
    private(set) var failure: WireError?

    init(runtimeDirectory: String, keys: [String], transactionsEvery: Int = 0) {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            do {
                let client = try WireClient.patient(runtimeDirectory: runtimeDirectory)
                var i = 0
                while !stopFlag.load(ordering: .relaxed) {
                    let key = keys[i % keys.count]
                    let reply: Beacon_V1_WriteReply
                    if transactionsEvery > 0 && i % transactionsEvery == 0 {
                        reply = try client.transaction(keys.prefix(3).map { putOp($0, .int(Int64(i))) })
                    } else {
                        reply = try client.put(key, .int(Int64(i)))
                    }
                    acknowledged.append(reply.revision)
                    i += 1
                }
            } catch {
                failure = error as? WireError
            }
        }
    }

    /// Stops writing and waits for the thread.
    func stop() {
        stopFlag.store(true, ordering: .relaxed)
        done.wait()
    }
}

/// Runs `follower` until it is complete through `revision`.
func follow(_ follower: PrefixFollower, through revision: UInt64, timeoutSeconds: Double = 20) throws {
    let deadline = Date().addingTimeInterval(timeoutSeconds)
    while follower.through < revision && Date() < deadline {
        _ = try follower.next(timeoutMilliseconds: 50)
    }
}

@Suite(.timeLimit(.minutes(4)), .offThePool)
struct SequencingTests {
    @Test func aLateJoinerEndsWithExactlyTheDaemonsStateWhileWritesFlow() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let keys = (0..<50).map { "net.if\($0)" } + (0..<50).map { "audio.ch\($0)" }
        let writer = BackgroundWriter(runtimeDirectory: daemon.configuration.runtimeDirectory, keys: keys, transactionsEvery: 7)
        try await Task.sleep(for: .milliseconds(100))
        let client = try daemon.client()
        let follower = try PrefixFollower(client: client, prefix: "net.")
        var applied: [UInt64] = []
        let deadline = Date().addingTimeInterval(0.5)
        while Date() < deadline {
            if case .revision(let events) = try follower.next(timeoutMilliseconds: 20) { applied.append(events[0].revision) }
        }
        writer.stop()
        #expect(writer.failure == nil)
        let head = try client.stats().headRevision
        try follow(follower, through: head)
        let truth = try client.list("net.")
        #expect(follower.through >= head)
        #expect(follower.state.keys.sorted() == truth.map(\.key))
        #expect(follower.state.values.sorted { $0.key < $1.key }.map(\.version) == truth.map(\.version))
        #expect(applied == applied.sorted() && Set(applied).count == applied.count)  // ordered, unique
        #expect(follower.resyncs == 0)
        await daemon.stop()
    }

    @Test func aPrefixSubscriberWithATinyQueueDetectsEveryDropAndRepairsGaplessly() async throws {
        let daemon = try TestDaemon {
            $0.heartbeatIntervalMilliseconds = 50
            $0.publishHighWaterMark = 10
        }
        defer { daemon.stopNow() }
        let client = try daemon.client()
        let follower = try PrefixFollower(client: client, prefix: "net.", receiveHighWaterMark: 10)
        // Let the subscription reach the daemon so that the flood is sequenced for our prefix.
        try follow(follower, through: 0)
        try await Task.sleep(for: .milliseconds(150))
        _ = try follower.next(timeoutMilliseconds: 100)

        // Flood while the follower is not reading: most diffs are dropped at the high-water mark.
        let writer = try daemon.client()
        var expected: [String: Int64] = [:]
        let flood = 10_000
        for i in 0..<flood {
            let key = i % 3 == 0 ? "audio.x\(i % 11)" : "net.if\(i % 17)"
            _ = try writer.put(key, .int(Int64(i)))
            if key.hasPrefix("net.") { expected[key] = Int64(i) }
        }
        _ = try writer.transaction([putOp("net.tx.a", .int(1)), putOp("audio.tx", .int(1)), putOp("net.tx.b", .int(2))])
        expected["net.tx.a"] = 1
        expected["net.tx.b"] = 2
        let head = try writer.stats().headRevision

        var revisions: [UInt64] = []
        var seen: [String: [Int64]] = [:]
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let update = try follower.next(timeoutMilliseconds: 50)
            if update == nil && follower.through >= head { break }
            guard case .revision(let events) = update else { continue }
            revisions.append(events[0].revision)
            for event in events where event.change.key.hasPrefix("net.") {
                seen[event.change.key, default: []].append(event.change.value.intValue)
            }
        }
        #expect(follower.through >= head)
        #expect(follower.repairs > 0)  // drops happened and were repaired
        #expect(follower.resyncs == 0)
        #expect(follower.state.mapValues(\.value.intValue) == expected)
        #expect(revisions == revisions.sorted() && Set(revisions).count == revisions.count)
        // Gapless: every value written to a net. key arrives, in order.
        let written = (0..<flood).filter { $0 % 3 != 0 }
        for key in Set(written.map { "net.if\($0 % 17)" }) {
            #expect(seen[key] == written.filter { "net.if\($0 % 17)" == key }.map(Int64.init), "history of \(key)")
        }
        await daemon.stop()
    }

    @Test func compactionAnswersATooOldDeltaWithAnExplicitResync() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        for i in 1...20 { _ = try client.put("k", .int(Int64(i))) }
        _ = try client.put("other", .int(1))
        let compacted = try client.call(.compact(.with { $0.revision = 15 }))
        #expect(compacted.compact.compactedRevision == 15)
        #expect(compacted.compact.removed == 14)

        let error = expectRejection(.compacted) { _ = try client.delta(prefix: "", since: 3) }
        #expect(error?.compactedRevision == 15)
        expectRejection(.compacted) { _ = try client.history("k", exact: true, from: 2) }
        expectRejection(.compacted) { _ = try client.snapshot(prefix: "", revision: 10) }
        // Current state is intact, and history from the compaction point on is complete.
        #expect(try client.get("k").value.intValue == 20)
        #expect(try client.delta(prefix: "", since: 15).events.map(\.revision) == [16, 17, 18, 19, 20, 21])
        let snapshot = try client.snapshot(prefix: "", revision: 15)
        #expect(snapshot.kvs.map { "\($0.key)=\($0.value.intValue)" } == ["k=15"])
        await daemon.stop()
    }

    @Test func aMirrorsDeltaBecomesASnapshotWhenTheChangesOutnumberTheKeys() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        // Three keys under m., each written ten times; one more key elsewhere written often.
        for round in 1...10 {
            for key in ["m.a", "m.b", "m.c"] { _ = try client.put(key, .int(Int64(round))) }
            for _ in 0..<5 { _ = try client.put("other.x", .int(Int64(round))) }
        }
        _ = try client.delete("m.c")
        func delta(since: UInt64, snapshotIfSmaller: Bool = true) throws -> Beacon_V1_Reply.OneOf_Result? {
            try client.call(.delta(.with {
                $0.prefix = "m."
                $0.sinceRevision = since
                $0.snapshotIfSmaller = snapshotIfSmaller
            })).result
        }
        // 31 changes after revision 0 but three keys: the snapshot of the two live ones.
        guard case .snapshot(let snapshot)? = try delta(since: 0) else { Issue.record("expected a snapshot"); return }
        #expect(snapshot.kvs.map(\.key) == ["m.a", "m.b"])
        #expect(snapshot.kvs.map(\.value.intValue) == [10, 10])
        #expect(snapshot.revision == 81 && snapshot.prefixRevision == 81)
        // Two changes under m. in the last seven revisions (m.c's last write, its deletion):
        // fewer than the keys, so the delta itself, although seven revisions exceed three keys.
        guard case .events(let events)? = try delta(since: 74) else { Issue.record("expected events"); return }
        #expect(events.events.map(\.change.key) == ["m.c", "m.c"])
        // Without the flag (history streams), always the changes.
        guard case .events(let all)? = try delta(since: 0, snapshotIfSmaller: false) else { Issue.record("expected events"); return }
        #expect(all.events.count == 31)
        await daemon.stop()
    }

    @Test func deltaPagesEndOnWholeRevisionsAndCarryTheBookmark() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        _ = try client.put("a.1", .int(1))
        _ = try client.transaction([putOp("a.2", .int(2)), putOp("a.3", .int(3)), putOp("b.1", .int(1))])
        _ = try client.put("b.2", .int(2))
        _ = try client.put("a.4", .int(4))
        let first = try client.delta(prefix: "a.", since: 0, limit: 2)
        #expect(first.events.map(\.change.key) == ["a.1", "a.2", "a.3"])
        #expect(first.more && first.revision == 2)
        let rest = try client.delta(prefix: "a.", since: first.revision, limit: 2)
        #expect(rest.events.map(\.change.key) == ["a.4"])
        #expect(!rest.more && rest.revision == 4)
        #expect(rest.prefixRevision == 4)
        #expect(try client.delta(prefix: "b.", since: 0).prefixRevision == 3)
        let snapshot = try client.snapshot(prefix: "b.")
        #expect(snapshot.revision == 4 && snapshot.prefixRevision == 3)
        #expect(snapshot.kvs.map(\.key) == ["b.1", "b.2"])
        await daemon.stop()
    }

    @Test func heartbeatsCarryTheHeadAndEveryTrackedPrefix() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        try client.subscribe("net.")
        try awaitSequencing(client, prefix: "net.")  // the write below then moves the prefix's bookmark
        _ = try client.put("net.a", .int(1))
        _ = try client.put("audio.a", .int(1))
        let publication = try awaitPublication(client) {
            if case .heartbeat(let h) = $0 { h.headRevision == 2 && h.prefixes.contains { $0.prefix == "net." } } else { false }
        }
        guard case .heartbeat(let heartbeat) = try #require(publication) else { return }
        #expect(heartbeat.prefixes.first { $0.prefix == "net." }?.revision == 1)
        #expect(heartbeat.intervalMs == 100)
        #expect(heartbeat.epoch == (try client.ping().epoch))
        await daemon.stop()
    }
}
