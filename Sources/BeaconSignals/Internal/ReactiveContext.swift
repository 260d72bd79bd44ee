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

@usableFromInline
let contextKey: pthread_key_t = {
    var key = pthread_key_t()
    let status = pthread_key_create(&key) { raw in
        if let raw {
            Unmanaged<ReactiveContext>.fromOpaque(raw).release()
        }
    }
    precondition(status == 0, "BeaconSignals: pthread_key_create failed (\(status))")
    return key
}()

/// The transient state of reactive work on one thread: the node being evaluated, batch depth,
/// the effect queue and scratch stacks.
///
/// All of it lives only for the duration of a synchronous call (a read, a write, a batch), and a
/// synchronous call never changes threads; so keeping it per thread is correct even for actors
/// whose jobs hop between threads. Nodes themselves are not `Sendable`, which confines each
/// graph to one isolation domain at compile time.
@usableFromInline
final class ReactiveContext {
    /// The computed or effect whose evaluation is running; reads link to it.
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var activeSub: ReactiveNode?
    /// The scope that adopts effects created now.
    /// Not retained: an owner is kept alive by its effect or `EffectScope` while it runs.
    @exclusivity(unchecked) unowned(unsafe) var owner: OwnerScope?
    @exclusivity(unchecked) @usableFromInline var batchDepth = 0
    @exclusivity(unchecked) var isFlushing = false
    @exclusivity(unchecked) var flushCount: UInt64 = 0
    /// Effects to run at the end of the outermost write or batch.
    @exclusivity(unchecked) var queuedEffects: [Unmanaged<Effect>] = []
    /// Scratch stack for validation.
    @exclusivity(unchecked) var validationStack: [Unmanaged<Link>] = []
    /// Scratch stack for propagation.
    @exclusivity(unchecked) var propagationStack: [Unmanaged<Link>] = []
    /// Nodes that stopped being watched and must unsubscribe from their own dependencies.
    @exclusivity(unchecked) var unwatchQueue: [Unmanaged<ReactiveNode>] = []
    /// Nodes whose release is deferred so that freeing a long chain never recurses deeply.
    @exclusivity(unchecked) var releaseQueue: [Unmanaged<ReactiveNode>] = []
    @exclusivity(unchecked) var isReleasing = false
    @exclusivity(unchecked) var deferredDrops: [Any] = []
    /// Depth of nested first evaluations, for the stack guard.
    @exclusivity(unchecked) var evaluationDepth = 0
    /// Stack position at the outermost evaluation.
    @exclusivity(unchecked) var stackBase: UInt = 0

    @inlinable
    static var current: ReactiveContext {
        @inline(__always) get {
            if let raw = pthread_getspecific(contextKey) {
                return Unmanaged<ReactiveContext>.fromOpaque(raw).takeUnretainedValue()
            }
            return makeCurrent()
        }
    }

    @usableFromInline @inline(never)
    static func makeCurrent() -> ReactiveContext {
        let context = ReactiveContext()
        context.install()
        return context
    }

    /// Makes this context the current thread's (the stack guard runs evaluation on a helper
    /// thread with the caller's context while the caller waits).
    func install() {
        let previous = pthread_getspecific(contextKey)
        pthread_setspecific(contextKey, Unmanaged.passRetained(self).toOpaque())
        if let previous {
            Unmanaged<ReactiveContext>.fromOpaque(previous).release()
        }
    }

    @usableFromInline
    var epoch: UInt64 {
        @inline(__always) get { globalEpoch.load(ordering: .relaxed) }
    }

    // MARK: Batching and effects

    @usableFromInline
    func endBatch() {
        batchDepth -= 1
        if batchDepth == 0 {
            flush()
        }
    }

    /// Runs queued effects until none is left. Effects that write signals queue more effects;
    /// they run in the same flush.
    @usableFromInline
    func flush() {
        if isFlushing || batchDepth > 0 || queuedEffects.isEmpty {
            return
        }
        isFlushing = true
        flushCount &+= 1
        var index = 0
        while index < queuedEffects.count {
            // The queue holds a retain on each effect, so that disposing it meanwhile is safe.
            let queued = queuedEffects[index]
            index += 1
            unowned(unsafe) let effect = queued.takeUnretainedValue()
            effect.flags &= ~NodeFlags.queued
            if effect.flags & NodeFlags.disposed == 0 && effect.flags & NodeFlags.stale != 0 {
                refresh(effect)
            }
            queued.release()
        }
        queuedEffects.removeAll(keepingCapacity: queuedEffects.count < 4096)
        isFlushing = false
    }

    // MARK: Deferred release

    /// Queues the release of a retain on `node` taken by a link. `drainReleases()` performs it,
    /// from a loop rather than from inside a deinit, so freeing a long chain never recurses.
    func releaseLater(_ node: ReactiveNode) {
        releaseQueue.append(Unmanaged.passUnretained(node))
    }

    /// Queues `value` (a closure and what it captures) to be dropped by `drainReleases()`.
    /// The caller must hold no other reference once the drain runs.
    func dropLater(_ value: Any) {
        deferredDrops.append(value)
    }

    /// Performs queued releases; nested calls (from deinits it triggers) return at once and
    /// leave the work to the outermost loop.
    func drainReleases() {
        if isReleasing {
            return
        }
        isReleasing = true
        while true {
            if let object = releaseQueue.popLast() {
                object.release()
            } else if !deferredDrops.isEmpty {
                _ = deferredDrops.popLast()
            } else {
                break
            }
        }
        isReleasing = false
    }
}
