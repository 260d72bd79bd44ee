@testable import BeaconDaemon
import BeaconZMQ
import Testing
import BeaconTestSupport

@Suite(.offThePool, .timeLimit(.minutes(3)))
struct SubscriptionPairingTests {
    @Test func aFrameThatIsNotASubscriptionPutsThePairingOutOfStepUntilADrainEmptiesTheQueue() {
        let subscribe = ZMQMessage(bytes: [1] + Array("app.".utf8))
        let unsubscribe = ZMQMessage(bytes: [0] + Array("app.".utf8))
        let junk = ZMQMessage(bytes: [2])
        var pairing = SubscriptionPairing()
        var results: [Bool] = []
        results.append(pairing.read([subscribe]))
        results.append(pairing.read([unsubscribe]))
        results.append(pairing.read([junk]))
        results.append(pairing.read([subscribe]))  // queued behind the junk: its grant would land elsewhere
        pairing.drained()
        results.append(pairing.read([subscribe]))
        results.append(pairing.read([subscribe, junk]))  // a later frame that is not a subscription shifts it too
        pairing.drained()
        results.append(pairing.read([ZMQMessage()]))  // an empty frame is not a subscription
        pairing.drained()
        pairing.lost()
        results.append(pairing.read([subscribe]))
        #expect(results == [true, true, false, false, true, false, false, false])
    }

    @Test func aThrottledLogLineReportsWhatWasHeldBack() {
        var throttle = LogThrottle()
        let start = MonotonicTime(milliseconds: 10_000)
        var results: [Int?] = []
        results.append(throttle.admit("refused", now: start))
        results.append(throttle.admit("refused", now: start.adding(milliseconds: 10)))
        results.append(throttle.admit("refused", now: start.adding(milliseconds: 999)))
        results.append(throttle.admit("other", now: start.adding(milliseconds: 999)))  // kinds are throttled apart
        results.append(throttle.admit("refused", now: start.adding(milliseconds: 1000)))
        results.append(throttle.admit("refused", now: start.adding(milliseconds: 2000)))
        #expect(results == [0, nil, nil, 0, 2, 0])
    }
}
