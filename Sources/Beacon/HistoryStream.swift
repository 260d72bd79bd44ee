import Foundation

/// The changes ``BeaconClient/history(of:exact:from:)`` streams: an `AsyncSequence` of
/// ``HistoryEvent``, in revision order.
///
/// The client's I/O thread hands changes over a page at a time, and the iterator returns them
/// one by one from the page it holds: one hand-off between threads per page, not per change.
///
/// The stream ends when the client is closed, and when the task iterating it is cancelled or
/// every copy of the stream and of its iterators is gone (the client then stops following).
public struct HistoryStream: AsyncSequence, Sendable {
    public typealias Element = HistoryEvent

    private let consumer: Consumer

    init(_ feed: HistoryFeed) {
        consumer = Consumer(feed)
    }

    public func makeAsyncIterator() -> Iterator {
        Iterator(consumer: consumer)
    }

    /// Iterates a ``HistoryStream``.
    public struct Iterator: AsyncIteratorProtocol {
        private let consumer: Consumer
        private var page: [HistoryEvent] = []
        private var index = 0

        init(consumer: Consumer) {
            self.consumer = consumer
        }

        /// The next change; `nil` once the stream ended; throws the error it ended with.
        public mutating func next() async throws -> HistoryEvent? {
            if index < page.count {
                index += 1
                return page[index - 1]
            }
            guard let next = try await consumer.feed.nextPage() else { return nil }
            page = next
            index = 1
            return next[0]
        }
    }

    /// Held by the stream and its iterators: once none is left, nobody reads the feed.
    final class Consumer: Sendable {
        let feed: HistoryFeed

        init(_ feed: HistoryFeed) {
            self.feed = feed
        }

        deinit {
            feed.cancel()
        }
    }
}

/// What passes between the I/O thread (``yield(_:)``, ``finish(throwing:)``) and the task
/// iterating a ``HistoryStream`` (``nextPage()``): pages of changes, under a lock.
final class HistoryFeed: @unchecked Sendable {
    private enum Ending {
        case finished
        case failed(any Error)
        case cancelled
    }

    // NSLock rather than Mutex: ThreadSanitizer sees pthread locks, not the stdlib's futex.
    private let lock = NSLock()
    /// Changes handed over and not yet taken.
    private var buffered: [HistoryEvent] = []
    /// The task waiting for a page, if it is.
    private var waiter: CheckedContinuation<[HistoryEvent]?, any Error>?
    private var ending: Ending?
    /// Called once when the consumer goes away or is cancelled (not when the feed finishes).
    private var onCancel: (@Sendable () -> Void)?

    /// Sets what cancelling does; it runs at once if the consumer has already gone.
    func setOnCancel(_ action: @escaping @Sendable () -> Void) {
        lock.lock()
        if case .cancelled = ending {
            lock.unlock()
            action()
            return
        }
        onCancel = action
        lock.unlock()
    }

    /// Hands `events` to the consumer (dropped once the stream ended).
    func yield(_ events: [HistoryEvent]) {
        guard !events.isEmpty else { return }
        lock.lock()
        guard ending == nil else {
            lock.unlock()
            return
        }
        if let waiter {
            self.waiter = nil
            lock.unlock()
            waiter.resume(returning: events)
            return
        }
        buffered.append(contentsOf: events)
        lock.unlock()
    }

    /// Ends the stream after what was handed over: normally, or with `error`.
    func finish(throwing error: (any Error)? = nil) {
        lock.lock()
        guard ending == nil else {
            lock.unlock()
            return
        }
        ending = error.map { .failed($0) } ?? .finished
        onCancel = nil
        let waiter = buffered.isEmpty ? self.waiter : nil
        if waiter != nil { self.waiter = nil }
        lock.unlock()
        guard let waiter else { return }
        if let error { waiter.resume(throwing: error) } else { waiter.resume(returning: nil) }
    }

    /// The consumer is gone or was cancelled: the stream ends, and the producer is told once.
    func cancel() {
        lock.lock()
        if case .cancelled = ending {
            lock.unlock()
            return
        }
        let wasOpen = ending == nil
        ending = .cancelled
        buffered = []
        let waiter = self.waiter
        self.waiter = nil
        let action = wasOpen ? onCancel : nil
        onCancel = nil
        lock.unlock()
        waiter?.resume(returning: nil)
        action?()
    }

    /// The changes handed over since the last call, waiting for some; `nil` once the stream ended.
    func nextPage() async throws -> [HistoryEvent]? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<[HistoryEvent]?, any Error>) in
                lock.lock()
                if !buffered.isEmpty {
                    let page = buffered
                    buffered = []
                    lock.unlock()
                    continuation.resume(returning: page)
                    return
                }
                switch ending {
                case nil:
                    waiter = continuation
                    lock.unlock()
                case .failed(let error):
                    ending = .finished  // thrown once; then the stream just ends
                    lock.unlock()
                    continuation.resume(throwing: error)
                case .finished, .cancelled:
                    lock.unlock()
                    continuation.resume(returning: nil)
                }
            }
        } onCancel: {
            cancel()
        }
    }
}
