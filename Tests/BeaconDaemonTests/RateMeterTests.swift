@testable import BeaconDaemon
import Testing
import BeaconTestSupport

@Suite(.offThePool, .timeLimit(.minutes(3)))
struct RateMeterTests {
    @Test func theRateIsTheCounterGrowthAcrossTheWindow() {
        var meter = RateMeter(windowMilliseconds: 5000)
        #expect(meter.perSecond == 0)
        meter.record(0, at: 1000)
        #expect(meter.perSecond == 0)  // one sample: no interval yet
        meter.record(500, at: 2000)
        meter.record(1500, at: 3000)
        #expect(meter.perSecond == 750)  // 1,500 over 2 s
    }

    @Test func samplesOlderThanTheWindowStopCounting() {
        var meter = RateMeter(windowMilliseconds: 5000)
        meter.record(0, at: 0)
        meter.record(10_000, at: 1000)  // a burst, then nothing
        for second in 2...10 { meter.record(10_000, at: UInt64(second) * 1000) }
        #expect(meter.perSecond == 0)  // the burst left the window
    }
}
