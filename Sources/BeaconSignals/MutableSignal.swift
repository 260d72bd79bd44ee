/// A writable source of the graph.
///
/// ```swift
/// let count = MutableSignal(0)
/// count.value += 1
/// ```
///
/// Writing a value equal to the current one (by `==`, or the `equals` closure given at
/// creation) changes nothing and runs nothing downstream.
public final class MutableSignal<Value>: Signal<Value> {
    @exclusivity(unchecked) @usableFromInline var storage: Value
    @usableFromInline let equals: ((Value, Value) -> Bool)?
    /// The context and its `settleCount` at this signal's last propagation: while both still
    /// match inside a batch, every subscriber is stale and another write need not walk them.
    @exclusivity(unchecked) @usableFromInline var propagatedIn: ReactiveContext?
    @exclusivity(unchecked) @usableFromInline var propagatedAt: UInt64 = 0

    /// A signal whose writes always count as changes.
    ///
    /// - Parameters:
    ///   - initialValue: the value before any write.
    ///   - equals: when it returns `true` for the old and new value, a write changes nothing;
    ///     `nil` makes every write a change.
    public init(_ initialValue: Value, equals: ((Value, Value) -> Bool)? = nil) {
        storage = initialValue
        self.equals = equals
        super.init(flags: 0)
        node.version = 1
    }

    /// A signal whose writes of an equal value (by `==`) change nothing.
    ///
    /// - Parameter initialValue: the value before any write.
    public init(_ initialValue: Value) where Value: Equatable {
        storage = initialValue
        equals = { $0 == $1 }
        super.init(flags: 0)
        node.version = 1
    }

    /// The current value. Reading tracks a dependency; writing notifies dependents.
    @inlinable
    public override var value: Value {
        // Always inlined into the reader, like `Computed.value`.
        @inline(__always) get {
            let context = ReactiveContext.current
            if let sub = context.activeSub {
                context.track(node, by: sub)
            }
            return storage
        }
        set {
            set(newValue)
        }
    }

    /// Writes a new value; dependents learn of it, effects run at the end of the outermost
    /// write or `batch`.
    ///
    /// - Parameter newValue: the value to store.
    @inlinable
    public func set(_ newValue: Value) {
        if let equals, equals(storage, newValue) {
            return
        }
        storage = newValue
        didChange()
    }

    /// Changes the value in place.
    ///
    /// - Parameter transform: edits the value; the result is compared with the old value.
    @inlinable
    public func update(_ transform: (inout Value) throws -> Void) rethrows {
        var copy = storage
        try transform(&copy)
        set(copy)
    }

    @usableFromInline
    func didChange() {
        node.version &+= 1
        globalEpoch.wrappingAdd(1, ordering: .relaxed)
        if node.firstSub != nil {
            let context = ReactiveContext.current
            // Many writes to one signal in a batch walk its subscribers once.
            if context.batchDepth == 0 || propagatedIn != context || propagatedAt != context.settleCount {
                context.propagate(from: node)
                propagatedIn = context
                propagatedAt = context.settleCount
            }
            if context.batchDepth == 0 {
                context.flush()
            }
        }
    }

    /// The current value, read without tracking a dependency.
    @inlinable
    public override func peek() -> Value {
        storage
    }
}
