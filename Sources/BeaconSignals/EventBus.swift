/// Events addressed by key: each listener is registered at most once per key, so registering
/// again replaces the earlier registration instead of doubling deliveries.
///
/// ```swift
/// let bus = EventBus<String, Int>()
/// bus.listen(to: "battery", listener: self) { print($0) }
/// bus.post(42, to: "battery")
/// ```
public final class EventBus<Key: Hashable, Event> {
    private struct Registration {
        weak var listener: AnyObject?
        let handler: (Event) -> Void
    }

    private var registrations: [Key: [ObjectIdentifier: Registration]] = [:]

    /// An empty bus.
    public init() {}

    /// Registers `listener` for `key`, replacing its earlier registration for that key.
    ///
    /// - Parameters:
    ///   - key: the address.
    ///   - listener: the registering object; the registration ends when it is freed.
    ///   - handler: receives the events posted to `key`.
    public func listen(to key: Key, listener: AnyObject, _ handler: @escaping (Event) -> Void) {
        registrations[key, default: [:]][ObjectIdentifier(listener)] = Registration(listener: listener, handler: handler)
    }

    /// Removes `listener`'s registration for `key`.
    ///
    /// - Parameters:
    ///   - key: the address.
    ///   - listener: the registered object.
    public func stopListening(to key: Key, listener: AnyObject) {
        registrations[key]?[ObjectIdentifier(listener)] = nil
    }

    /// Delivers `event` to the live listeners of `key`.
    ///
    /// - Parameters:
    ///   - event: the event.
    ///   - key: the address.
    /// - Returns: how many listeners received it.
    @discardableResult
    public func post(_ event: Event, to key: Key) -> Int {
        guard let listeners = registrations[key] else { return 0 }
        var delivered = 0
        for (id, registration) in listeners {
            if registration.listener == nil {
                registrations[key]?[id] = nil
                continue
            }
            registration.handler(event)
            delivered += 1
        }
        return delivered
    }

    /// The number of live listeners of `key`.
    ///
    /// - Parameter key: the address.
    /// - Returns: the count.
    public func listenerCount(for key: Key) -> Int {
        registrations[key]?.values.filter { $0.listener != nil }.count ?? 0
    }
}
