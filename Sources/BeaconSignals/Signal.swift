/// A read-only reactive value: what `computed` returns and what a remote signal is.
///
/// Reading `value` inside a `computed` or an `effect` makes it a dependency, so the computed
/// recomputes (lazily) and the effect re-runs when the value changes. `peek()` reads without
/// making a dependency.
///
/// Signals, computeds and effects belong to one isolation domain (a thread, the main actor, an
/// actor): they are not `Sendable`. To hand writes in from another thread use `SignalInbox`.
///
/// Other modules may subclass it to present a signal of their own (a remote signal, say) by
/// overriding `value` and `peek()` to read signals of the graph: dependencies are tracked on
/// the signals read, so the subclass itself needs no bookkeeping.
open class Signal<Value>: ReactiveNode {
    @usableFromInline
    override init(flags: UInt32) {
        super.init(flags: flags)
    }

    /// For subclasses in other modules that forward `value` and `peek()` to signals they hold.
    public init() {
        super.init(flags: 0)
    }

    /// The current value. Inside a `computed` or `effect`, reading it tracks a dependency.
    open var value: Value {
        preconditionFailure("Signal is abstract")
    }

    /// The current value, read without tracking a dependency.
    ///
    /// - Returns: the same value `value` would return.
    open func peek() -> Value {
        preconditionFailure("Signal is abstract")
    }

    /// This signal, typed so that holders cannot write it.
    ///
    /// - Returns: `self` as a `Signal`.
    public func readOnly() -> Signal<Value> {
        self
    }
}
