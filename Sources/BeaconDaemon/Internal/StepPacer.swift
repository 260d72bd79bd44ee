import Dispatch

/// Paces long work that the loop does in steps between requests (compaction, backup copies):
/// each step is sized to hold the loop about `targetNanoseconds`; steps run back to back while
/// the loop is otherwise idle, take no more than half of its time while requests keep coming,
/// and wait `retryNanoseconds` after a failed step. Owned by the loop thread.
struct StepPacer {
    /// How long one step should hold the loop.
    let targetNanoseconds: UInt64
    /// The sizes a step may take, in the work's own unit (rows, pages).
    let sizes: ClosedRange<Int>
    /// How much the next step does, adjusted after each step to meet the target.
    private(set) var size: Int
    /// Under load (or after a failure), no step before this time (monotonic nanoseconds).
    private var nextStepAt: UInt64 = 0
    /// Whether the last step failed: the next waits for `nextStepAt` even when the loop is idle.
    private var backingOff = false

    init(initialSize: Int, sizes: ClosedRange<Int>, targetNanoseconds: UInt64 = 8_000_000) {
        self.size = initialSize
        self.sizes = sizes
        self.targetNanoseconds = targetNanoseconds
    }

    static func monotonicNanoseconds() -> UInt64 {
        DispatchTime.now().uptimeNanoseconds
    }

    /// Nanoseconds until the next step is due (0: now); `busy` says the loop served requests
    /// in its last pass.
    func wait(busy: Bool) -> UInt64 {
        let earliest = busy || backingOff ? nextStepAt : 0
        let now = Self.monotonicNanoseconds()
        return earliest > now ? earliest - now : 0
    }

    /// New work starts: its first step is due at once.
    mutating func start() {
        nextStepAt = 0
        backingOff = false
    }

    /// A step that began at `started` (monotonic nanoseconds) is over: the next is sized towards
    /// the target (at most doubling: a quick step may have been a cheap one) and, under load,
    /// waits as long as this one took.
    mutating func stepped(startedAt started: UInt64) {
        backingOff = false
        let now = Self.monotonicNanoseconds()
        let elapsed = max(now - started, 1)
        let scaled = Double(size) * min(Double(targetNanoseconds) / Double(elapsed), 2)
        size = Int(min(max(scaled, Double(sizes.lowerBound)), Double(sizes.upperBound)))
        nextStepAt = now + elapsed
    }

    /// A step failed: the next waits `retryNanoseconds` whatever the load.
    mutating func failed(retryNanoseconds: UInt64 = 1_000_000_000) {
        nextStepAt = Self.monotonicNanoseconds() + retryNanoseconds
        backingOff = true
    }
}
