@testable import BeaconDaemon
import BeaconProtocol
import BeaconZMQ
import Testing
import BeaconTestSupport

@Suite(.offThePool, .timeLimit(.minutes(3)))
struct ReplyQueueTests {
    /// What the queue released: the connection, the request id and the error code, if any.
    struct Sent: Equatable {
        var connection: String
        var id: UInt64
        var code: Beacon_V1_Error.Code?
    }

    final class Wire {
        var sent: [Sent] = []
        func deliver(_ route: ReplyRoute, _ reply: PendingReply) {
            guard case .peer(let envelope) = route else { return }
            let connection = envelope.connection.withBytes { String(decoding: $0, as: UTF8.self) }
            switch reply {
            case .oneKeyWrite(let id, _, _), .write(let id, _, _): sent.append(Sent(connection: connection, id: id, code: nil))
            case .answer(let answer, _):
                let code: Beacon_V1_Error.Code? = if case .error(let error) = answer.result { error.code } else { nil }
                sent.append(Sent(connection: connection, id: answer.id, code: code))
            case .encoded(let body):
                let answer = (try? Beacon_V1_Reply(serializedBytes: body)) ?? Beacon_V1_Reply()
                sent.append(Sent(connection: connection, id: answer.id, code: nil))
            case .held: Issue.record("a held place was released")
            }
        }
    }

    static func route(_ connection: String) -> ReplyRoute {
        .peer(ReplyEnvelope(connection: Array(connection.utf8).withUnsafeBytes { RoutingID($0) }))
    }
    static func refusal(_ id: UInt64, _ code: Beacon_V1_Error.Code, head: UInt64) -> Beacon_V1_Reply {
        .with { $0.id = id; $0.error = .with { $0.code = code; $0.headRevision = head } }
    }

    @Test func repliesWaitForTheirRevisionAndLeaveInTheOrderDecided() {
        var queue = ReplyQueue()
        let wire = Wire()
        queue.enqueue(.ping(1), to: Self.route("a"), decidedAt: 0, durableRevision: 0, deliver: wire.deliver)
        #expect(wire.sent == [Sent(connection: "a", id: 1)], "durable and nothing ahead: at once")
        queue.enqueue(.oneKeyWrite(id: 2, revision: 1, version: 1), to: Self.route("a"), decidedAt: 1, durableRevision: 0, deliver: wire.deliver)
        queue.enqueue(.answer(Self.refusal(3, .alreadyExists, head: 1), dependsOnStaged: true), to: Self.route("b"),
                      decidedAt: 1, durableRevision: 0, deliver: wire.deliver)
        queue.enqueue(.write(id: 4, revision: 2, versions: [1, 1]), to: Self.route("a"), decidedAt: 2, durableRevision: 0, deliver: wire.deliver)
        // Durable itself, but behind replies that are not: it waits in line.
        queue.enqueue(.ping(5), to: Self.route("a"), decidedAt: 0, durableRevision: 0, deliver: wire.deliver)
        #expect(wire.sent.count == 1 && queue.count == 4)
        queue.release(durableRevision: 1, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [1, 2, 3])
        queue.release(durableRevision: 2, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [1, 2, 3, 4, 5])
        #expect(queue.count == 0)
    }

    /// A durable reply waits only behind its own connection's: another connection's replies
    /// waiting for a commit do not hold it, whichever connections came and went before.
    @Test func aDurableReplyWaitsOnlyBehindItsOwnConnection() {
        var queue = ReplyQueue()
        let wire = Wire()
        queue.enqueue(.oneKeyWrite(id: 1, revision: 5, version: 1), to: Self.route("a"), decidedAt: 5, durableRevision: 4, deliver: wire.deliver)
        queue.enqueue(.ping(2), to: Self.route("b"), decidedAt: 4, durableRevision: 4, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [2], "nothing of b waits: at once")
        queue.enqueue(.ping(3), to: Self.route("a"), decidedAt: 4, durableRevision: 4, deliver: wire.deliver)
        queue.enqueue(.ping(4), to: Self.route("b"), decidedAt: 5, durableRevision: 4, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [2], "behind a's write, or not durable: they wait")
        // Replies of 200 connections in turn, some of them released: who still waits is known.
        for index in 0..<200 {
            queue.enqueue(.oneKeyWrite(id: UInt64(10 + index), revision: UInt64(6 + index), version: 1), to: Self.route("c\(index)"),
                          decidedAt: UInt64(6 + index), durableRevision: 4, deliver: wire.deliver)
        }
        queue.release(durableRevision: 105, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [2, 1, 3, 4] + (10..<110).map { UInt64($0) })
        for (connection, waits) in [("a", false), ("b", false), ("c0", false), ("c99", false), ("c100", true), ("c199", true)] {
            #expect(queue.mayLeaveAtOnce(to: Self.route(connection), decidedAt: 105, durableRevision: 105) == !waits, "\(connection)")
        }
        queue.release(durableRevision: 205, deliver: wire.deliver)
        #expect(queue.count == 0 && queue.mayLeaveAtOnce(to: Self.route("c199"), decidedAt: 205, durableRevision: 205))
    }

    @Test func aRollbackAnswersWritesAndWhatWasDecidedAgainstThemAsRetryable() {
        var queue = ReplyQueue()
        let wire = Wire()
        queue.enqueue(.oneKeyWrite(id: 1, revision: 5, version: 1), to: Self.route("a"), decidedAt: 5, durableRevision: 4, deliver: wire.deliver)
        queue.enqueue(.answer(Self.refusal(2, .alreadyExists, head: 5), dependsOnStaged: true), to: Self.route("a"),
                      decidedAt: 5, durableRevision: 4, deliver: wire.deliver)
        queue.enqueue(.answer(Self.refusal(3, .invalidKey, head: 5), dependsOnStaged: false), to: Self.route("b"),
                      decidedAt: 5, durableRevision: 4, deliver: wire.deliver)
        var seenHeads: [UInt64] = []
        queue.rollBack(durableRevision: 4, reason: "disk full") { route, reply in
            wire.deliver(route, reply)
            if case .answer(let answer, _) = reply { seenHeads.append(answer.error.headRevision) }
        }
        #expect(wire.sent == [Sent(connection: "a", id: 1, code: .readOnly), Sent(connection: "a", id: 2, code: .readOnly),
                              Sent(connection: "b", id: 3, code: .invalidKey)])
        #expect(seenHeads.allSatisfy { $0 == 4 }, "no reply names a revision above the durable head: \(seenHeads)")
    }

    @Test func aHeldPlaceHoldsBackOnlyItsOwnConnection() {
        var queue = ReplyQueue()
        let wire = Wire()
        let ticket = queue.hold(Self.route("a"), at: 3)
        queue.enqueue(.ping(2), to: Self.route("a"), decidedAt: 3, durableRevision: 3, deliver: wire.deliver)
        queue.enqueue(.ping(3), to: Self.route("b"), decidedAt: 3, durableRevision: 3, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [3])
        queue.enqueue(.oneKeyWrite(id: 4, revision: 4, version: 1), to: Self.route("a"), decidedAt: 4, durableRevision: 3, deliver: wire.deliver)
        queue.fill(ticket, with: .with { $0.id = 1 }, durableRevision: 3, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [3, 1, 2], "the held reply, then what waited behind it that is durable")
        queue.release(durableRevision: 4, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [3, 1, 2, 4])
        #expect(queue.count == 0)
    }

    @Test func twoHeldPlacesOnOneConnectionReleaseInRequestOrder() {
        // A relay holds a place for every forwarded write: a connection pipelining writes and
        // reads has many at once, filled in order.
        var queue = ReplyQueue()
        let wire = Wire()
        let first = queue.hold(Self.route("a"), at: 3)
        queue.enqueue(.ping(2), to: Self.route("a"), decidedAt: 3, durableRevision: 3, deliver: wire.deliver)
        let second = queue.hold(Self.route("a"), at: 3)
        queue.enqueue(.ping(4), to: Self.route("a"), decidedAt: 3, durableRevision: 3, deliver: wire.deliver)
        queue.fill(first, with: .with { $0.id = 1 }, durableRevision: 3, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [1, 2], "the first place and what waited behind it, not behind the second")
        queue.fill(second, with: .with { $0.id = 3 }, durableRevision: 3, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [1, 2, 3, 4])
        #expect(queue.count == 0)
    }

    @Test func anotherConnectionsDurableReplyLeavesAtOnceWhileAPlaceIsHeld() {
        var queue = ReplyQueue()
        let wire = Wire()
        let ticket = queue.hold(Self.route("a"), at: 7)
        // Nothing waits for a commit: a durable reply to "b" must not wait for one.
        queue.enqueue(.ping(9), to: Self.route("b"), decidedAt: 7, durableRevision: 7, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [9])
        queue.fill(ticket, with: .with { $0.id = 8 }, durableRevision: 7, deliver: wire.deliver)
        #expect(wire.sent.map(\.id) == [9, 8])
    }
}

extension PendingReply {
    static func ping(_ id: UInt64) -> PendingReply { .answer(.with { $0.id = id; $0.ping = .init() }, dependsOnStaged: false) }
}

extension ReplyQueue {
    /// Queues `reply` as the loop does: sent through `deliver` at once when the queue says so.
    mutating func enqueue(_ reply: PendingReply, to route: ReplyRoute, decidedAt revision: UInt64, durableRevision: UInt64,
                          deliver: (ReplyRoute, PendingReply) -> Void) {
        if mayLeaveAtOnce(to: route, decidedAt: revision, durableRevision: durableRevision) {
            deliver(route, reply)
        } else {
            enqueue(reply, to: route, decidedAt: revision)
        }
    }
}
