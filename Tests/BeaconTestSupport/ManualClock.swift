import BeaconDaemon
import BeaconLocking

/// A clock that moves only when a test moves it: the daemon's timers, TTLs, sessions and back-off
/// read it instead of the machine's clocks (``DaemonClock``). Both of its clocks move together.
package final class ManualClock: DaemonClock {
    private let time: Locked<(monotonic: UInt64, wall: UInt64)>

    /// A clock at monotonic time `monotonicMilliseconds` and wall time `wallMilliseconds`.
    package init(monotonicMilliseconds: UInt64 = 1_000_000, wallMilliseconds: UInt64 = 1_800_000_000_000) {
        time = Locked((monotonicMilliseconds, wallMilliseconds))
    }

    package func now() -> MonotonicTime {
        MonotonicTime(milliseconds: time.withLock { $0.monotonic })
    }

    package func wallMilliseconds() -> UInt64 {
        time.withLock { $0.wall }
    }

    /// Moves both clocks `milliseconds` on.
    package func advance(milliseconds: UInt64) {
        time.withLock {
            $0.monotonic += milliseconds
            $0.wall += milliseconds
        }
    }
}
