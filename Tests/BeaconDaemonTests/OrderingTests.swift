import BeaconDaemon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct OrderingTests {
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
