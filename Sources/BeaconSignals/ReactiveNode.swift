/// The untyped part of every signal and effect: its place in the dependency graph.
///
/// You do not create nodes directly; `MutableSignal`, `computed` and `effect` do. The graph is
/// push-pull: a write marks the watched nodes downstream as possibly stale and queues the
/// effects among them without running user code; reads and effect flushes then pull, validating
/// dependencies by version and recomputing a node only when one of them really changed.
///
/// The graph bookkeeping is a plain record (see `NodeState`) stored first in the object, so
/// that the algorithms reach it, and the object from it, at a fixed offset and walk the graph
/// without reference counting.
open class ReactiveNode {
    /// This node's record in the graph. It must stay the first stored property: `node` finds it
    /// right after the object's header, and `NodeRef.object` finds the object right before it.
    /// Only ever accessed through `node`.
    @exclusivity(unchecked) private final var record: NodeState

    @usableFromInline
    init(flags: UInt32) {
        record = NodeState(flags: flags)
        assert(withUnsafeMutablePointer(to: &record) { $0 } == node, "NodeState is not at the start of the object")
        assert(node.object.toOpaque() == Unmanaged.passUnretained(self).toOpaque())
    }

    /// This node's record in the graph, inside the object.
    @inlinable final var node: NodeRef {
        @inline(__always) get { _getUnsafePointerToStoredProperties(self).assumingMemoryBound(to: NodeState.self) }
    }

    /// How far a node's record lies from the start of its object: a Swift object's header.
    @usableFromInline static var recordOffset: Int {
        @inline(__always) get { 2 * MemoryLayout<UnsafeRawPointer>.size }
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
        // A computed's releases are drained by its last stored property, once its closure is
        // gone too (see `Computed.drainAfterTeardown`).
        ReactiveContext.current.detach(node, drain: flags & NodeFlags.computed == 0)
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
    /// The node is evaluating right now, or being validated by `refresh`: reading it now is a
    /// cycle (it depends on whatever reads it).
    @usableFromInline static let computing: UInt32 = 1 << 3
    /// An effect waiting in the flush queue.
    @usableFromInline static let queued: UInt32 = 1 << 4
    /// A disposed effect.
    @usableFromInline static let disposed: UInt32 = 1 << 5
    /// A computed that has a value (has been evaluated at least once).
    @usableFromInline static let evaluated: UInt32 = 1 << 6
    /// A computed over `Result` (a throwing computed): read while computing, it gives
    /// `SignalError.Code.cycle` instead of trapping.
    @usableFromInline static let fallible: UInt32 = 1 << 7
    /// A computed that became watched while computing (read in a cycle), waiting in
    /// `deferredSubscriptions` to subscribe to its dependencies once done.
    @usableFromInline static let subscribeWhenDone: UInt32 = 1 << 8

    @usableFromInline static let hasDependencies: UInt32 = computed | effect
}
