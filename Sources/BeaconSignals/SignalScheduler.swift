import Dispatch

/// A clock and timer for the timing operators (`debounce`, `throttle`). Actions must run in the
/// isolation domain that owns the signals.
public protocol SignalScheduler: AnyObject {
    /// Monotonic time since an arbitrary origin.
    var now: Duration { get }

    /// Runs `action` once, `delay` from now, unless the returned token is disposed first.
    ///
    /// - Parameters:
    ///   - delay: how long to wait.
    ///   - action: what to run.
    /// - Returns: a token that cancels the action.
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> any Disposable
}

/// A scheduler driven by hand, for exact tests: time moves only in `advance(by:)`.
public final class ManualScheduler: SignalScheduler {
    private struct Pending {
        let due: Duration
        let order: Int
        let token: DisposeFlag
        let action: () -> Void
    }

    private final class DisposeFlag: Disposable {
        var isDisposed = false
        func dispose() { isDisposed = true }
    }

    public private(set) var now: Duration = .zero
    private var pending: [Pending] = []
    private var counter = 0

    /// A scheduler at time zero.
    public init() {}

    public func schedule(after delay: Duration, _ action: @escaping () -> Void) -> any Disposable {
        let token = DisposeFlag()
        pending.append(Pending(due: now + max(delay, .zero), order: counter, token: token, action: action))
        counter += 1
        return token
    }

    /// Moves time forward, running due actions in time order.
    ///
    /// - Parameter interval: how far to move.
    public func advance(by interval: Duration) {
        let end = now + interval
        while true {
            let due = pending.filter { !$0.token.isDisposed && $0.due <= end }
                .min { ($0.due, $0.order) < ($1.due, $1.order) }
            guard let next = due else { break }
            pending.removeAll { $0.order == next.order }
            now = next.due
            next.action()
        }
        pending.removeAll { $0.token.isDisposed }
        now = end
    }
}

/// A scheduler on a Dispatch queue; use the queue whose thread owns the signals (for example
/// `.main` for signals used on the main actor).
public final class DispatchQueueScheduler: SignalScheduler, @unchecked Sendable {
    private let queue: DispatchQueue

    /// A scheduler that runs actions on `queue`.
    ///
    /// - Parameter queue: the queue that owns the signals.
    public init(queue: DispatchQueue) {
        self.queue = queue
    }

    public var now: Duration {
        .nanoseconds(Int64(DispatchTime.now().uptimeNanoseconds))
    }

    public func schedule(after delay: Duration, _ action: @escaping () -> Void) -> any Disposable {
        let item = DispatchWorkItem(block: action)
        let (seconds, attoseconds) = delay.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        queue.asyncAfter(deadline: .now() + .nanoseconds(nanoseconds), execute: item)
        return DisposeAction { item.cancel() }
    }
}
