/// An owner for effects: everything created inside `run` is disposed with the scope.
///
/// ```swift
/// let scope = EffectScope()
/// scope.run {
///     _ = effect { print(a.value) }
///     _ = effect { print(b.value) }
/// }
/// scope.dispose()   // both effects stop
/// ```
///
/// A scope created inside an effect or another scope is owned by it.
public final class EffectScope: Disposable {
    let scope = OwnerScope()
    private var isDisposed = false

    /// An empty scope, owned by the running effect or scope if there is one.
    public init() {
        ReactiveContext.current.owner?.adopt(self)
    }

    /// Runs `body` with this scope as the owner of effects, scopes and cleanups it creates.
    ///
    /// - Parameter body: creates effects.
    /// - Returns: what `body` returns.
    /// - Throws: what `body` throws.
    public func run<T>(_ body: () throws -> T) rethrows -> T {
        precondition(!isDisposed, "EffectScope.run after dispose")
        let context = ReactiveContext.current
        let previous = context.pointee.owner
        context.pointee.owner = .scope(Unmanaged.passUnretained(scope))
        defer { context.pointee.owner = previous }
        return try body()
    }

    /// Disposes everything the scope owns and runs its cleanups. Calling it again does nothing.
    public func dispose() {
        if isDisposed {
            return
        }
        isDisposed = true
        scope.clear()
    }

    deinit {
        scope.clear()
    }
}
