import BeaconLocking

extension Signal {
    /// The signal's values as an `AsyncSequence`: the current value first, then each change.
    /// Iterate it in the isolation domain that owns the signal (the iterator's effect runs
    /// there); a slow consumer receives every change in order. Cancelling the task ends it.
    ///
    /// - Returns: the sequence.
    public func values() -> SignalValues<Value> {
        SignalValues(signal: self)
    }
}

/// The values of a signal, current first. See `Signal.values()`.
public struct SignalValues<Value>: AsyncSequence {
    public typealias Element = Value
    public typealias Failure = Never

    let signal: Signal<Value>

    public func makeAsyncIterator() -> Iterator {
        Iterator(state: IteratorState(signal: signal))
    }

    /// Iterates the values of a signal.
    public struct Iterator: AsyncIteratorProtocol {
        let state: IteratorState<Value>

        public mutating func next(isolation actor: isolated (any Actor)?) async -> Value? {
            await state.next(isolation: actor)
        }

        public mutating func next() async -> Value? {
            await state.next(isolation: nil)
        }
    }

    /// The waiting consumer, shared with the cancellation handler.
    final class WaiterBox: Sendable {
        struct Waiter {
            var continuation: CheckedContinuation<Void, Never>?
            var isCancelled = false
        }

        private let state = Locked<Waiter>(Waiter())

        func withLock<R>(_ body: (inout Waiter) -> R) -> R {
            state.withLock { body(&$0) }
        }
    }

    /// The buffer and waiter behind an iterator.
    public final class IteratorState<V> {
        private let signal: Signal<V>
        private var watcher: Effect?
        private var buffer: [V] = []
        private var bufferHead = 0
        private let waiter = WaiterBox()

        init(signal: Signal<V>) {
            self.signal = signal
        }

        func next(isolation actor: isolated (any Actor)?) async -> V? {
            if watcher == nil && !waiter.withLock({ $0.isCancelled }) {
                watcher = effect { [unowned self] in
                    let current = self.signal.value
                    self.buffer.append(current)
                    let continuation = self.waiter.withLock { state -> CheckedContinuation<Void, Never>? in
                        defer { state.continuation = nil }
                        return state.continuation
                    }
                    continuation?.resume()
                }
            }
            while true {
                if bufferHead < buffer.count {
                    let value = buffer[bufferHead]
                    bufferHead += 1
                    if bufferHead > 64 && bufferHead * 2 > buffer.count {
                        buffer.removeFirst(bufferHead)
                        bufferHead = 0
                    }
                    return value
                }
                if waiter.withLock({ $0.isCancelled }) || Task.isCancelled {
                    watcher?.dispose()
                    watcher = nil
                    return nil
                }
                await withTaskCancellationHandler {
                    await withCheckedContinuation(isolation: actor) { (continuation: CheckedContinuation<Void, Never>) in
                        let resumeNow = waiter.withLock { state -> Bool in
                            if state.isCancelled { return true }
                            state.continuation = continuation
                            return false
                        }
                        if resumeNow {
                            continuation.resume()
                        }
                    }
                } onCancel: { [waiter] in
                    let continuation = waiter.withLock { state -> CheckedContinuation<Void, Never>? in
                        state.isCancelled = true
                        defer { state.continuation = nil }
                        return state.continuation
                    }
                    continuation?.resume()
                }
            }
        }

        deinit {
            watcher?.dispose()
        }
    }
}
