import Foundation

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
    /// Open the publish socket anew (``ServerLoop/resetPublisherSoon(now:)``).
    case publisherReset
    /// Bind the publish endpoints that could not be bound when the socket was opened anew.
    case publisherRebind
}

/// Timers: one min-heap by monotonic deadline, ties in the order they were set. The loop keeps
/// one of ``LoopTimer``s, the write path one of expiries and session ends. Loop thread only.
struct TimerQueue<Timer> {
    private struct Item {
        var at: MonotonicTime
        /// Breaks ties in the order timers were set.
        var sequence: UInt64
        var timer: Timer

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
    mutating func schedule(_ timer: Timer, at time: MonotonicTime) {
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
    mutating func popDue(at now: MonotonicTime) -> (timer: Timer, at: MonotonicTime)? {
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
