import BeaconDaemon
import BeaconLocking
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct OrderingTests {
    /// A `Get` or `Ping` from a connection with nothing waiting is answered from durable state
    /// while a commit is under way (one that checkpoints SQLite's log takes tens of
    /// milliseconds); a read of a key that commit writes, or one behind its own connection's
    /// writes, waits for it, and says what it wrote.
    @Test func readsDoNotWaitForACommitThatCannotConcernThem() throws {
        let journal = Locked<FaultInjectingJournal?>(nil)
        let daemon = try TestDaemon(journal: { opened in
            let wrapped = FaultInjectingJournal(opened)
            journal.withLock { $0 = wrapped }
            return wrapped
        })
        defer {
            journal.withLock { $0 }?.releaseCommits()
            daemon.stopNow()
        }
        let held = try #require(journal.withLock { $0 })
        let writer = try daemon.client(), reader = try daemon.client()
        let durable = try writer.put("r.x", .int(1)).revision
        // More writes than the loop commits inline: they commit on the commit thread, held there.
        held.holdCommits()
        let batch = try writer.send(.batch(.with {
            $0.requests = (0..<40).map { index in .with { $0.id = UInt64(index + 1); $0.put = .with { $0.key = "r.y\(index)"; $0.value = .int(2) } } }
        }))
        let deadline = Date().addingTimeInterval(60)
        while held.heldCommits == 0 {
            try #require(Date() < deadline, "the batch's commit never reached the journal")
            Thread.sleep(forTimeInterval: 0.001)
        }
        let ownGet = try writer.send(.get(.with { $0.key = "r.x" }))  // behind its connection's batch

        let get = try reader.call(.get(.with { $0.key = "r.x" }), timeoutMilliseconds: expectedReplyWait)
        #expect(get.get.revision == durable && get.get.kv.value == .int(1) && get.get.kv.version == 1)
        let ping = try reader.call(.ping(.init()), timeoutMilliseconds: expectedReplyWait)
        #expect(ping.ping.headRevision == durable, "no reply names a revision not yet journaled")
        #expect(held.heldCommits == 1, "answered while the commit was still held")

        // A key the held commit writes: its answer waits for the commit, and shows it.
        let staged = try reader.send(.get(.with { $0.key = "r.y0" }))
        held.releaseCommits()
        let stagedGet = try reader.awaitReply(to: staged, timeoutMilliseconds: expectedReplyWait)
        #expect(stagedGet.get.kv.value == .int(2) && stagedGet.get.revision > durable)
        // The writer's replies in request order: its batch, then its own read, which sees nothing older.
        let batchReply = try #require(try writer.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(batchReply.id == batch && batchReply.batch.replies.count == 40)
        let ownReply = try #require(try writer.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(ownReply.id == ownGet && ownReply.get.revision >= batchReply.batch.replies.last!.write.revision)
    }

    /// Large batches commit on the commit thread, small ones inline. A small batch staged while a
    /// large one commits must still be published and answered after it (a regression: it was
    /// committed inline from the large batch's completion and went out first).
    @Test func diffsAndRepliesFollowRevisionOrderWhenLargeAndSmallBatchesMix() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let subscriber = try daemon.client()
        try subscriber.subscribe("o.", receiveHighWaterMark: 0)
        try awaitSequencing(subscriber, prefix: "o.")
        let writer = try daemon.client()
        // A windowed writer (like `beacon pub`): once 1,000 writes are in flight, each reply lets
        // one more go, so single writes trickle in while a large batch commits on the thread.
        var sent: [UInt64] = []
        var replies: [(id: UInt64, revision: UInt64)] = []
        func receiveOne() throws {
            guard let reply = try writer.receiveReply(timeoutMilliseconds: expectedReplyWait) else { throw WireError(kind: .timeout, message: "no reply") }
            replies.append((reply.id, reply.write.revision))
        }
        for i in 0..<50_000 {
            sent.append(try writer.send(.put(.with { $0.key = "o.k\(i % 10)"; $0.value = .int(Int64(i)) })))
            while sent.count - replies.count >= 1000 { try receiveOne() }
        }
        while replies.count < sent.count { try receiveOne() }
        #expect(replies.map(\.id) == sent, "replies must come in request order")
        #expect(zip(replies, replies.dropFirst()).allSatisfy { $0.revision + 1 == $1.revision })

        var revisions: [UInt64] = []
        var previous: [UInt64] = []
        while revisions.count < sent.count, let publication = try subscriber.receivePublication(timeoutMilliseconds: expectedReplyWait) {
            guard case .diff(let diff) = publication else { continue }
            revisions.append(diff.event.revision)
            previous.append(diff.marks.first { $0.prefix == "o." }?.previousRevision ?? 0)
        }
        #expect(revisions == replies.map(\.revision), "diffs must be published in revision order")
        #expect(zip(revisions, previous.dropFirst()).allSatisfy { $0 == $1 }, "each mark must name the revision before it")
        await daemon.stop()
    }
}
