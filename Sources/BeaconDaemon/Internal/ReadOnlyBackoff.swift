/// The read-only period after a failed commit: writes are refused for a while, reads go on.
/// Each failure starts the period again; a commit that succeeds clears the reason it names.
struct ReadOnlyBackoff {
    /// How long writes are refused after a failed commit.
    static let periodMilliseconds: UInt64 = 1000

    /// Writes are refused until then.
    private(set) var until = MonotonicTime(milliseconds: 0)
    /// Why the last commit failed; nil once one succeeds.
    private(set) var reason: String?

    /// Whether writes are refused at `now`. Cheap when no commit ever failed (no clock read needed
    /// by the caller: `mayBeActive` first).
    func isActive(at now: MonotonicTime) -> Bool { until > now }

    /// Whether a commit has ever failed, so that the clock is worth reading.
    var mayBeActive: Bool { until.milliseconds > 0 }

    /// A commit failed at `now` with `reason`: refuse writes for a period from now.
    /// - Returns: when the period ends.
    @discardableResult
    mutating func failed(_ reason: String, at now: MonotonicTime) -> MonotonicTime {
        self.reason = reason
        until = now.adding(milliseconds: Self.periodMilliseconds)
        return until
    }

    /// A commit succeeded.
    mutating func succeeded() { reason = nil }
}
