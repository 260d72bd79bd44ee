extension ReactiveContext {
    // MARK: Tracking

    /// Records that the running evaluation of `sub` read `dep`.
    @inlinable @inline(__always)
    func track(_ dep: ReactiveNode, by sub: ReactiveNode) {
        unowned(unsafe) let cursor = sub.trackCursor
        unowned(unsafe) let next = cursor == nil ? sub.firstDep : cursor.unsafelyUnwrapped.nextDep
        if next != nil && next.unsafelyUnwrapped.dep === dep {
            unowned(unsafe) let next = next.unsafelyUnwrapped
            next.depVersion = dep.version
            sub.trackCursor = next
            dep.lastReader = sub
            dep.lastReaderRun = sub.trackRun
            return
        }
        if dep.lastReader === sub && dep.lastReaderRun == sub.trackRun {
            return
        }
        insertLink(dep, sub, after: cursor, before: next)
    }

    @usableFromInline
    func insertLink(_ dep: ReactiveNode, _ sub: ReactiveNode, after cursor: Link?, before next: Link?) {
        dep.lastReader = sub
        dep.lastReaderRun = sub.trackRun
        let link = Link.make(dep: dep, sub: sub, depVersion: dep.version)
        _ = Unmanaged.passUnretained(dep).retain()
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
    func beginTracking(_ node: ReactiveNode) {
        node.trackRun &+= 1
        node.trackCursor = nil
    }

    /// Ends an evaluation of `node`: dependencies it did not read this time are dropped.
    @inlinable @inline(__always)
    func endTracking(_ node: ReactiveNode) {
        let cursor = node.trackCursor
        let stale = cursor == nil ? node.firstDep : cursor.unsafelyUnwrapped.nextDep
        if stale != nil {
            dropDependencies(of: node, from: stale.unsafelyUnwrapped)
        }
        node.trackCursor = nil
    }

    @usableFromInline
    func dropDependencies(of node: ReactiveNode, from first: Link) {
        if let previous = first.prevDep {
            previous.nextDep = nil
        } else {
            node.firstDep = nil
        }
        unowned(unsafe) var link: Link? = first
        while link != nil {
            unowned(unsafe) let current = link.unsafelyUnwrapped
            link = current.nextDep
            unowned(unsafe) let dep = current.dep
            if current.isSubscribed {
                unsubscribe(current)
            }
            if dep.lastReader === node {
                dep.lastReader = nil
            }
            current.free()
            releaseLater(dep)
        }
        drainReleases()
    }

    // MARK: Watching

    @inlinable @inline(__always)
    func isWatched(_ node: ReactiveNode) -> Bool {
        node.firstSub != nil || node.flags & (NodeFlags.effect | NodeFlags.disposed) == NodeFlags.effect
    }

    /// Puts `link` into its dependency's subscriber list; a computed that gains its first
    /// subscriber starts watching its own dependencies.
    func subscribe(_ link: Link) {
        var pending = link
        var work: [Unmanaged<ReactiveNode>] = []
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
                // Newly watched, and up to date: subscriptions happen right after a read, which
                // validated the node and everything it depends on. From now on writes upstream
                // mark it stale. (Marking it stale here would break the rule that everything
                // downstream of a stale node is stale too, and stop propagation short.)
                dep.flags &= ~NodeFlags.stale
                work.append(Unmanaged.passUnretained(dep))
            }
            // Continue with the next not yet subscribed link of a newly watched node.
            var next: Link?
            while next == nil, let node = work.last?.takeUnretainedValue() {
                var candidate = node.firstDep
                while let c = candidate, c.isSubscribed {
                    candidate = c.nextDep
                }
                if let candidate {
                    next = candidate
                } else {
                    work.removeLast()
                }
            }
            guard let next else { return }
            pending = next
        }
    }

    /// Takes `link` out of its dependency's subscriber list; a computed that loses its last
    /// subscriber stops watching its own dependencies.
    func unsubscribe(_ link: Link) {
        removeFromSubscribers(link)
        let dep = link.dep
        if dep.firstSub == nil && dep.flags & NodeFlags.computed != 0 {
            unwatchQueue.append(Unmanaged.passUnretained(dep))
            if unwatchQueue.count == 1 {
                drainUnwatchQueue()
            }
        }
    }

    private func removeFromSubscribers(_ link: Link) {
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
        while index < unwatchQueue.count {
            let node = unwatchQueue[index].takeUnretainedValue()
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
                        unwatchQueue.append(Unmanaged.passUnretained(dep))
                    }
                }
            }
        }
        unwatchQueue.removeAll(keepingCapacity: true)
    }

    // MARK: Push

    /// Marks everything downstream of `source` that is watched as possibly stale and queues the
    /// effects among them. Runs no user code.
    @usableFromInline
    func propagate(from source: ReactiveNode) {
        unowned(unsafe) var link = source.firstSub
        let base = propagationStack.count
        while true {
            while link != nil {
                unowned(unsafe) let current = link.unsafelyUnwrapped
                unowned(unsafe) let sub = current.sub
                let flags = sub.flags
                if flags & NodeFlags.stale == 0 {
                    sub.flags = flags | NodeFlags.stale
                    if flags & NodeFlags.effect != 0 {
                        if flags & NodeFlags.queued == 0 {
                            sub.flags |= NodeFlags.queued
                            queuedEffects.append(Unmanaged.passRetained(unsafeDowncast(sub, to: Effect.self)))
                        }
                    } else if sub.firstSub != nil {
                        if current.nextSub != nil {
                            propagationStack.append(Unmanaged.passUnretained(current.nextSub.unsafelyUnwrapped))
                        }
                        link = sub.firstSub
                        continue
                    }
                }
                link = current.nextSub
            }
            if propagationStack.count == base {
                return
            }
            link = propagationStack.removeLast().takeUnretainedValue()
        }
    }

    // MARK: Pull

    /// Whether `node` (a computed or effect) is certainly up to date.
    @inlinable @inline(__always)
    func isUpToDate(_ node: ReactiveNode) -> Bool {
        let flags = node.flags
        if flags & NodeFlags.evaluated == 0 {
            return false
        }
        if node.firstSub != nil || flags & NodeFlags.effect != 0 {
            return flags & NodeFlags.stale == 0
        }
        return node.verifiedEpoch == epoch
    }

    /// Brings `root` (a computed or an effect) up to date, recomputing it and whatever it depends
    /// on only where a dependency's value really changed. Iterative: deep graphs use no stack.
    @usableFromInline
    func refresh(_ root: ReactiveNode) {
        if isUpToDate(root) {
            return
        }
        if root.flags & NodeFlags.computing != 0 {
            cycleDetected()
        }
        if root.flags & NodeFlags.evaluated == 0 {
            evaluate(root)
            return
        }
        let base = validationStack.count
        unowned(unsafe) var node = root
        unowned(unsafe) var link = node.firstDep
        while true {
            if link != nil {
                unowned(unsafe) let current = link.unsafelyUnwrapped
                unowned(unsafe) let dep = current.dep
                if dep.flags & NodeFlags.hasDependencies != 0 && !isUpToDate(dep) {
                    if dep.flags & NodeFlags.computing != 0 {
                        cycleDetected()
                    }
                    if dep.flags & NodeFlags.evaluated != 0 {
                        validationStack.append(Unmanaged.passUnretained(current))
                        node = dep
                        link = dep.firstDep
                        continue
                    }
                    evaluate(dep)
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
            if validationStack.count == base {
                return
            }
            unowned(unsafe) let parent = validationStack.removeLast().takeUnretainedValue()
            node = parent.sub
            link = parent
        }
    }

    @inlinable @inline(__always)
    func markClean(_ node: ReactiveNode) {
        node.flags &= ~NodeFlags.stale
        node.verifiedEpoch = epoch
    }

    /// Runs `node.reevaluate` as the active subscriber; returns whether the value changed.
    @usableFromInline
    func recompute(_ node: ReactiveNode) -> Bool {
        // Cleared first: a write during the update marks the node stale again.
        node.flags = (node.flags & ~NodeFlags.stale) | NodeFlags.computing
        let epochBefore = epoch
        // Writes made by the node's own code run their effects after it finishes.
        batchDepth += 1
        let changed = node.reevaluate(self)
        node.flags &= ~NodeFlags.computing
        node.verifiedEpoch = epochBefore
        endBatch()
        return changed
    }

    /// First evaluation of a computed. Reading a chain of never-evaluated computeds nests one
    /// evaluation per link; when the thread's stack runs low the evaluation continues on a helper
    /// thread with a large stack while this one waits.
    @usableFromInline
    func evaluate(_ node: ReactiveNode) {
        if node.flags & NodeFlags.computing != 0 {
            cycleDetected()
        }
        evaluationDepth += 1
        defer { evaluationDepth -= 1 }
        if evaluationDepth == 1 {
            stackBase = StackGuard.stackPosition()
        }
        if evaluationDepth & 15 == 0 && StackGuard.isLow(base: stackBase) {
            StackGuard.runOnLargeStack(context: self) {
                _ = self.recompute(node)
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

    /// Removes a dying node from the graph: its dependency links go, and with them the retains
    /// it held on its dependencies.
    func detach(_ node: ReactiveNode) {
        let first = node.firstDep
        node.trackCursor = nil
        if let first {
            dropDependencies(of: node, from: first)
        }
    }
}
