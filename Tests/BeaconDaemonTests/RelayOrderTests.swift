@testable import BeaconDaemon
import BeaconTestSupport
import BeaconZMQ
import Foundation
import Testing

/// A relay's rules, as values: a connection's requests wait behind its forwarded writes, a
/// forwarded write is answered only once the relay's own journal shows it, and no write overtakes
/// one answered `UPSTREAM_UNAVAILABLE`. No sockets.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct RelayOrderTests {
    static let alice = RoutingID(ZMQMessage(bytes: [0, 0, 0, 0, 1]))
    static let bob = RoutingID(ZMQMessage(bytes: [0, 0, 0, 0, 2]))

    /// Every request handed back now, in order.
    static func handBack(_ order: inout ForwardingOrder<String>) -> [String] {
        var out: [String] = []
        while let next = order.nextToHandBack() { out.append(next) }
        return out
    }

    @Test func aReadAfterAForwardedWriteWaitsForItsAnswerAndWritesPipeline() {
        var order = ForwardingOrder<String>()
        #expect(order.admit("write 1", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 1000) == .now)
        order.forwarded(by: Self.alice)
        #expect(order.admit("write 2", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 1000) == .now, "writes pipeline behind writes")
        order.forwarded(by: Self.alice)
        #expect(order.admit("read 1", of: Self.alice, isForwarded: false, bytes: 10, boundBytes: 1000) == .waits)
        #expect(order.admit("write 3", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 1000) == .waits, "behind the read that waits")
        #expect(order.admit("read of bob", of: Self.bob, isForwarded: false, bytes: 10, boundBytes: 1000) == .now, "another connection is not held")
        order.answered(for: Self.alice)
        #expect(Self.handBack(&order).isEmpty, "one forwarded write is still unanswered")
        order.answered(for: Self.alice)
        // The read goes, then the write behind it (forwarded itself: the relay forwards it again).
        #expect(order.nextToHandBack() == "read 1")
        #expect(order.nextToHandBack() == "write 3")
        #expect(order.nextToHandBack() == nil)
        #expect(order.waitingCount == 0)
    }

    /// An etcd front's order: etcd applies concurrent transactions in any order, so a write waits
    /// for the one before it, bounded like the rest.
    @Test func noWritePipelinesPastAConsistentReadLearningItsReadIndex() {
        var order = ForwardingOrder<String>()
        #expect(order.admit("consistent read", of: Self.alice, isForwarded: false, bytes: 10, boundBytes: 1000) == .now)
        order.forwarded(by: Self.alice, barrier: true)
        #expect(order.admit("write 1", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 1000) == .waits)
        #expect(order.admit("write of bob", of: Self.bob, isForwarded: true, bytes: 10, boundBytes: 1000) == .now)
        order.answered(for: Self.alice, barrier: true)
        #expect(Self.handBack(&order) == ["write 1"])
        order.forwarded(by: Self.alice)
        #expect(order.admit("write 2", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 1000) == .now, "the barrier is gone")
    }

    @Test func consistentReadsArrivingWhileAReadIndexIsLearnedShareTheNextOne() {
        var reads = ConsistentReads<String>()
        let asks = [reads.add("a", now: 0), reads.add("b", now: 1), reads.add("c", now: 2)]
        #expect(asks == [true, false, false], "the first asks; b and c wait for the next")
        var (failed, again) = reads.learned(10)
        #expect(failed.isEmpty && again, "b and c need a read index asked after they arrived")
        reads.followed(through: 10, stagedHead: 4)
        reads.journalDurable(through: 3)
        let early = reads.takeReady().map(\.read)
        reads.journalDurable(through: 4)
        let reached = reads.takeReady().map(\.read)
        #expect(early.isEmpty && reached == ["a"], "ready once the journal is durable through what it staged by then")
        (failed, again) = reads.learned(nil)
        #expect(failed == ["b", "c"] && !again)
        #expect(reads.isEmpty)
        let asksForD = reads.add("d", now: 100)
        let expired = reads.takeExpired(now: 100 + ConsistentReads<String>.patienceMilliseconds)
        let asksForE = reads.add("e", now: 6000)
        #expect(asksForD && expired == ["d"] && !asksForE, "the read index asked for d is still on its way")
        (failed, again) = reads.learned(20)
        #expect(failed.isEmpty && again)
        let asksForF = reads.add("f", now: 7000)
        let left = reads.takeAll()
        #expect(!asksForF && left == ["e", "f"])
        #expect(reads.isEmpty, "with the read index asked for e still on its way, no read waits: a daemon that stops does not wait for it")
    }

    @Test func withoutPipeliningAWriteWaitsForTheOneBeforeIt() {
        var order = ForwardingOrder<String>(pipelinesForwarded: false)
        #expect(order.admit("write 1", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 25) == .now)
        order.forwarded(by: Self.alice)
        #expect(order.admit("write 2", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 25) == .waits)
        #expect(order.admit("read 1", of: Self.alice, isForwarded: false, bytes: 10, boundBytes: 25) == .waits)
        #expect(order.admit("write of bob", of: Self.bob, isForwarded: true, bytes: 10, boundBytes: 25) == .now, "another connection is not held")
        order.answered(for: Self.alice)
        #expect(order.nextToHandBack() == "write 2")
        order.forwarded(by: Self.alice)
        #expect(order.nextToHandBack() == nil, "the read waits for write 2")
        order.answered(for: Self.alice)
        #expect(order.nextToHandBack() == "read 1")
        #expect(order.waitingCount == 0)
        order.forwarded(by: Self.alice)
        #expect(order.admit("write 3", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 25) == .waits)
        #expect(order.admit("write 4", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 25) == .waits)
        #expect(order.admit("write 5", of: Self.alice, isForwarded: true, bytes: 10, boundBytes: 25) == .overBound(held: 30))
    }

    @Test func handingBackStopsAtAReadBehindAWriteItForwardedAgain() {
        var order = ForwardingOrder<String>()
        order.forwarded(by: Self.alice)
        for request in ["read 1", "write 2", "read 3"] {
            #expect(order.admit(request, of: Self.alice, isForwarded: request.hasPrefix("write"), bytes: 1, boundBytes: 1000) == .waits)
        }
        order.answered(for: Self.alice)
        #expect(order.nextToHandBack() == "read 1")
        #expect(order.nextToHandBack() == "write 2")
        // The relay forwards write 2 as it is handed back: read 3 waits for its answer.
        order.forwarded(by: Self.alice)
        #expect(order.nextToHandBack() == nil)
        #expect(order.waitingCount == 1)
        order.answered(for: Self.alice)
        #expect(Self.handBack(&order) == ["read 3"])
    }

    @Test func whatWaitsIsBoundedInBytesPerConnection() {
        var order = ForwardingOrder<String>()
        order.forwarded(by: Self.alice)
        #expect(order.admit("read 1", of: Self.alice, isForwarded: false, bytes: 60, boundBytes: 100) == .waits)
        #expect(order.admit("read 2", of: Self.alice, isForwarded: false, bytes: 60, boundBytes: 100) == .overBound(held: 120))
        #expect(order.waitingCount == 0, "what the connection had waiting is dropped with it")
        order.answered(for: Self.alice)
        #expect(order.nextToHandBack() == nil)
    }

    @Test func answeredWritesWaitForTheMirrorInRevisionOrderAndOnlyInTheUpstreamsEpoch() {
        var waiters = MirrorWaiters<String>()
        waiters.add("r12", epoch: 7, revision: 12)
        waiters.add("r10", epoch: 7, revision: 10)
        waiters.add("r11", epoch: 7, revision: 11)
        #expect(waiters.takeShown(journalEpoch: 6, upstreamEpoch: 7, durableRevision: 99).isEmpty,
                "the relay holds another epoch: nothing of this one is shown yet")
        #expect(waiters.takeShown(journalEpoch: 7, upstreamEpoch: 7, durableRevision: 9).isEmpty)
        #expect(waiters.takeShown(journalEpoch: 7, upstreamEpoch: 7, durableRevision: 11) == ["r10", "r11"])
        #expect(waiters.count == 1)
        // Acknowledged in an epoch the relay's journal no longer holds: answered as it is.
        waiters.add("old", epoch: 5, revision: 3)
        #expect(waiters.takeShown(journalEpoch: 7, upstreamEpoch: 7, durableRevision: 11) == [])
        #expect(waiters.takeShown(journalEpoch: 7, upstreamEpoch: 7, durableRevision: 12) == ["r12", "old"])
        waiters.add("left", epoch: 7, revision: 20)
        #expect(waiters.takeAll().map(\.revision) == [20])
        #expect(waiters.isEmpty)
    }

    @Test func afterAnUnavailableAnswerOnlyAResendOfAnAnsweredWriteGoesOn() {
        var fences = WriteFences()
        var admitted: Bool
        let id = { (n: Int) in Data("run-\(n)".utf8) }
        admitted = fences.admits(Self.alice, writeID: id(1), at: 10, answersHeld: false)
        #expect(admitted)
        fences.unavailable(Self.alice, writeID: id(1), at: 10)
        fences.unavailable(Self.alice, writeID: id(2), at: 10)
        // Sent before the client saw those answers: it must not go ahead of them.
        admitted = fences.admits(Self.alice, writeID: id(3), at: 10, answersHeld: false)
        #expect(!admitted)
        fences.unavailable(Self.alice, writeID: id(3), at: 10)
        admitted = fences.admits(Self.alice, writeID: Data(), at: 10, answersHeld: false)
        #expect(!admitted, "a write without an id cannot lift a fence")
        admitted = fences.admits(Self.bob, writeID: id(3), at: 10, answersHeld: false)
        #expect(admitted, "another connection is not fenced")
        // The client goes back to its first unanswered write: the fence is lifted.
        admitted = fences.admits(Self.alice, writeID: id(1), at: 10, answersHeld: false)
        #expect(admitted)
        admitted = fences.admits(Self.alice, writeID: id(2), at: 10, answersHeld: false)
        #expect(admitted)
        admitted = fences.admits(Self.alice, writeID: id(4), at: 10, answersHeld: false)
        #expect(admitted)
        #expect(fences.count == 0)
        fences.unavailable(Self.alice, writeID: Data(), at: 10)
        #expect(fences.count == 0, "a write without an id sets no fence")
    }

    @Test func fencesAreBoundedOldestFirst() {
        var fences = WriteFences()
        var admitted: Bool
        let connection = { (n: Int) in RoutingID(ZMQMessage(bytes: [1, UInt8(n >> 16 & 0xff), UInt8(n >> 8 & 0xff), UInt8(n & 0xff)])) }
        for n in 0...WriteFences.maxConnections { fences.unavailable(connection(n), writeID: Data("w".utf8), at: 10) }
        #expect(fences.count == WriteFences.maxConnections)
        admitted = fences.admits(connection(0), writeID: Data("other".utf8), at: 10, answersHeld: false)
        #expect(admitted, "the oldest fence went")
        admitted = fences.admits(connection(WriteFences.maxConnections), writeID: Data("other".utf8), at: 10, answersHeld: false)
        #expect(!admitted)
    }

    @Test func aFenceFallsAfterItsHoldSinceTheLastWriteItTurnedAway() {
        var fences = WriteFences()
        var admitted: Bool
        let hold = WriteFences.holdMilliseconds
        fences.unavailable(Self.alice, writeID: Data("w1".utf8), at: 1000)
        admitted = fences.admits(Self.alice, writeID: Data("w2".utf8), at: 1000 + hold - 1, answersHeld: false)
        #expect(!admitted)
        fences.unavailable(Self.alice, writeID: Data("w2".utf8), at: 1000 + hold - 1)
        admitted = fences.admits(Self.alice, writeID: Data("w3".utf8), at: 1000 + hold, answersHeld: false)
        #expect(!admitted, "turning w2 away kept the fence up")
        admitted = fences.admits(Self.alice, writeID: Data("w3".utf8), at: 1000 + 2 * hold - 1, answersHeld: false)
        #expect(admitted, "a client that gave up on w1 and w2 goes on")
        #expect(fences.count == 0)
    }

    /// The client sees an unavailable answer only after the answers before it on its connection,
    /// and those can wait for the relay's mirror (an upstream that acknowledged writes and froze)
    /// far longer than the hold: what the client sent meanwhile is still from before it saw it.
    @Test func aFenceStandsWhileTheConnectionsAnswersAreHeldAndForItsHoldAfterTheLastIsGiven() {
        var fences = WriteFences()
        var admitted: Bool
        let hold = WriteFences.holdMilliseconds
        fences.unavailable(Self.alice, writeID: Data("w2".utf8), at: 1000)
        admitted = fences.admits(Self.alice, writeID: Data("w9".utf8), at: 1000 + 3 * hold, answersHeld: true)
        #expect(!admitted, "the answer to w1 is held, so the client has not seen w2's")
        fences.answersGiven(Self.alice, at: 1000 + 4 * hold)
        admitted = fences.admits(Self.alice, writeID: Data("w9".utf8), at: 1000 + 5 * hold - 1, answersHeld: false)
        #expect(!admitted, "sent before its client saw the answer")
        fences.answersGiven(Self.bob, at: 1000)
        #expect(fences.count == 1, "giving answers raises no fence")
        admitted = fences.admits(Self.alice, writeID: Data("w9".utf8), at: 1000 + 5 * hold, answersHeld: false)
        #expect(admitted)
    }
}
