extension UnsafeMutablePointer where Pointee == ContextState {
    // MARK: Tracking

    /// Records that the running evaluation of `sub` read `dep`.
    @inlinable @inline(__always)
    func track(_ dep: NodeRef, by sub: NodeRef) {
        let cursor = sub.trackCursor
        let next = cursor == nil ? sub.firstDep : cursor.unsafelyUnwrapped.nextDep
        if next != nil && next.unsafelyUnwrapped.dep == dep {
            let next = next.unsafelyUnwrapped
            next.depVersion = dep.version
            sub.trackCursor = next
            dep.lastReader = sub
            dep.lastReaderRun = sub.trackRun
            return
        }
        if dep.lastReader == sub && dep.lastReaderRun == sub.trackRun {
            return
        }
        insertLink(dep, sub, after: cursor, before: next)
    }

    @usableFromInline
    func insertLink(_ dep: NodeRef, _ sub: NodeRef, after cursor: LinkRef?, before next: LinkRef?) {
        dep.lastReader = sub
        dep.lastReaderRun = sub.trackRun
        let link = makeLink(dep: dep, sub: sub, depVersion: dep.version)
        _ = dep.object.retain()
        link.prevDep = cursor
        link.nextDep = next
        if let cursor {
            cursor.nextDep = link
        } else {
            sub.firstDep = link
        }
        if let next {
            next.prevDep = link
        }
        sub.trackCursor = link
        if isWatched(sub) {
            subscribe(link)
        }
    }

    /// Starts an evaluation of `node`: reads from now on re-confirm or replace its dependencies.
    @inlinable @inline(__always)
    func beginTracking(_ node: NodeRef) {
        node.trackRun &+= 1
        node.trackCursor = nil
    }

    /// Runs `body` as an evaluation of `node`: what it reads becomes `node`'s dependencies (those
    /// it no longer reads are dropped) and what it creates is owned by `owner`. The running node
    /// and owner from before are restored afterwards.
    @inline(__always)
    func evaluate<Result>(_ node: NodeRef, owner: Owner?, _ body: () -> Result) -> Result {
        let previousSub = activeSub
        let previousOwner = pointee.owner
        activeSub = node
        pointee.owner = owner
        beginTracking(node)
        let result = body()
        endTracking(node)
        activeSub = previousSub
        pointee.owner = previousOwner
        node.flags |= NodeFlags.evaluated
        return result
    }

    /// Ends an evaluation of `node`: dependencies it did not read this time are dropped.
    @inlinable @inline(__always)
    func endTracking(_ node: NodeRef) {
        let cursor = node.trackCursor
        let stale = cursor == nil ? node.firstDep : cursor.unsafelyUnwrapped.nextDep
        if stale != nil {
            dropDependencies(of: node, from: stale.unsafelyUnwrapped)
        }
        node.trackCursor = nil
    }

    @usableFromInline
    func dropDependencies(of node: NodeRef, from first: LinkRef, drain: Bool = true) {
        if let previous = first.prevDep {
            previous.nextDep = nil
        } else {
            node.firstDep = nil
        }
        var link: LinkRef? = first
        while let current = link {
            link = current.nextDep
            let dep = current.dep
            if current.isSubscribed {
                unsubscribe(current)
            }
            if dep.lastReader == node {
                dep.lastReader = nil
            }
            freeLink(current)
            releaseLater(dep)
        }
        if drain {
            drainReleases()
        }
    }

    // MARK: Watching

    @inlinable @inline(__always)
    func isWatched(_ node: NodeRef) -> Bool {
        node.firstSub != nil || node.flags & (NodeFlags.effect | NodeFlags.disposed) == NodeFlags.effect
    }

    /// Puts `link` into its dependency's subscriber list; a computed that gains its first
    /// subscriber starts watching its own dependencies.
    @usableFromInline
    func subscribe(_ link: LinkRef) {
        noteSettle()
        var pending = link
        let base = pointee.subscribeStack.count
        while true {
            let dep = pending.dep
            let wasWatched = dep.firstSub != nil
            pending.isSubscribed = true
            pending.nextSub = nil
            pending.prevSub = dep.lastSub
            if let last = dep.lastSub {
                last.nextSub = pending
            } else {
                dep.firstSub = pending
            }
            dep.lastSub = pending
            if !wasWatched && dep.flags & NodeFlags.computed != 0 {
                if dep.flags & NodeFlags.computing != 0 {
                    // Read in a cycle, in the middle of its own evaluation or validation: its
                    // dependencies are not all validated yet. It subscribes to them when done.
                    deferSubscriptions(of: dep)
                } else {
                    // Newly watched, and up to date: subscriptions happen right after a read,
                    // which validated the node and everything it depends on. From now on writes
                    // upstream mark it stale. (Marking it stale here would break the rule that
                    // everything downstream of a stale node is stale too, and stop propagation
                    // short.)
                    dep.flags &= ~NodeFlags.stale
                    pointee.subscribeStack.append(dep)
                }
            }
            // Continue with the next not yet subscribed link of a newly watched node.
            var next: LinkRef?
            while next == nil && pointee.subscribeStack.count > base {
                let node = pointee.subscribeStack.last
                var candidate = node.firstDep
                while let c = candidate, c.isSubscribed {
                    candidate = c.nextDep
                }
                if let candidate {
                    next = candidate
                } else {
                    _ = pointee.subscribeStack.removeLast()
                }
            }
            guard let next else { return }
            pending = next
        }
    }

    /// Holds back the subscriptions of a computed that became watched while computing (read in a
    /// cycle) until it is done; `subscribeDeferred()` makes them.
    private func deferSubscriptions(of node: NodeRef) {
        if node.flags & NodeFlags.subscribeWhenDone != 0 {
            return
        }
        node.flags |= NodeFlags.subscribeWhenDone
        _ = node.object.retain()
        pointee.deferredSubscriptions.append(node)
    }

    /// Subscribes each computed held back by `deferSubscriptions(of:)` that is done computing to
    /// its dependencies, which its evaluation or validation has now brought up to date; unless it
    /// lost its subscribers meanwhile. Those still computing wait for a later call.
    @usableFromInline @inline(never)
    func subscribeDeferred() {
        var waiting: [NodeRef] = []
        while !pointee.deferredSubscriptions.isEmpty {
            let node = pointee.deferredSubscriptions.removeLast()
            if node.flags & NodeFlags.computing != 0 {
                waiting.append(node)
                continue
            }
            node.flags &= ~NodeFlags.subscribeWhenDone
            if node.firstSub != nil {
                var link = node.firstDep
                while let current = link {
                    link = current.nextDep
                    if !current.isSubscribed {
                        subscribe(current)
                    }
                }
            }
            releaseLater(node)
        }
        for node in waiting {
            pointee.deferredSubscriptions.append(node)
        }
        drainReleases()
    }

    /// Takes `link` out of its dependency's subscriber list; a computed that loses its last
    /// subscriber stops watching its own dependencies.
    @usableFromInline
    func unsubscribe(_ link: LinkRef) {
        removeFromSubscribers(link)
        let dep = link.dep
        if dep.firstSub == nil && dep.flags & NodeFlags.computed != 0 {
            pointee.unwatchQueue.append(dep)
            if pointee.unwatchQueue.count == 1 {
                drainUnwatchQueue()
            }
        }
    }

    private func removeFromSubscribers(_ link: LinkRef) {
        let dep = link.dep
        if let prev = link.prevSub {
            prev.nextSub = link.nextSub
        } else {
            dep.firstSub = link.nextSub
        }
        if let next = link.nextSub {
            next.prevSub = link.prevSub
        } else {
            dep.lastSub = link.prevSub
        }
        link.prevSub = nil
        link.nextSub = nil
        link.isSubscribed = false
    }

    private func drainUnwatchQueue() {
        var index = 0
        while index < pointee.unwatchQueue.count {
            let node = pointee.unwatchQueue[index]
            index += 1
            if node.firstSub != nil {
                continue
            }
            // Still valid if nothing upstream changed since it was last clean.
            if node.flags & NodeFlags.stale != 0 {
                node.verifiedEpoch = 0
            } else if node.verifiedEpoch != 0 {
                node.verifiedEpoch = epoch
            }
            node.flags &= ~NodeFlags.stale
            var link = node.firstDep
            while let current = link {
                link = current.nextDep
                if current.isSubscribed {
                    removeFromSubscribers(current)
                    let dep = current.dep
                    if dep.firstSub == nil && dep.flags & NodeFlags.computed != 0 {
                        pointee.unwatchQueue.append(dep)
                    }
                }
            }
        }
        pointee.unwatchQueue.removeAll(keepingAtMost: 4096)
    }

    // MARK: Push

    /// Marks everything downstream of `source` that is watched as possibly stale and queues the
    /// effects among them. Runs no user code.
    @usableFromInline
    func propagate(from source: NodeRef) {
        var link = source.firstSub
        let base = pointee.propagationStack.count
        while true {
            while let current = link {
                let sub = current.sub
                let flags = sub.flags
                if flags & NodeFlags.stale == 0 {
                    sub.flags = flags | NodeFlags.stale
                    if flags & NodeFlags.effect != 0 {
                        if flags & NodeFlags.queued == 0 {
                            sub.flags |= NodeFlags.queued
                            _ = sub.object.retain()
                            pointee.queuedEffects.append(sub)
                        }
                    } else if let firstSub = sub.firstSub {
                        if let nextSub = current.nextSub {
                            pointee.propagationStack.append(nextSub)
                        }
                        link = firstSub
                        continue
                    }
                }
                link = current.nextSub
            }
            if pointee.propagationStack.count == base {
                return
            }
            link = pointee.propagationStack.removeLast()
        }
    }

    // MARK: Pull

    /// Whether `node` (a computed or effect) is certainly up to date. A node that is computing
    /// or being validated is not: reading it now is a cycle.
    @inlinable @inline(__always)
    func isUpToDate(_ node: NodeRef) -> Bool {
        let flags = node.flags
        if flags & (NodeFlags.evaluated | NodeFlags.computing) != NodeFlags.evaluated {
            return false
        }
        if node.firstSub != nil || flags & NodeFlags.effect != 0 {
            return flags & NodeFlags.stale == 0
        }
        return node.verifiedEpoch == epoch
    }

    /// Brings `root` (a computed or an effect) up to date, recomputing it and whatever it depends
    /// on only where a dependency's value really changed. Iterative: deep graphs use no stack.
    ///
    /// The nodes being validated are marked `computing`, like those being evaluated: meeting
    /// one again among the dependencies is a cycle. A throwing computed met that way counts as
    /// changed, so that its reader recomputes and reads it, and gets `.cycle`; any other traps.
    @usableFromInline
    func refresh(_ root: NodeRef) {
        if isUpToDate(root) {
            return
        }
        if root.flags & NodeFlags.computing != 0 {
            cycleDetected()
        }
        if root.flags & NodeFlags.evaluated == 0 {
            evaluate(root)
            if !pointee.deferredSubscriptions.isEmpty {
                subscribeDeferred()
            }
            return
        }
        let base = pointee.validationStack.count
        var node = root
        node.flags |= NodeFlags.computing
        var link = node.firstDep
        while true {
            validate: if let current = link {
                let dep = current.dep
                if dep.flags & NodeFlags.hasDependencies != 0 && !isUpToDate(dep) {
                    let flags = dep.flags
                    if flags & (NodeFlags.computing | NodeFlags.evaluated) == NodeFlags.evaluated {
                        dep.flags = flags | NodeFlags.computing
                        pointee.validationStack.append(current)
                        node = dep
                        link = dep.firstDep
                        continue
                    }
                    if flags & NodeFlags.computing == 0 {
                        evaluate(dep)
                    } else if flags & NodeFlags.fallible == 0 {
                        cycleDetected()
                    } else {
                        // A cycle through a throwing computed: recomputing `node` reads it.
                        _ = recompute(node)
                        break validate
                    }
                }
                if dep.version == current.depVersion {
                    link = current.nextDep
                    continue
                }
                _ = recompute(node)
            } else {
                markClean(node)
            }
            // `node` is up to date: go back to the link that led to it.
            if pointee.validationStack.count == base {
                if !pointee.deferredSubscriptions.isEmpty {
                    subscribeDeferred()
                }
                return
            }
            let parent = pointee.validationStack.removeLast()
            node = parent.sub
            link = parent
        }
    }

    @inlinable @inline(__always)
    func markClean(_ node: NodeRef) {
        // No `noteSettle()`: a node validated without recomputing read every dependency at its
        // current version, so it last evaluated (which counted) after any write to them.
        node.flags &= ~(NodeFlags.stale | NodeFlags.computing)
        node.verifiedEpoch = epoch
    }

    /// Runs the node's `reevaluate` as the active subscriber; returns whether the value changed.
    @usableFromInline
    func recompute(_ node: NodeRef) -> Bool {
        // Cleared first: a write during the update marks the node stale again.
        node.flags = (node.flags & ~NodeFlags.stale) | NodeFlags.computing
        noteSettle()
        let epochBefore = epoch
        // Writes made by the node's own code run their effects after it finishes.
        pointee.batchDepth += 1
        // The object is alive: a reader, a subscriber's link or the effect queue holds it.
        let changed = node.object._withUnsafeGuaranteedRef { $0.reevaluate(self) }
        node.flags &= ~NodeFlags.computing
        node.verifiedEpoch = epochBefore
        endBatch()
        return changed
    }

    /// First evaluation of a computed. Reading a chain of never-evaluated computeds nests one
    /// evaluation per link; when the thread's stack runs low the evaluation continues on a helper
    /// thread with a large stack while this one waits.
    @usableFromInline
    func evaluate(_ node: NodeRef) {
        if node.flags & NodeFlags.computing != 0 {
            cycleDetected()
        }
        pointee.evaluationDepth += 1
        defer { pointee.evaluationDepth -= 1 }
        if pointee.evaluationDepth == 1 {
            pointee.stackBase = StackGuard.stackPosition()
        }
        if pointee.evaluationDepth & 15 == 0 && StackGuard.isLow(base: pointee.stackBase) {
            let context = self
            StackGuard.runOnLargeStack(context: self) {
                _ = context.recompute(node)
            }
        } else {
            _ = recompute(node)
        }
    }

    // MARK: Cycles

    @usableFromInline
    func cycleDetected() -> Never {
        fatalError("""
            BeaconSignals: dependency cycle: a computed signal read itself (directly or through \
            other computeds) while computing its value
            """)
    }

    // MARK: Teardown

    /// Removes a dying or disposed node from the graph: its dependency links go, and with them
    /// the retains it held on its dependencies. With `drain: false` the releases stay queued for
    /// a later `drainReleases()`.
    func detach(_ node: NodeRef, drain: Bool = true) {
        let first = node.firstDep
        node.trackCursor = nil
        if let first {
            dropDependencies(of: node, from: first, drain: drain)
        }
    }
}
