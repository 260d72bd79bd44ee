import BeaconJournal
import Foundation

/// A point on the monotonic clock (`CLOCK_MONOTONIC`), in milliseconds. Every interval, deadline
/// and rate in the daemon is measured on it, so that a step of the wall clock (an NTP correction,
/// a board setting its time after boot) moves none of them; wall time is only for what is
/// journaled. Its arithmetic saturates instead of trapping.
package struct MonotonicTime: Comparable, Hashable, Sendable {
    /// Milliseconds since an arbitrary start (boot, on Linux).
    package var milliseconds: UInt64

    package init(milliseconds: UInt64) { self.milliseconds = milliseconds }

    /// The time now.
    package static func now() -> MonotonicTime {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return MonotonicTime(milliseconds: UInt64(spec.tv_sec) &* 1000 &+ UInt64(spec.tv_nsec) / 1_000_000)
    }

    /// Later than any time the daemon will see.
    package static let distantFuture = MonotonicTime(milliseconds: .max)

    /// This time `milliseconds` later (saturating).
    package func adding(milliseconds interval: UInt64) -> MonotonicTime {
        let (sum, overflow) = milliseconds.addingReportingOverflow(interval)
        return MonotonicTime(milliseconds: overflow ? .max : sum)
    }

    /// Milliseconds from this time until `later`; 0 if `later` has passed.
    package func milliseconds(until later: MonotonicTime) -> UInt64 {
        later.milliseconds > milliseconds ? later.milliseconds - milliseconds : 0
    }

    package static func < (lhs: MonotonicTime, rhs: MonotonicTime) -> Bool { lhs.milliseconds < rhs.milliseconds }
}

/// Where the daemon reads the time: the monotonic clock its timers, TTLs, sessions, back-offs and
/// rates run on, and the wall clock of what it journals (timestamps, a TTL's end as users read it).
///
/// The daemon reads no clock but this one, so that a test can drive time by hand.
package protocol DaemonClock: AnyObject, Sendable {
    /// The monotonic time now.
    func now() -> MonotonicTime
    /// The wall time now, in milliseconds since the Unix epoch.
    func wallMilliseconds() -> UInt64
}

/// The machine's clocks: `CLOCK_MONOTONIC` and `CLOCK_REALTIME`.
package final class SystemClock: DaemonClock {
    package static let shared = SystemClock()

    package init() {}

    package func now() -> MonotonicTime { MonotonicTime.now() }

    package func wallMilliseconds() -> UInt64 { Journal.nowMilliseconds() }
}
