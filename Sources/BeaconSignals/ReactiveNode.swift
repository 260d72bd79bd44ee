/// The untyped part of every signal and effect: its place in the dependency graph.
///
/// You do not create nodes directly; `MutableSignal`, `computed` and `effect` do. The graph is
/// push-pull: a write marks the watched nodes downstream as possibly stale and queues the
/// effects among them without running user code; reads and effect flushes then pull, validating
/// dependencies by version and recomputing a node only when one of them really changed.
///
/// The graph bookkeeping lives in a record outside the object (see `NodeState`), so that the
/// algorithms walk it without reference counting; the object owns the record and frees it when
/// it goes.
open class ReactiveNode {
    /// This node's record in the graph.
    @usableFromInline final let node: NodeRef

    @usableFromInline
    init(flags: UInt32) {
        node = NodeRef.allocate(capacity: 1)
        node.initialize(to: NodeState(flags: flags))
        node.pointee.object = Unmanaged.passUnretained(self).toOpaque()
    }

    /// The node's state bits (`NodeFlags`).
    @inlinable final var flags: UInt32 {
        @inline(__always) get { node.pointee.flags }
        @inline(__always) set { node.pointee.flags = newValue }
    }

    /// Brings the node up to date after a dependency changed: a computed re-evaluates and returns
    /// whether its value changed; an effect runs. The context has checked that it must.
    @usableFromInline
    func reevaluate(_ context: ReactiveContext) -> Bool {
        false
    }

    deinit {
        ReactiveContext.current.detach(node)
        node.deinitialize(count: 1)
        node.deallocate()
    }
}

/// Bits of `NodeState.flags`.
@usableFromInline
enum NodeFlags {
    /// A computed signal: has dependencies and a cached value.
    @usableFromInline static let computed: UInt32 = 1 << 0
    /// An effect: has dependencies, no value, always watched while alive.
    @usableFromInline static let effect: UInt32 = 1 << 1
    /// A watched node that may be out of date.
    @usableFromInline static let stale: UInt32 = 1 << 2
    /// The node is evaluating right now (cycle detection).
    @usableFromInline static let computing: UInt32 = 1 << 3
    /// An effect waiting in the flush queue.
    @usableFromInline static let queued: UInt32 = 1 << 4
    /// A disposed effect.
    @usableFromInline static let disposed: UInt32 = 1 << 5
    /// A computed that has a value (has been evaluated at least once).
    @usableFromInline static let evaluated: UInt32 = 1 << 6

    @usableFromInline static let hasDependencies: UInt32 = computed | effect
}
