/// What an observer of an `EventSignal` wants after handling an event.
public enum ObserverDecision: Sendable {
    /// Keep observing.
    case `continue`
    /// Stop observing; the observer is removed.
    case stop
}

/// A plain event stream with no current value: fire events, observers receive them.
///
/// ```swift
/// let taps = EventSignal<Int>()
/// let token = taps.observe { print("tap \($0)") }
/// taps.fire(1)
/// token.dispose()
/// ```
///
/// Observers can be one-shot (`observeOnce`), decide themselves when to stop
/// (`observeUntilStopped(_:)`), or be tied to an owner object and vanish with it. An event signal made
/// with `replaysLast: true` hands its latest event to each new observer ("listening in the past").
/// Like signals, event signals belong to one isolation domain.
public final class EventSignal<Event> {
    private final class Observer {
        let handler: (Event) -> ObserverDecision
        weak var owner: AnyObject?
        let hasOwner: Bool
        var isActive = true

        init(owner: AnyObject?, handler: @escaping (Event) -> ObserverDecision) {
            self.owner = owner
            self.hasOwner = owner != nil
            self.handler = handler
        }
    }

    private var observers: [Observer] = []
    private let replaysLast: Bool
    /// Keeps upstream subscriptions of derived signals alive as long as this signal.
    private var upstream: [any Disposable] = []
    /// Keeps the signals a derived signal is fed from alive as long as it (they hold it weakly).
    private var sources: [AnyObject] = []

    /// The most recent event, if `replaysLast` was requested.
    public private(set) var lastEvent: Event?

    /// An event signal.
    ///
    /// - Parameter replaysLast: whether each new observer first receives the latest event.
    public init(replaysLast: Bool = false) {
        self.replaysLast = replaysLast
    }

    /// Delivers `event` to every observer, in the order they were added.
    ///
    /// - Parameter event: the event.
    public func fire(_ event: Event) {
        if replaysLast {
            lastEvent = event
        }
        let current = observers
        var removed = false
        for observer in current where observer.isActive {
            if observer.hasOwner && observer.owner == nil {
                observer.isActive = false
                removed = true
                continue
            }
            if observer.handler(event) == .stop {
                observer.isActive = false
                removed = true
            }
        }
        if removed {
            observers.removeAll { !$0.isActive }
        }
    }

    /// Observes every event until the returned token is disposed.
    ///
    /// - Parameter handler: receives each event.
    /// - Returns: a token that removes the observer.
    @discardableResult
    public func observe(_ handler: @escaping (Event) -> Void) -> any Disposable {
        add(owner: nil) { handler($0); return .continue }
    }

    /// Observes events until `handler` returns `.stop` or the token is disposed.
    ///
    /// - Parameter handler: receives each event and decides whether to continue.
    /// - Returns: a token that removes the observer.
    @discardableResult
    public func observeUntilStopped(_ handler: @escaping (Event) -> ObserverDecision) -> any Disposable {
        add(owner: nil, handler)
    }

    /// Observes the next event only.
    ///
    /// - Parameter handler: receives one event.
    /// - Returns: a token that removes the observer before it fires.
    @discardableResult
    public func observeOnce(_ handler: @escaping (Event) -> Void) -> any Disposable {
        add(owner: nil) { handler($0); return .stop }
    }

    /// Observes events for as long as `owner` lives; observing again with the same owner adds
    /// another observer (use `EventBus` for at-most-once registration per key).
    ///
    /// - Parameters:
    ///   - owner: the observer is removed once this object is freed.
    ///   - handler: receives each event.
    /// - Returns: a token that removes the observer.
    @discardableResult
    public func observe(owner: AnyObject, _ handler: @escaping (Event) -> Void) -> any Disposable {
        add(owner: owner) { handler($0); return .continue }
    }

    /// Removes every observer registered with `owner`.
    ///
    /// - Parameter owner: the owner given to `observe(owner:_:)`.
    public func removeObservers(owner: AnyObject) {
        for observer in observers where observer.owner === owner {
            observer.isActive = false
        }
        observers.removeAll { !$0.isActive }
    }

    /// Removes every observer.
    public func removeAllObservers() {
        for observer in observers {
            observer.isActive = false
        }
        observers.removeAll()
    }

    /// The number of active observers.
    public var observerCount: Int {
        observers.filter { $0.isActive && !($0.hasOwner && $0.owner == nil) }.count
    }

    private func add(owner: AnyObject?, _ handler: @escaping (Event) -> ObserverDecision) -> any Disposable {
        let observer = Observer(owner: owner, handler: handler)
        if replaysLast, let lastEvent, handler(lastEvent) == .stop {
            return DisposeAction {}
        }
        observers.append(observer)
        return DisposeAction { [weak self, weak observer] in
            guard let observer else { return }
            observer.isActive = false
            self?.observers.removeAll { $0 === observer }
        }
    }

    /// A derived signal that owns `subscription` (made with a weak reference to the derived
    /// signal, so there is no cycle).
    func retain(_ subscription: any Disposable) {
        upstream.append(subscription)
    }

    func retainSource(_ source: AnyObject) {
        sources.append(source)
    }
}

// MARK: Operators

extension EventSignal {
    private func derive<Output>(
        _ body: @escaping (EventSignal<Output>, Event) -> Void
    ) -> EventSignal<Output> {
        let derived = EventSignal<Output>()
        let token = observe { [weak derived] event in
            if let derived { body(derived, event) }
        }
        derived.retain(token)
        derived.retainSource(self)
        return derived
    }

    /// Events transformed by `transform`.
    ///
    /// - Parameter transform: maps each event.
    /// - Returns: the derived event signal.
    public func map<Output>(_ transform: @escaping (Event) -> Output) -> EventSignal<Output> {
        derive { $0.fire(transform($1)) }
    }

    /// Events for which `isIncluded` returns `true`.
    ///
    /// - Parameter isIncluded: the predicate.
    /// - Returns: the derived event signal.
    public func filter(_ isIncluded: @escaping (Event) -> Bool) -> EventSignal<Event> {
        derive { if isIncluded($1) { $0.fire($1) } }
    }

    /// The non-nil results of `transform`.
    ///
    /// - Parameter transform: maps each event, or drops it by returning `nil`.
    /// - Returns: the derived event signal.
    public func compactMap<Output>(_ transform: @escaping (Event) -> Output?) -> EventSignal<Output> {
        derive { if let output = transform($1) { $0.fire(output) } }
    }

    /// Each event paired with the one before it (the first event has no pair and is skipped).
    ///
    /// - Returns: the derived event signal of (previous, current).
    public func latestTwo() -> EventSignal<(Event, Event)> {
        var previous: Event?
        return derive { (derived: EventSignal<(Event, Event)>, event: Event) in
            if let before = previous { derived.fire((before, event)) }
            previous = event
        }
    }

    /// Events of `self` and `other`, in the order they are fired (Rocca's union).
    ///
    /// - Parameter other: the second event signal.
    /// - Returns: the merged event signal.
    public func merge(_ other: EventSignal<Event>) -> EventSignal<Event> {
        let merged = derive { $0.fire($1) }
        merged.retain(other.observe { [weak merged] in merged?.fire($0) })
        merged.retainSource(other)
        return merged
    }

    /// For each event, the events of the signal `transform` returns, until the next event
    /// replaces it (flatMapLatest; Rocca's flatMap).
    ///
    /// - Parameter transform: picks an inner event signal for each event.
    /// - Returns: the flattened event signal.
    public func flatMapLatest<Output>(_ transform: @escaping (Event) -> EventSignal<Output>) -> EventSignal<Output> {
        // The current inner signal is kept alive here, with its subscription.
        var inner: (signal: EventSignal<Output>, token: any Disposable)?
        let flattened = EventSignal<Output>()
        let token = observe { [weak flattened] event in
            inner?.token.dispose()
            let next = transform(event)
            inner = (next, next.observe { [weak flattened] in flattened?.fire($0) })
        }
        flattened.retain(token)
        flattened.retainSource(self)
        flattened.retain(DisposeAction { inner?.token.dispose(); inner = nil })
        return flattened
    }

    /// Events held back until `interval` passes without another event; then the latest fires.
    ///
    /// - Parameters:
    ///   - interval: the quiet time required.
    ///   - scheduler: the clock and timer (a `ManualScheduler` in tests).
    /// - Returns: the debounced event signal.
    public func debounce(_ interval: Duration, scheduler: any SignalScheduler) -> EventSignal<Event> {
        var pending: (any Disposable)?
        let debounced = derive { (derived: EventSignal<Event>, event: Event) in
            pending?.dispose()
            pending = scheduler.schedule(after: interval) { [weak derived] in
                derived?.fire(event)
            }
        }
        debounced.retain(DisposeAction { pending?.dispose() })
        return debounced
    }

    /// At most one event per `interval`: the first fires at once, the latest of the rest fires
    /// when the interval ends.
    ///
    /// - Parameters:
    ///   - interval: the minimum time between events.
    ///   - scheduler: the clock and timer (a `ManualScheduler` in tests).
    /// - Returns: the throttled event signal.
    public func throttle(_ interval: Duration, scheduler: any SignalScheduler) -> EventSignal<Event> {
        var lastFire: Duration?
        var trailing: Event?
        var timer: (any Disposable)?
        let throttled = derive { (derived: EventSignal<Event>, event: Event) in
            let now = scheduler.now
            if timer == nil, lastFire.map({ now - $0 >= interval }) ?? true {
                lastFire = now
                derived.fire(event)
                return
            }
            trailing = event
            if timer == nil {
                let wait = interval - (now - (lastFire ?? now))
                timer = scheduler.schedule(after: wait) { [weak derived] in
                    timer = nil
                    if let value = trailing {
                        trailing = nil
                        lastFire = scheduler.now
                        derived?.fire(value)
                    }
                }
            }
        }
        throttled.retain(DisposeAction { timer?.dispose() })
        return throttled
    }
}

extension EventSignal where Event: Equatable {
    /// Events that differ from the one before.
    ///
    /// - Returns: the derived event signal.
    public func distinct() -> EventSignal<Event> {
        var previous: Event?
        return derive { (derived: EventSignal<Event>, event: Event) in
            if previous != event {
                previous = event
                derived.fire(event)
            }
        }
    }
}
