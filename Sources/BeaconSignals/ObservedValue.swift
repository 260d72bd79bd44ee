import Observation

/// A signal seen through Swift's Observation framework: SwiftUI views and
/// `withObservationTracking` that read `value` are told when that one signal changes.
///
/// ```swift
/// let count = MutableSignal(0)
/// let observed = count.observable()
/// withObservationTracking { _ = observed.value } onChange: { print("changed") }
/// count.value = 1   // prints "changed"
/// ```
public final class ObservedValue<Value>: Observable {
    private let registrar = ObservationRegistrar()
    private var current: Value
    private var watcher: Effect?

    init(signal: Signal<Value>) {
        current = signal.peek()
        watcher = signal.onValue { [weak self] newValue in
            guard let self else { return }
            self.registrar.withMutation(of: self, keyPath: \.value) {
                self.current = newValue
            }
        }
    }

    /// The signal's latest value; reading it registers with Observation tracking.
    public var value: Value {
        registrar.access(self, keyPath: \.value)
        return current
    }

    deinit {
        watcher?.dispose()
    }
}

extension Signal {
    /// This signal as an `Observable` object for SwiftUI and `withObservationTracking`.
    ///
    /// - Returns: an object whose `value` follows the signal.
    public func observable() -> ObservedValue<Value> {
        ObservedValue(signal: self)
    }
}
