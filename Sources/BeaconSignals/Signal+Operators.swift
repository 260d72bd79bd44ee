/// A read-only signal that keeps the effect feeding it alive (debounce, throttle, merge …).
final class DerivedSignal<Value>: Signal<Value> {
    let storage: MutableSignal<Value>
    var feeds: [any Disposable] = []
    /// Event signals feeding this one (their observers hold it weakly).
    var sources: [AnyObject] = []

    init(_ initialValue: Value, equals: ((Value, Value) -> Bool)?) {
        storage = MutableSignal(initialValue, equals: equals)
        super.init(flags: 0)
    }

    override var value: Value { storage.value }
    override func peek() -> Value { storage.peek() }

    deinit {
        for feed in feeds {
            feed.dispose()
        }
    }
}

extension Signal {
    /// Calls `handler` with every new value (not the current one) until the token is disposed.
    /// The handler runs untracked, like an effect's body would with `untracked`.
    ///
    /// - Parameter handler: receives each new value.
    /// - Returns: the observing effect; dispose it (or drop it) to stop.
    public func onValue(_ handler: @escaping (Value) -> Void) -> Effect {
        var isFirst = true
        return effect {
            let current = self.value
            if isFirst {
                isFirst = false
                return
            }
            untracked { handler(current) }
        }
    }

    /// A view of this signal whose observers receive the current value at once, then changes
    /// (Flow's `atOnce()`).
    ///
    /// - Returns: the view; call `onValue` on it.
    public func atOnce() -> AtOnceSignal<Value> {
        AtOnceSignal(signal: self)
    }

    /// Every change of this signal as an event.
    ///
    /// - Returns: an event signal that fires each new value (not the current one).
    public func changes() -> EventSignal<Value> {
        let events = EventSignal<Value>()
        let feed = onValue { [weak events] in events?.fire($0) }
        events.retain(feed)
        return events
    }

    /// A signal of `transform` applied to this signal's value.
    ///
    /// - Parameter transform: maps the value.
    /// - Returns: a computed signal.
    public func map<Output>(_ transform: @escaping (Value) -> Output) -> Computed<Output> {
        computed { transform(self.value) }
    }

    /// A signal of `transform` applied to this signal's value, with equality cut-off.
    ///
    /// - Parameter transform: maps the value.
    /// - Returns: a computed signal.
    public func map<Output: Equatable>(_ transform: @escaping (Value) -> Output) -> Computed<Output> {
        computed { transform(self.value) }
    }

    /// A signal that changes only when `isSame` says the value differs from the last one.
    ///
    /// - Parameter isSame: compares the previous and the new value.
    /// - Returns: a computed signal.
    public func distinct(by isSame: @escaping (Value, Value) -> Bool) -> Computed<Value> {
        computed(equals: isSame) { self.value }
    }

    /// The latest value that satisfied `isIncluded`; `initial` until one does.
    ///
    /// - Parameters:
    ///   - initial: the value before any value passes.
    ///   - isIncluded: the predicate.
    /// - Returns: a read-only signal.
    public func filter(initial: Value, _ isIncluded: @escaping (Value) -> Bool) -> Signal<Value> {
        let current = peek()
        let derived = DerivedSignal(isIncluded(current) ? current : initial, equals: nil)
        derived.feeds.append(onValue { [weak derived] value in
            if isIncluded(value) { derived?.storage.value = value }
        })
        return derived
    }

    /// The previous and the current value (`previous` is `nil` until the first change).
    ///
    /// - Returns: a read-only signal of pairs.
    public func latestTwo() -> Signal<(previous: Value?, current: Value)> {
        let derived = DerivedSignal<(previous: Value?, current: Value)>((nil, peek()), equals: nil)
        derived.feeds.append(onValue { [weak derived] value in
            guard let derived else { return }
            derived.storage.value = (derived.storage.peek().current, value)
        })
        return derived
    }

    /// Whichever of this signal and `other` changed last.
    ///
    /// - Parameter other: the second signal.
    /// - Returns: a read-only signal, starting at this signal's value.
    public func merge(_ other: Signal<Value>) -> Signal<Value> {
        let derived = DerivedSignal(peek(), equals: nil)
        derived.feeds.append(onValue { [weak derived] in derived?.storage.value = $0 })
        derived.feeds.append(other.onValue { [weak derived] in derived?.storage.value = $0 })
        return derived
    }

    /// The value of the signal `transform` picks from this signal's value; switching follows
    /// this signal, so the previous inner signal stops mattering (dynamic dependencies).
    ///
    /// - Parameter transform: picks an inner signal.
    /// - Returns: a computed signal.
    public func flatMapLatest<Output>(_ transform: @escaping (Value) -> Signal<Output>) -> Computed<Output> {
        computed { transform(self.value).value }
    }

    /// The value, once it has stayed unchanged for `interval`.
    ///
    /// - Parameters:
    ///   - interval: the quiet time required.
    ///   - scheduler: the clock and timer (a `ManualScheduler` in tests).
    /// - Returns: a read-only signal starting at the current value.
    public func debounce(_ interval: Duration, scheduler: any SignalScheduler) -> Signal<Value> {
        let derived = DerivedSignal(peek(), equals: nil)
        let events = changes().debounce(interval, scheduler: scheduler)
        derived.feeds.append(events.observe { [weak derived] in derived?.storage.value = $0 })
        derived.sources.append(events)
        return derived
    }

    /// The value, changing at most once per `interval` (first change at once, the latest of
    /// the rest when the interval ends).
    ///
    /// - Parameters:
    ///   - interval: the minimum time between changes.
    ///   - scheduler: the clock and timer (a `ManualScheduler` in tests).
    /// - Returns: a read-only signal starting at the current value.
    public func throttle(_ interval: Duration, scheduler: any SignalScheduler) -> Signal<Value> {
        let derived = DerivedSignal(peek(), equals: nil)
        let events = changes().throttle(interval, scheduler: scheduler)
        derived.feeds.append(events.observe { [weak derived] in derived?.storage.value = $0 })
        derived.sources.append(events)
        return derived
    }
}

extension Signal where Value: Equatable {
    /// A signal that changes only when the value differs (by `==`) from the last one.
    ///
    /// - Returns: a computed signal.
    public func distinct() -> Computed<Value> {
        computed { self.value }
    }
}

/// Both values, recomputed when either changes.
///
/// - Parameters:
///   - first: the first signal.
///   - second: the second signal.
/// - Returns: a computed signal of pairs.
public func combineLatest<A, B>(_ first: Signal<A>, _ second: Signal<B>) -> Computed<(A, B)> {
    computed { (first.value, second.value) }
}

/// All three values, recomputed when any changes.
///
/// - Parameters:
///   - first: the first signal.
///   - second: the second signal.
///   - third: the third signal.
/// - Returns: a computed signal of triples.
public func combineLatest<A, B, C>(_ first: Signal<A>, _ second: Signal<B>, _ third: Signal<C>) -> Computed<(A, B, C)> {
    computed { (first.value, second.value, third.value) }
}

/// A view of a signal whose observers get the current value first (`signal.atOnce()`).
public struct AtOnceSignal<Value> {
    let signal: Signal<Value>

    /// Calls `handler` with the current value now and with every new value after.
    ///
    /// - Parameter handler: receives the values.
    /// - Returns: the observing effect; dispose it (or drop it) to stop.
    public func onValue(_ handler: @escaping (Value) -> Void) -> Effect {
        effect {
            let current = signal.value
            untracked { handler(current) }
        }
    }
}
