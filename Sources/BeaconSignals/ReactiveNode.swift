/// The untyped part of every signal and effect: its place in the dependency graph.
///
/// You do not create nodes directly; `MutableSignal`, `computed` and `effect` do. The graph is
/// push-pull: a write marks the watched nodes downstream as possibly stale and queues the
/// effects among them without running user code; reads and effect flushes then pull, validating
/// dependencies by version and recomputing a node only when one of them really changed.
///
/// A computed is *watched* while something subscribes to it (an effect, directly or through
/// other computeds). Only watched nodes sit in their dependencies' subscriber lists; a computed
/// nobody watches validates itself by versions when read and can be freed as soon as its last
/// user lets go of it.
open class ReactiveNode {
    @exclusivity(unchecked) @usableFromInline final var flags: UInt32
    @exclusivity(unchecked) @usableFromInline final unowned(unsafe) var firstDep: Link?
    @exclusivity(unchecked) @usableFromInline final unowned(unsafe) var firstSub: Link?
    @exclusivity(unchecked) @usableFromInline final unowned(unsafe) var lastSub: Link?
    /// During an evaluation: the last dependency link confirmed by a read.
    @exclusivity(unchecked) @usableFromInline final unowned(unsafe) var trackCursor: Link?
    /// Bumped at the start of every evaluation; with `lastReader`, de-duplicates repeated reads.
    @exclusivity(unchecked) @usableFromInline final var trackRun: UInt64 = 0
    /// The node whose evaluation read this node last, and that evaluation's `trackRun`.
    @exclusivity(unchecked) @usableFromInline final unowned(unsafe) var lastReader: ReactiveNode?
    @exclusivity(unchecked) @usableFromInline final var lastReaderRun: UInt64 = 0
    /// Increases whenever this node's value changes.
    @exclusivity(unchecked) @usableFromInline final var version: UInt64 = 0
    /// The global write epoch at which this node was last known to be up to date.
    @exclusivity(unchecked) @usableFromInline final var verifiedEpoch: UInt64 = 0

    @usableFromInline
    init(flags: UInt32) {
        self.flags = flags
    }

    /// Brings the node up to date after a dependency changed: a computed re-evaluates and returns
    /// whether its value changed; an effect runs. The context has checked that it must.
    @usableFromInline
    func reevaluate(_ context: ReactiveContext) -> Bool {
        false
    }

    deinit {
        ReactiveContext.current.detach(self)
    }
}

/// Bits of `ReactiveNode.flags`.
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
