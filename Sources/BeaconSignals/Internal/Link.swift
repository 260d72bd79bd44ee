/// One dependency edge of the graph: `sub` read `dep` during its last evaluation.
///
/// A link sits in two doubly linked lists at once: the dependency list of `sub` (always) and the
/// subscriber list of `dep` (only while `sub` is watched, see `ReactiveNode`). Links own nothing:
/// every reference is `unowned(unsafe)`, and a node detaches all its links in `deinit`, so the
/// graph never keeps a node alive and never forms a retain cycle. A link's own storage is
/// reference counted by hand (`make` / `free`) and recycled through the context's pool.
@usableFromInline
final class Link {
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var dep: ReactiveNode
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var sub: ReactiveNode
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var prevDep: Link?
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var nextDep: Link?
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var prevSub: Link?
    @exclusivity(unchecked) @usableFromInline unowned(unsafe) var nextSub: Link?
    /// `dep.version` when `sub` last read it.
    @exclusivity(unchecked) @usableFromInline var depVersion: UInt64
    /// Whether the link is in `dep`'s subscriber list.
    @exclusivity(unchecked) @usableFromInline var isSubscribed = false

    private init(dep: ReactiveNode, sub: ReactiveNode, depVersion: UInt64) {
        self.dep = dep
        self.sub = sub
        self.depVersion = depVersion
    }

    /// A new link with one manual retain; `free()` gives it back.
    @usableFromInline
    static func make(dep: ReactiveNode, sub: ReactiveNode, depVersion: UInt64) -> Link {
        let link = Link(dep: dep, sub: sub, depVersion: depVersion)
        _ = Unmanaged.passUnretained(link).retain()
        return link
    }

    /// Releases the manual retain taken by `make`.
    @usableFromInline
    func free() {
        Unmanaged.passUnretained(self).release()
    }
}
