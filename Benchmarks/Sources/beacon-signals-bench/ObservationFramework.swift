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

    func reasonToSkip(layers: Int, fanIn: Int) -> String? {
        // A derived value computed inside another's tracking adds what it read to the outer
        // tracking, so every node observes all its ancestors: the 500-layer graph takes minutes
        // per run.
        layers > 100 ? "nested tracking makes every node observe all its ancestors" : nil
    }

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

    /// What Observation tracks of a derived value. Not generic: a key path into a generic class
    /// is instantiated at run time on every use, slowly.
    class DerivedBase: Observable {
        let registrar = ObservationRegistrar()
        /// Stands for the derived value in the registrar.
        var token: Int { 0 }
    }

    /// A cached derived value: recomputed on the first read after a dependency changed.
    final class Derived<Value>: DerivedBase {
        private let body: () -> Value
        private var cached: Value?

        init(_ body: @escaping () -> Value) {
            self.body = body
        }

        var value: Value {
            registrar.access(self as DerivedBase, keyPath: \DerivedBase.token)
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
            registrar.withMutation(of: self as DerivedBase, keyPath: \DerivedBase.token) {
                cached = nil
            }
        }
    }

    /// Runs its body and runs it again, at the end of the write or batch, after a change.
    final class Effect {
        private let body: () -> Void
        private unowned let framework: ObservationFramework
        private(set) var isDisposed = false
        /// Waiting to run. One registration can report a change more than once (through a
        /// value and through a derived value it read), and each would otherwise add a run.
        var isScheduled = false

        init(_ body: @escaping () -> Void, framework: ObservationFramework) {
            self.body = body
            self.framework = framework
        }

        func run() {
            isScheduled = false
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
        if effect.isScheduled {
            return
        }
        effect.isScheduled = true
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
