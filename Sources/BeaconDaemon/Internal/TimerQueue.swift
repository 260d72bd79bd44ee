import Foundation

/// A point on the monotonic clock (`CLOCK_MONOTONIC`), in milliseconds. Every interval, deadline
/// and rate in the daemon is measured on it, so that a step of the wall clock (an NTP correction,
/// a board setting its time after boot) moves none of them; wall time is only for what is
/// journaled. Its arithmetic saturates instead of trapping.
struct MonotonicTime: Comparable, Hashable, Sendable {
    /// Milliseconds since an arbitrary start (boot, on Linux).
    var milliseconds: UInt64

    /// The time now.
    static func now() -> MonotonicTime {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return MonotonicTime(milliseconds: UInt64(spec.tv_sec) &* 1000 &+ UInt64(spec.tv_nsec) / 1_000_000)
    }

    /// Later than any time the daemon will see.
    static let distantFuture = MonotonicTime(milliseconds: .max)

    /// This time `milliseconds` later (saturating).
    func adding(milliseconds interval: UInt64) -> MonotonicTime {
        let (sum, overflow) = milliseconds.addingReportingOverflow(interval)
        return MonotonicTime(milliseconds: overflow ? .max : sum)
    }

    /// Milliseconds from this time until `later`; 0 if `later` has passed.
    func milliseconds(until later: MonotonicTime) -> UInt64 {
        later.milliseconds > milliseconds ? later.milliseconds - milliseconds : 0
    }

    static func < (lhs: MonotonicTime, rhs: MonotonicTime) -> Bool { lhs.milliseconds < rhs.milliseconds }
}

/// What the loop does when a timer comes due.
enum LoopTimer {
    /// Publish a heartbeat (and sample rates and the journal's size).
    case heartbeat
    /// Start the compaction the retention policy asks for.
    case compaction
    /// Tell systemd's watchdog the loop is alive.
    case watchdog
    /// Update the status line systemd shows.
    case status
    /// Delete `key` if it still carries the expiry this timer was set for (`expiresAtMilliseconds`,
    /// the wall-clock time journaled with it, names that expiry; `modRevision` the write).
    case expiry(key: String, modRevision: UInt64, expiresAtMilliseconds: UInt64)
    /// End `session` if no `KeepAlive` renewed it meanwhile.
    case sessionEnd(session: [UInt8])
    /// Open the publish socket anew (``BeaconServer/resetPublisherSoon(now:)``).
    case publisherReset
    /// Bind the publish endpoints that could not be bound when the socket was opened anew.
    case publisherRebind
}

/// The loop's timers: one min-heap by monotonic deadline. Timers for expiries and sessions may
/// be stale (the key was rewritten, the session renewed); the loop checks each as it comes due.
/// Loop thread only.
struct TimerQueue {
    private struct Item {
        var at: MonotonicTime
        /// Breaks ties in the order timers were set.
        var sequence: UInt64
        var timer: LoopTimer

        func isEarlier(than other: Item) -> Bool {
            at != other.at ? at < other.at : sequence < other.sequence
        }
    }

    private var heap: [Item] = []
    private var sequence: UInt64 = 0

    var count: Int { heap.count }
    /// When the next timer is due; `nil` when none is set.
    var nextDeadline: MonotonicTime? { heap.first?.at }

    /// Sets `timer` to come due at `time`.
    mutating func schedule(_ timer: LoopTimer, at time: MonotonicTime) {
        sequence += 1
        heap.append(Item(at: time, sequence: sequence, timer: timer))
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].isEarlier(than: heap[parent]) else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns the earliest timer if it is due at `now`.
    mutating func popDue(at now: MonotonicTime) -> (timer: LoopTimer, at: MonotonicTime)? {
        guard let first = heap.first, first.at <= now else { return nil }
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var earliest = parent
            if left < heap.count && heap[left].isEarlier(than: heap[earliest]) { earliest = left }
            if right < heap.count && heap[right].isEarlier(than: heap[earliest]) { earliest = right }
            if earliest == parent { break }
            heap.swapAt(parent, earliest)
            parent = earliest
        }
        return (first.timer, first.at)
    }
}
