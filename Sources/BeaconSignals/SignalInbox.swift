import BeaconLocking

/// The thread-safe way into a signal graph: other threads `post` updates, the isolation domain
/// that owns the signals `drain`s them and applies them in one `batch`.
///
/// A graph belongs to one isolation domain (a thread, the main actor, an actor). An I/O thread
/// that learns of new values posts them here; `wake` (called once per empty-to-non-empty
/// transition) schedules a drain on the owner:
///
/// ```swift
/// let inbox = SignalInbox<Int>(wake: {
///     Task { @MainActor in model.applyPending() }   // applyPending calls inbox.drain
/// })
/// // I/O thread:
/// inbox.post(42)
/// // main actor:
/// inbox.drain { count.value = $0 }
/// ```
///
/// Updates are applied in the order posted, all of one drain inside one batch: a `computed`
/// never sees part of them and each effect runs once.
public final class SignalInbox<Update: Sendable>: Sendable {
    private struct State {
        var updates: [Update] = []
    }

    private let state = Locked(State())
    private let wake: @Sendable () -> Void

    /// An empty inbox.
    ///
    /// - Parameter wake: called (on the posting thread) when updates arrive in an empty inbox.
    public init(wake: @escaping @Sendable () -> Void = {}) {
        self.wake = wake
    }

    /// Adds an update; safe from any thread.
    ///
    /// - Parameter update: the update.
    public func post(_ update: Update) {
        let wasEmpty = state.withLock { state -> Bool in
            let empty = state.updates.isEmpty
            state.updates.append(update)
            return empty
        }
        if wasEmpty {
            wake()
        }
    }

    /// Applies every pending update, in order, inside one `batch`. Call it from the isolation
    /// domain that owns the signals.
    ///
    /// - Parameter apply: writes one update into the signals.
    /// - Returns: how many updates were applied.
    /// - Throws: what `apply` throws; updates after the failing one are put back.
    @discardableResult
    public func drain(_ apply: (Update) throws -> Void) rethrows -> Int {
        let taken = state.withLock { state -> [Update] in
            defer { state.updates = [] }
            return state.updates
        }
        if taken.isEmpty {
            return 0
        }
        var applied = 0
        do {
            try batch {
                for update in taken {
                    try apply(update)
                    applied += 1
                }
            }
        } catch {
            let rest = Array(taken[(applied + 1)...])
            state.withLock { $0.updates.insert(contentsOf: rest, at: 0) }
            throw error
        }
        return applied
    }

    /// The number of updates waiting.
    public var pendingCount: Int {
        state.withLock { $0.updates.count }
    }
}
