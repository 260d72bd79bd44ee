/// Keeps the log lines that outside peers can cause (refused connections and subscriptions) from
/// flooding the log: at most one line a second of each kind, reporting how many were held back
/// since the last. State only; loop thread only.
struct LogThrottle {
    private struct Kind {
        var nextLine: MonotonicTime
        var heldBack: Int
    }

    /// The shortest time between two lines of one kind.
    static let intervalMilliseconds: UInt64 = 1000

    private var kinds: [String: Kind] = [:]

    /// Whether a line of `kind` may be logged at `now`.
    /// - Returns: how many lines of that kind were held back since the last one logged (log it
    ///   with the line), or `nil` to hold this one back.
    mutating func admit(_ kind: String, now: MonotonicTime) -> Int? {
        guard var entry = kinds[kind] else {
            kinds[kind] = Kind(nextLine: now.adding(milliseconds: Self.intervalMilliseconds), heldBack: 0)
            return 0
        }
        guard entry.nextLine <= now else {
            entry.heldBack += 1
            kinds[kind] = entry
            return nil
        }
        defer { kinds[kind] = Kind(nextLine: now.adding(milliseconds: Self.intervalMilliseconds), heldBack: 0) }
        return entry.heldBack
    }
}
