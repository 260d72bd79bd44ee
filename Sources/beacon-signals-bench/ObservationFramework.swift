import Observation

// The cases on Swift's Observation framework, built the way an app would build them without a
// signals library: `Observable` objects with an `ObservationRegistrar`, derived values cached
// and invalidated through `withObservationTracking`, effects re-registered after each change.
// Observation has no batching and no notion of equal values: a change notifies at `willSet`,
// before the new value exists, so nothing downstream can stop a propagation that changes
// nothing. The cases therefore check values, not run counts, on it.

/// Lets the registrar's `@Sendable` change handlers reach objects of this one thread.
private struct Unchecked<T>: @unchecked Sendable {
    let value: T
}

final class ObservationFramework: BenchFramework {
    let name = "Observation"
    let exactRunCounts = false

    final class Source: Observable {
        private let registrar = ObservationRegistrar()
        private var stored: Double

        init(_ value: Double) {
            stored = value
        }

        var value: Double {
            get {
                registrar.access(self, keyPath: \.value)
                return stored
            }
            set {
                registrar.withMutation(of: self, keyPath: \.value) {
                    stored = newValue
                }
            }
        }
    }

    /// A cached derived value: recomputed on the first read after a dependency changed.
    final class Derived<Value>: Observable {
        private let registrar = ObservationRegistrar()
        private let body: () -> Value
        private var cached: Value?

        init(_ body: @escaping () -> Value) {
            self.body = body
        }

        var value: Value {
            registrar.access(self, keyPath: \.value)
            if let cached {
                return cached
            }
            let me = Unchecked(value: self)
            let fresh = withObservationTracking(body, onChange: { me.value.invalidate() })
            cached = fresh
            return fresh
        }

        private func invalidate() {
            if cached == nil {
                return
            }
            registrar.withMutation(of: self, keyPath: \.value) {
                cached = nil
            }
        }
    }

    /// Runs its body and runs it again, at the end of the write or batch, after a change.
    final class Effect {
        private let body: () -> Void
        private unowned let framework: ObservationFramework
        private(set) var isDisposed = false

        init(_ body: @escaping () -> Void, framework: ObservationFramework) {
            self.body = body
            self.framework = framework
        }

        func run() {
            if isDisposed {
                return
            }
            let me = Unchecked(value: self)
            withObservationTracking(body, onChange: { me.value.framework.schedule(me.value) })
        }

        func dispose() {
            isDisposed = true
        }
    }

    private var effects: [Effect] = []
    private var pending: [Effect] = []
    private var batchDepth = 0

    fileprivate func schedule(_ effect: Effect) {
        pending.append(effect)
    }

    private func flush() {
        while !pending.isEmpty {
            let due = pending
            pending = []
            for effect in due {
                effect.run()
            }
        }
    }

    func signal(_ value: Double) -> Source { Source(value) }
    func computed(_ body: @escaping () -> Double) -> Derived<Double> { Derived(body) }
    func computedArray(_ body: @escaping () -> [Double]) -> Derived<[Double]> { Derived(body) }
    func read(_ source: Source) -> Double { source.value }
    func read(_ derived: Derived<Double>) -> Double { derived.value }
    func read(_ derived: Derived<[Double]>) -> [Double] { derived.value }

    func write(_ source: Source, _ value: Double) {
        source.value = value
        if batchDepth == 0 {
            flush()
        }
    }

    func effect(_ body: @escaping () -> Void) {
        let effect = Effect(body, framework: self)
        effects.append(effect)
        effect.run()
    }

    func batch(_ body: () -> Void) {
        batchDepth += 1
        body()
        batchDepth -= 1
        if batchDepth == 0 {
            flush()
        }
    }

    func cleanup() {
        for effect in effects {
            effect.dispose()
        }
        effects.removeAll()
        pending.removeAll()
    }
}
