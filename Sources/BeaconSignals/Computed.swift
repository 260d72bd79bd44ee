/// A derived signal: lazy, cached, with dependencies tracked automatically.
///
/// Made by `computed { … }`. The closure runs the first time the value is read and afterwards
/// only when a signal it read last time has really changed. A new result equal to the cached one
/// (by `==`, or the `equals` closure) stops propagation there. Nobody watching it, a computed
/// holds no subscriptions and can be freed like any object.
public final class Computed<Value>: Signal<Value> {
    @exclusivity(unchecked) @usableFromInline var cached: Value?
    /// Runs the user's closure, compares with `cached` and stores; returns whether it changed.
    /// Built where the computed is created, so it is specialised for `Value`.
    /// Not optional: reading an optional closure through generic code re-abstracts it, which
    /// allocates on every evaluation. A `let`, so that calling it needs no retain of its context.
    @usableFromInline let compute: (Computed<Value>) -> Bool
    /// For computeds over `Result`: the value a cycle produces instead of trapping; it also
    /// records the read (see `trackCycleRead`).
    @exclusivity(unchecked) @usableFromInline var cycleValue: (() -> Value)?
    /// Declared last, so destroyed last (Swift destroys stored properties in declaration order,
    /// after every `deinit` body): it drains the releases this computed queued, see `deinit`.
    private let drainAfterTeardown = DrainReleasesOnDestroy()

    @usableFromInline
    init(compute: @escaping (Computed<Value>) -> Bool) {
        self.compute = compute
        super.init(flags: NodeFlags.computed)
    }

    /// A computed whose changes are judged by `==`, called directly rather than through an
    /// `equals` closure (one closure call and one retain fewer per recomputation).
    @inlinable
    static func make(_ body: @escaping () -> Value) -> Computed<Value> where Value: Equatable {
        Computed(compute: { node in
            let newValue = body()
            if node.flags & NodeFlags.evaluated != 0, node.cached.unsafelyUnwrapped == newValue {
                return false
            }
            node.cached = newValue
            return true
        })
    }

    @inlinable
    static func make(_ body: @escaping () -> Value, equals: ((Value, Value) -> Bool)?) -> Computed<Value> {
        Computed(compute: { node in
            let newValue = body()
            if let equals, node.flags & NodeFlags.evaluated != 0, equals(node.cached.unsafelyUnwrapped, newValue) {
                return false
            }
            node.cached = newValue
            return true
        })
    }

    /// The current value, recomputed first if a dependency changed. Inside a `computed` or
    /// `effect`, reading it tracks a dependency.
    @inlinable
    public override var value: Value {
        // Always inlined into the reader: the common path is a few loads and compares, and a
        // call's prologue and epilogue were a third of a read (the slow paths stay out of line).
        @inline(__always) get {
            let context = ReactiveContext.current
            if let cycle = bringUpToDate(context) {
                return cycle
            }
            if let sub = context.activeSub {
                context.track(node, by: sub)
            }
            return cached.unsafelyUnwrapped
        }
    }

    /// The current value, recomputed first if a dependency changed, read without tracking.
    @inlinable
    public override func peek() -> Value {
        let context = ReactiveContext.current
        if !context.isUpToDate(node) {
            if flags & NodeFlags.computing != 0, let cycleValue {
                return untracked(cycleValue)
            }
            context.refresh(node)
        }
        return cached.unsafelyUnwrapped
    }

    /// Recomputes if needed; returns the cycle value when a throwing computed is read while it
    /// computes (or is being validated). `refresh` traps on a cycle through any other computed.
    @inlinable @inline(__always)
    func bringUpToDate(_ context: ReactiveContext) -> Value? {
        if !context.isUpToDate(node) {
            if flags & NodeFlags.computing != 0, let cycleValue {
                return cycleValue()
            }
            context.refresh(node)
        }
        return nil
    }

    /// Records a read of this computed while it computes: the running evaluation depends on it
    /// like on any other read (unless it is this computed itself), so that its next value
    /// reaches the reader once the cycle breaks.
    func trackCycleRead(_ context: ReactiveContext) {
        if let sub = context.activeSub, sub != node {
            context.track(node, by: sub)
        }
    }

    @usableFromInline
    override func reevaluate(_ context: ReactiveContext) -> Bool {
        let node = self.node
        let changed = context.evaluate(node, owner: nil) { compute(self) }
        if changed {
            node.version &+= 1
        }
        return changed
    }

    deinit {
        // The closure may hold the previous link of a long chain. The release loop gets a
        // reference to it, and `ReactiveNode.deinit` leaves the releases of this node's
        // dependencies queued; `drainAfterTeardown`, destroyed after the closure property, runs
        // the loop. So the loop, not this deinit, frees what the closure captured, and freeing a
        // chain never recurses.
        ReactiveContext.current.dropLater(compute)
    }
}

/// Runs the context's release loop when destroyed: the last stored property of a `Computed`.
@usableFromInline
struct DrainReleasesOnDestroy: ~Copyable {
    @usableFromInline
    init() {}

    deinit {
        ReactiveContext.current.drainReleases()
    }
}

/// A derived signal whose changes are judged by `==`.
///
/// - Parameter body: computes the value from other signals; runs lazily.
/// - Returns: a read-only signal of the result.
@inlinable
public func computed<Value: Equatable>(_ body: @escaping () -> Value) -> Computed<Value> {
    Computed.make(body)
}

/// A derived signal whose every recomputation counts as a change.
///
/// - Parameter body: computes the value from other signals; runs lazily.
/// - Returns: a read-only signal of the result.
@inlinable
public func computed<Value>(_ body: @escaping () -> Value) -> Computed<Value> {
    Computed.make(body, equals: nil)
}

/// A derived signal whose changes are judged by `equals`.
///
/// - Parameters:
///   - equals: returns `true` when the new result should count as unchanged.
///   - body: computes the value from other signals; runs lazily.
/// - Returns: a read-only signal of the result.
@inlinable
public func computed<Value>(
    equals: @escaping (Value, Value) -> Bool,
    _ body: @escaping () -> Value
) -> Computed<Value> {
    Computed.make(body, equals: equals)
}

/// A derived signal whose computation may throw. The error is cached like a value and given to
/// every reader (`try signal.get()`) until a dependency changes.
///
/// A throwing computed that reads itself gets `SignalError.Code.cycle` instead of trapping.
///
/// - Parameter body: computes the value from other signals; runs lazily.
/// - Returns: a read-only signal of the outcome.
@inlinable
public func computed<Value: Equatable>(
    _ body: @escaping () throws -> Value
) -> Computed<Result<Value, any Error>> {
    fallibleComputed(body) { $0 == $1 }
}

/// A derived signal whose computation may throw; every successful recomputation counts as a
/// change. See `computed(_:)` for errors.
///
/// - Parameter body: computes the value from other signals; runs lazily.
/// - Returns: a read-only signal of the outcome.
@inlinable
public func computed<Value>(
    _ body: @escaping () throws -> Value
) -> Computed<Result<Value, any Error>> {
    fallibleComputed(body, equals: nil)
}

@usableFromInline
func fallibleComputed<Value>(
    _ body: @escaping () throws -> Value,
    equals: ((Value, Value) -> Bool)?
) -> Computed<Result<Value, any Error>> {
    let node = Computed<Result<Value, any Error>>.make(
        { Result { try body() } },
        equals: { old, new in
            // Errors always propagate, but for a cycle that stands: `.cycle` again is no change,
            // so that a standing cycle settles. Successes compare by `equals`.
            switch (old, new) {
            case (.success(let a), .success(let b)):
                guard let equals else { return false }
                return equals(a, b)
            case (.failure(let a as SignalError), .failure(let b as SignalError)):
                return a.code == .cycle && b.code == .cycle
            default:
                return false
            }
        }
    )
    node.cycleValue = { [unowned(unsafe) node] in
        // Runs only while `node` computes, so it is alive.
        node.trackCycleRead(ReactiveContext.current)
        return .failure(SignalError(.cycle, "a computed signal read itself while computing its value"))
    }
    node.flags |= NodeFlags.fallible
    return node
}

extension Signal {
    /// The value of a fallible signal, or its error.
    ///
    /// - Returns: the success value.
    /// - Throws: the error the computation threw (cached until a dependency changes).
    @inlinable
    public func get<Success>() throws -> Success where Value == Result<Success, any Error> {
        try value.get()
    }
}
