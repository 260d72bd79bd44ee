#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Counts writes process-wide; a computed nobody watches is up to date while its
/// `verifiedEpoch` equals this.
@usableFromInline
let globalEpoch = Atomic<UInt64>(1)

/// `contextKey` plus one once it exists, 0 before. A constant-initialised global, so reading it
/// (on every signal read) needs no lazy-initialisation check, unlike `contextKey` itself.
@usableFromInline
let publishedContextKey = Atomic<UInt64>(0)

/// The first thread that made a context, and that context: most programs run their graph on one
/// thread, whose reads then find their context by comparing thread ids rather than through
/// `pthread_getspecific` (about half the instructions of a lookup). Set once and never freed, so
/// that a reader on another thread can always dereference it; cleared when that thread ends.
///
/// Holds the address of a `PrimaryContext`, or 0.
@usableFromInline
let primaryContext = Atomic<UInt>(0)

/// The highest `ContextState.settleCount` of every context freed so far. A new context starts
/// above it, so a context made at a freed one's address never repeats a count of the old one.
let retiredSettleCount = Atomic<UInt64>(0)

/// Whether a thread has claimed `primaryContext`; it is claimed at most once per process.
let primaryContextClaimed = Atomic<Bool>(false)

@usableFromInline
struct PrimaryContext {
    @usableFromInline let thread: pthread_t
    @usableFromInline let context: ReactiveContext
}

/// The thread-specific key of each thread's `ContextState`, made on first use.
let contextKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        if let raw {
            ReactiveContext.destroy(raw.assumingMemoryBound(to: ContextState.self))
        }
    }
    precondition(status == 0, "BeaconSignals: pthread_key_create failed (\(status))")
    return key
}()

/// What adopts the effects, scopes and cleanups created while it runs.
enum Owner {
    case scope(Unmanaged<OwnerScope>)
    /// A running effect; its scope is made only when something needs it.
    case effect(Unmanaged<Effect>)
}

/// The transient state of reactive work on one thread: the node being evaluated, batch depth,
/// the effect queue, scratch stacks and a free list of links.
///
/// All of it lives only for the duration of a synchronous call (a read, a write, a batch), and a
/// synchronous call never changes threads; so keeping it per thread is correct even for actors
/// whose jobs hop between threads. Nodes themselves are not `Sendable`, which confines each
/// graph to one isolation domain at compile time.
@usableFromInline
struct ContextState {
    /// The computed or effect whose evaluation is running; reads link to it.
    @usableFromInline var activeSub: NodeRef?
    /// What adopts effects and cleanups created now. Not retained: an owner is kept alive by
    /// its effect or `EffectScope` while it runs.
    var owner: Owner?
    @usableFromInline var batchDepth = 0
    /// Counts what can bring a subscriber up to date or add one (an evaluation, a subscription),
    /// and every outermost `batch`. A source written again within one batch or
    /// evaluation with this count unchanged since it propagated has only stale subscribers, so it
    /// need not walk them again (`MutableSignal.didChange`). A batch or an evaluation is one
    /// synchronous call on one thread, so no other context can have touched the graph meanwhile.
    @usableFromInline var settleCount: UInt64
    var isFlushing = false
    var flushCount: UInt64 = 0
    /// Effects to run at the end of the outermost write or batch; each holds a retain.
    var queuedEffects = ScratchList<NodeRef>()
    /// Scratch stack for validation.
    var validationStack = ScratchList<LinkRef>()
    /// Scratch stack for propagation.
    var propagationStack = ScratchList<LinkRef>()
    /// Scratch stack for subscribing newly watched computeds.
    var subscribeStack = ScratchList<NodeRef>()
    /// Computeds that became watched while computing (read in a cycle), each retained; they
    /// subscribe to their dependencies once done (`subscribeDeferred()`).
    var deferredSubscriptions = ScratchList<NodeRef>()
    /// Nodes that stopped being watched and must unsubscribe from their own dependencies.
    var unwatchQueue = ScratchList<NodeRef>()
    /// Objects whose release is deferred so that freeing a long chain never recurses deeply.
    var releaseQueue = ScratchList<UnsafeMutableRawPointer>()
    var isReleasing = false
    var deferredDrops: [Any] = []
    /// Recycled link records, chained through `nextDep`; at most `maxFreeLinks` of them.
    var freeLinks: LinkRef?
    var freeLinkCount = 0
    /// Depth of nested first evaluations, for the stack guard.
    var evaluationDepth = 0
    /// Stack position at the outermost evaluation.
    var stackBase: UInt = 0

    init(settleCount: UInt64) {
        self.settleCount = settleCount
    }
}

/// The current thread's `ContextState`. Its members forward to the record, so that call sites
/// read like method calls on an object, without the reference counting of one.
@usableFromInline
typealias ReactiveContext = UnsafeMutablePointer<ContextState>

extension UnsafeMutablePointer where Pointee == ContextState {
    @inlinable
    static var current: ReactiveContext {
        @inline(__always) get {
            if let primary = UnsafeMutablePointer<PrimaryContext>(bitPattern: primaryContext.load(ordering: .acquiring)),
               primary.pointee.thread == pthread_self() {
                return primary.pointee.context
            }
            let key = publishedContextKey.load(ordering: .acquiring)
            if key != 0, let raw = pthread_getspecific(pthread_key_t(truncatingIfNeeded: key &- 1)) {
                return raw.assumingMemoryBound(to: ContextState.self)
            }
            return makeCurrent()
        }
    }

    /// Makes the calling thread's context (and the key, the first time).
    @usableFromInline @inline(never)
    static func makeCurrent() -> ReactiveContext {
        publishedContextKey.store(UInt64(contextKey) + 1, ordering: .releasing)
        let context = ReactiveContext.allocate(capacity: 1)
        context.initialize(to: ContextState(settleCount: retiredSettleCount.load(ordering: .acquiring) &+ 1))
        pthread_setspecific(contextKey, UnsafeRawPointer(context))
        if primaryContextClaimed.compareExchange(expected: false, desired: true, ordering: .relaxed).exchanged {
            let primary = UnsafeMutablePointer<PrimaryContext>.allocate(capacity: 1)
            primary.initialize(to: PrimaryContext(thread: pthread_self(), context: context))
            primaryContext.store(UInt(bitPattern: primary), ordering: .releasing)
        }
        return context
    }

    /// Frees a thread's context when the thread ends.
    static func destroy(_ context: ReactiveContext) {
        if let primary = UnsafeMutablePointer<PrimaryContext>(bitPattern: primaryContext.load(ordering: .acquiring)),
           primary.pointee.context == context {
            // The thread is ending; a later thread may get its id. The record stays allocated.
            primaryContext.store(0, ordering: .releasing)
        }
        retiredSettleCount.max(context.pointee.settleCount, ordering: .releasing)
        var link = context.pointee.freeLinks
        while let current = link {
            link = current.pointee.nextDep
            current.deallocate()
        }
        context.pointee.validationStack.deallocate()
        context.pointee.propagationStack.deallocate()
        context.pointee.subscribeStack.deallocate()
        context.pointee.deferredSubscriptions.deallocate()
        context.pointee.queuedEffects.deallocate()
        context.pointee.unwatchQueue.deallocate()
        context.pointee.releaseQueue.deallocate()
        context.deinitialize(count: 1)
        context.deallocate()
    }

    /// Makes this context the current thread's for a while (the stack guard runs evaluation on a
    /// helper thread with the caller's context while the caller waits). `uninstall()` undoes it
    /// before the thread ends, so that the thread's end does not free the context.
    func install() {
        pthread_setspecific(contextKey, UnsafeRawPointer(self))
    }

    func uninstall() {
        pthread_setspecific(contextKey, nil)
    }

    @inlinable
    var activeSub: NodeRef? {
        @inline(__always) get { pointee.activeSub }
        @inline(__always) nonmutating set { pointee.activeSub = newValue }
    }

    /// Records something that can bring a subscriber up to date or add one (see `settleCount`).
    @inlinable @inline(__always)
    func noteSettle() {
        pointee.settleCount &+= 1
    }

    @inlinable
    var settleCount: UInt64 {
        @inline(__always) get { pointee.settleCount }
    }

    @inlinable
    var batchDepth: Int {
        @inline(__always) get { pointee.batchDepth }
        @inline(__always) nonmutating set { pointee.batchDepth = newValue }
    }

    /// The scope that adopts effects and cleanups created now (made on first use for an effect).
    var owner: OwnerScope? {
        switch pointee.owner {
        case .scope(let scope): scope.takeUnretainedValue()
        case .effect(let effect): effect.takeUnretainedValue().ownedScope
        case nil: nil
        }
    }

    @inlinable
    var epoch: UInt64 {
        @inline(__always) get { globalEpoch.load(ordering: .relaxed) }
    }

    // MARK: Links

    /// How many freed link records a thread keeps for reuse. Few on purpose: they serve
    /// dependencies that come and go between evaluations. A large graph's freed links go back to
    /// `malloc`, which hands the next large graph memory in allocation order; recycling them
    /// through a list in the order they were freed scatters its links (a freed 1000x12 graph made
    /// the next one's reads 35% slower).
    static let maxFreeLinks = 256

    /// A link record, recycled when one is free.
    @inline(__always)
    func makeLink(dep: NodeRef, sub: NodeRef, depVersion: UInt64) -> LinkRef {
        let link: LinkRef
        if let free = pointee.freeLinks {
            pointee.freeLinks = free.pointee.nextDep
            pointee.freeLinkCount -= 1
            link = free
        } else {
            link = LinkRef.allocate(capacity: 1)
        }
        link.initialize(to: LinkState(dep: dep, sub: sub, depVersion: depVersion))
        return link
    }

    @inline(__always)
    func freeLink(_ link: LinkRef) {
        if pointee.freeLinkCount == Self.maxFreeLinks {
            link.deallocate()
            return
        }
        link.pointee.nextDep = pointee.freeLinks
        pointee.freeLinks = link
        pointee.freeLinkCount += 1
    }

    // MARK: Batching and effects

    @usableFromInline
    func endBatch() {
        pointee.batchDepth -= 1
        if pointee.batchDepth == 0 && !pointee.isFlushing && !pointee.queuedEffects.isEmpty {
            flush()
        }
    }

    /// Runs queued effects until none is left. Effects that write signals queue more effects;
    /// they run in the same flush.
    @usableFromInline
    func flush() {
        if pointee.isFlushing || pointee.batchDepth > 0 || pointee.queuedEffects.isEmpty {
            return
        }
        pointee.isFlushing = true
        pointee.flushCount &+= 1
        var index = 0
        while index < pointee.queuedEffects.count {
            // The queue holds a retain on each effect, so that disposing it meanwhile is safe.
            let effect = pointee.queuedEffects[index]
            index += 1
            effect.flags &= ~NodeFlags.queued
            if effect.flags & NodeFlags.disposed == 0 && effect.flags & NodeFlags.stale != 0 {
                refresh(effect)
            }
            effect.object.release()
        }
        pointee.queuedEffects.removeAll(keepingAtMost: 4096)
        pointee.isFlushing = false
    }

    var isFlushing: Bool { pointee.isFlushing }
    var flushCount: UInt64 { pointee.flushCount }

    // MARK: Deferred release

    /// Queues the release of a retain on `node`'s object taken by a link. `drainReleases()`
    /// performs it, from a loop rather than from inside a deinit, so freeing a long chain never
    /// recurses.
    @usableFromInline
    func releaseLater(_ node: NodeRef) {
        pointee.releaseQueue.append(node.object.toOpaque())
    }

    /// Queues `value` (a closure and what it captures) to be dropped by `drainReleases()`.
    /// The caller must hold no other reference once the drain runs.
    func dropLater(_ value: Any) {
        pointee.deferredDrops.append(value)
    }

    /// Performs queued releases; nested calls (from deinits it triggers) return at once and
    /// leave the work to the outermost loop.
    @usableFromInline
    func drainReleases() {
        if pointee.isReleasing {
            return
        }
        pointee.isReleasing = true
        while true {
            if !pointee.releaseQueue.isEmpty {
                Unmanaged<ReactiveNode>.fromOpaque(pointee.releaseQueue.removeLast()).release()
            } else if !pointee.deferredDrops.isEmpty {
                // Taken out of the context before they are destroyed: their deinits queue more
                // releases and drops, into the context's (now empty) queues.
                destroy(takeDeferredDrops())
            } else {
                break
            }
        }
        pointee.isReleasing = false
    }

    @inline(never)
    private func takeDeferredDrops() -> [Any] {
        var taken: [Any] = []
        swap(&taken, &pointee.deferredDrops)
        return taken
    }

    @inline(never)
    private func destroy(_ values: consuming [Any]) {
        _ = consume values
    }
}
