/// The graph's own memory: node and link records in manually managed storage.
///
/// The hot paths (tracking a read, marking dependents stale, validating before a read) walk
/// these records through plain pointers, so they do no reference counting at all. Each record
/// points back at nothing that keeps it alive: a node's `NodeState` is stored inside its
/// `ReactiveNode` object and goes with it; links are owned by the graph and recycled through
/// the context's free list.

/// A node of the graph, as the algorithms see it.
@usableFromInline
typealias NodeRef = UnsafeMutablePointer<NodeState>

/// A dependency edge of the graph.
@usableFromInline
typealias LinkRef = UnsafeMutablePointer<LinkState>

/// The graph part of a `ReactiveNode`.
///
/// A computed is *watched* while something subscribes to it (an effect, directly or through
/// other computeds). Only watched nodes sit in their dependencies' subscriber lists; a computed
/// nobody watches validates itself by versions when read and can be freed as soon as its last
/// user lets go of it.
@usableFromInline
struct NodeState {
    @usableFromInline var flags: UInt32
    @usableFromInline var firstDep: LinkRef?
    @usableFromInline var firstSub: LinkRef?
    @usableFromInline var lastSub: LinkRef?
    /// During an evaluation: the last dependency link confirmed by a read.
    @usableFromInline var trackCursor: LinkRef?
    /// Bumped at the start of every evaluation; with `lastReader`, de-duplicates repeated reads.
    @usableFromInline var trackRun: UInt64 = 0
    /// The node whose evaluation read this node last, and that evaluation's `trackRun`.
    @usableFromInline var lastReader: NodeRef?
    @usableFromInline var lastReaderRun: UInt64 = 0
    /// Increases whenever this node's value changes.
    @usableFromInline var version: UInt64 = 0
    /// The global write epoch at which this node was last known to be up to date.
    @usableFromInline var verifiedEpoch: UInt64 = 0

    @usableFromInline
    init(flags: UInt32) {
        self.flags = flags
    }
}

/// One dependency edge: `sub` read `dep` during its last evaluation.
///
/// A link sits in two doubly linked lists at once: the dependency list of `sub` (always) and the
/// subscriber list of `dep` (only while `sub` is watched). While it exists it holds one retain
/// on `dep`'s object, so a computed lives as long as something depends on it; nothing holds
/// `sub`, so the graph never forms a retain cycle.
@usableFromInline
struct LinkState {
    @usableFromInline var dep: NodeRef
    @usableFromInline var sub: NodeRef
    @usableFromInline var prevDep: LinkRef?
    @usableFromInline var nextDep: LinkRef?
    @usableFromInline var prevSub: LinkRef?
    @usableFromInline var nextSub: LinkRef?
    /// `dep.version` when `sub` last read it.
    @usableFromInline var depVersion: UInt64
    /// Whether the link is in `dep`'s subscriber list.
    @usableFromInline var isSubscribed = false

    @usableFromInline
    init(dep: NodeRef, sub: NodeRef, depVersion: UInt64) {
        self.dep = dep
        self.sub = sub
        self.depVersion = depVersion
    }
}

extension UnsafeMutablePointer where Pointee == NodeState {
    @inlinable var flags: UInt32 {
        @inline(__always) get { pointee.flags }
        @inline(__always) nonmutating set { pointee.flags = newValue }
    }
    @inlinable var firstDep: LinkRef? {
        @inline(__always) get { pointee.firstDep }
        @inline(__always) nonmutating set { pointee.firstDep = newValue }
    }
    @inlinable var firstSub: LinkRef? {
        @inline(__always) get { pointee.firstSub }
        @inline(__always) nonmutating set { pointee.firstSub = newValue }
    }
    @inlinable var lastSub: LinkRef? {
        @inline(__always) get { pointee.lastSub }
        @inline(__always) nonmutating set { pointee.lastSub = newValue }
    }
    @inlinable var trackCursor: LinkRef? {
        @inline(__always) get { pointee.trackCursor }
        @inline(__always) nonmutating set { pointee.trackCursor = newValue }
    }
    @inlinable var trackRun: UInt64 {
        @inline(__always) get { pointee.trackRun }
        @inline(__always) nonmutating set { pointee.trackRun = newValue }
    }
    @inlinable var lastReader: NodeRef? {
        @inline(__always) get { pointee.lastReader }
        @inline(__always) nonmutating set { pointee.lastReader = newValue }
    }
    @inlinable var lastReaderRun: UInt64 {
        @inline(__always) get { pointee.lastReaderRun }
        @inline(__always) nonmutating set { pointee.lastReaderRun = newValue }
    }
    @inlinable var version: UInt64 {
        @inline(__always) get { pointee.version }
        @inline(__always) nonmutating set { pointee.version = newValue }
    }
    @inlinable var verifiedEpoch: UInt64 {
        @inline(__always) get { pointee.verifiedEpoch }
        @inline(__always) nonmutating set { pointee.verifiedEpoch = newValue }
    }

    /// The object this record is stored in, unretained.
    @inlinable var object: Unmanaged<ReactiveNode> {
        @inline(__always) get { Unmanaged.fromOpaque(UnsafeRawPointer(self) - ReactiveNode.recordOffset) }
    }
}

extension UnsafeMutablePointer where Pointee == LinkState {
    @inlinable var dep: NodeRef {
        @inline(__always) get { pointee.dep }
    }
    @inlinable var sub: NodeRef {
        @inline(__always) get { pointee.sub }
    }
    @inlinable var prevDep: LinkRef? {
        @inline(__always) get { pointee.prevDep }
        @inline(__always) nonmutating set { pointee.prevDep = newValue }
    }
    @inlinable var nextDep: LinkRef? {
        @inline(__always) get { pointee.nextDep }
        @inline(__always) nonmutating set { pointee.nextDep = newValue }
    }
    @inlinable var prevSub: LinkRef? {
        @inline(__always) get { pointee.prevSub }
        @inline(__always) nonmutating set { pointee.prevSub = newValue }
    }
    @inlinable var nextSub: LinkRef? {
        @inline(__always) get { pointee.nextSub }
        @inline(__always) nonmutating set { pointee.nextSub = newValue }
    }
    @inlinable var depVersion: UInt64 {
        @inline(__always) get { pointee.depVersion }
        @inline(__always) nonmutating set { pointee.depVersion = newValue }
    }
    @inlinable var isSubscribed: Bool {
        @inline(__always) get { pointee.isSubscribed }
        @inline(__always) nonmutating set { pointee.isSubscribed = newValue }
    }
}

/// A list of node, link or object pointers in manually managed memory: the graph walks' scratch
/// stacks and the context's queues. Appending, popping and indexing need no uniqueness check,
/// unlike an `Array` stored in the context, and emptying it is one store.
///
/// Elements must be trivial (pointers): nothing is deinitialised. It lives in the thread's
/// `ContextState` and is never copied; `deallocate()` frees it when the thread's context goes.
@usableFromInline
struct ScratchList<Element> {
    private var base: UnsafeMutablePointer<Element>?
    private(set) var count = 0
    private var capacity = 0

    init() {
        assert(_isPOD(Element.self), "ScratchList holds trivial elements only")
    }

    var isEmpty: Bool {
        @inline(__always) get { count == 0 }
    }

    @inline(__always)
    mutating func append(_ element: Element) {
        if count == capacity {
            grow()
        }
        (base.unsafelyUnwrapped + count).initialize(to: element)
        count += 1
    }

    /// Removes and returns the last element; the list must not be empty.
    @inline(__always)
    mutating func removeLast() -> Element {
        count -= 1
        return (base.unsafelyUnwrapped + count).move()
    }

    /// The last element; the list must not be empty.
    var last: Element {
        @inline(__always) get { base.unsafelyUnwrapped[count - 1] }
    }

    /// The element at `index`, which must be below `count`.
    subscript(index: Int) -> Element {
        @inline(__always) get { base.unsafelyUnwrapped[index] }
    }

    /// Empties the list; its memory is kept unless it grew past `keepingAtMost` elements.
    @inline(__always)
    mutating func removeAll(keepingAtMost limit: Int) {
        count = 0
        if capacity > limit {
            deallocate()
        }
    }

    @inline(never)
    private mutating func grow() {
        let newCapacity = Swift.max(64, capacity * 2)
        let grown = UnsafeMutablePointer<Element>.allocate(capacity: newCapacity)
        if let base {
            grown.moveInitialize(from: base, count: count)
            base.deallocate()
        }
        base = grown
        capacity = newCapacity
    }

    mutating func deallocate() {
        base?.deallocate()
        base = nil
        count = 0
        capacity = 0
    }
}
