/// A rate over the last few seconds from samples of a growing counter. Loop thread only.
struct RateMeter {
    private var samples: [(atMilliseconds: UInt64, count: UInt64)] = []
    private let window: UInt64

    init(windowMilliseconds: UInt64 = 5000) { window = windowMilliseconds }

    /// Records the counter's value now (call it about once a second or more often).
    mutating func record(_ count: UInt64, at now: UInt64) {
        samples.append((now, count))
        while samples.count > 2, let first = samples.first, now - first.atMilliseconds > window { samples.removeFirst() }
    }

    /// Events per second between the oldest sample in the window and the newest.
    var perSecond: Double {
        guard let first = samples.first, let last = samples.last, last.atMilliseconds > first.atMilliseconds else { return 0 }
        return Double(last.count - first.count) * 1000 / Double(last.atMilliseconds - first.atMilliseconds)
    }
}
