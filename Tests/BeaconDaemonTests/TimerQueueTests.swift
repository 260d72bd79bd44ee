@testable import BeaconDaemon
import Testing
import BeaconTestSupport

@Suite(.offThePool, .timeLimit(.minutes(3)))
struct TimerQueueTests {
    static func at(_ milliseconds: UInt64) -> MonotonicTime { MonotonicTime(milliseconds: milliseconds) }

    @Test func timersComeDueInDeadlineOrderAndTiesInTheOrderSet() {
        var timers = TimerQueue<WritePath.Timer>()
        for (index, deadline) in [50, 10, 30, 10, 40, 20].enumerated() {
            timers.schedule(.expiry(key: "k\(index)", modRevision: 0, expiresAtMilliseconds: 0), at: Self.at(UInt64(deadline)))
        }
        #expect(timers.nextDeadline == Self.at(10))
        #expect(timers.popDue(at: Self.at(9)) == nil, "nothing is due before its deadline")
        var order: [String] = []
        while let (timer, _) = timers.popDue(at: Self.at(45)) {
            if case .expiry(let key, _, _) = timer { order.append(key) }
        }
        #expect(order == ["k1", "k3", "k5", "k2", "k4"])
        #expect(timers.count == 1 && timers.nextDeadline == Self.at(50))
    }

    @Test func monotonicArithmeticSaturatesInsteadOfTrapping() {
        #expect(Self.at(.max - 1).adding(milliseconds: 10) == .distantFuture)
        #expect(Self.at(100).milliseconds(until: Self.at(40)) == 0)
        #expect(Self.at(40).milliseconds(until: Self.at(100)) == 60)
        let now = MonotonicTime.now()
        #expect(MonotonicTime.now() >= now)
    }

    @Test func aSessionHasOneLiveTimerAndRenewalsMoveItsDeadline() {
        var sessions = SessionTable()
        let id: [UInt8] = [1]
        #expect(sessions.bind("a", to: id, now: Self.at(0), ttl: 100) == Self.at(100))
        #expect(sessions.bind("b", to: id, now: Self.at(5), ttl: 100) == nil, "an existing session keeps its timer")
        // Renewed for longer: no new timer; the one set comes due early and is set again.
        #expect(sessions.keepAlive(id, ttl: 100, now: Self.at(60)).timerAt == nil)
        guard case .renewed(let until) = sessions.check(id, timerAt: Self.at(100), now: Self.at(100)) else {
            Issue.record("the session was renewed until 160")
            return
        }
        #expect(until == Self.at(160))
        // Renewed for less: a new, earlier timer; the one at 160 is then stale.
        #expect(sessions.keepAlive(id, ttl: 10, now: Self.at(120)).timerAt == Self.at(130))
        guard case .stale = sessions.check(id, timerAt: Self.at(160), now: Self.at(160)) else {
            Issue.record("the timer at 160 was replaced")
            return
        }
        guard case .ended(let keys) = sessions.check(id, timerAt: Self.at(130), now: Self.at(130)) else {
            Issue.record("the session ended at 130")
            return
        }
        #expect(keys == ["a", "b"])
        #expect(sessions.count == 0)
    }
}
