import BeaconLocking

/// A side effect that runs now and again whenever a signal it read changes.
///
/// Made by `effect { … }`. Effects run at the end of the outermost write or `batch`, once per
/// change however many of their dependencies changed, and only if a dependency's value really
/// changed. An effect lives until `dispose()`, until its owner (the effect or `EffectScope` it
/// was created in) re-runs or is disposed, or, when it has no owner, until its last reference
/// goes away.
public final class Effect: ReactiveNode, Disposable {
    /// How often one effect may run within one flush before it counts as a loop that never
    /// settles and is stopped with `SignalError.Code.effectLoop`.
    public static let loopLimit = 1000

    @exclusivity(unchecked) var body: (() throws -> Void)?
    /// What the effect owns: made the first time it creates an effect or scope or registers a
    /// cleanup, as most effects never do.
    @exclusivity(unchecked) private var scope: OwnerScope?
    let errorHandler: ((any Error) -> Void)?
    @exclusivity(unchecked) private var lastFlush: UInt64 = 0
    @exclusivity(unchecked) private var runsInFlush = 0

    init(body: @escaping () throws -> Void, errorHandler: ((any Error) -> Void)?) {
        self.body = body
        self.errorHandler = errorHandler
        super.init(flags: NodeFlags.effect)
    }

    /// The effect's scope, made on first use.
    var ownedScope: OwnerScope {
        if let scope { return scope }
        let made = OwnerScope()
        scope = made
        return made
    }

    /// Whether the effect has been disposed.
    public var isDisposed: Bool {
        flags & NodeFlags.disposed != 0
    }

    override func reevaluate(_ context: ReactiveContext) -> Bool {
        guard let body, flags & NodeFlags.disposed == 0 else { return false }
        if context.isFlushing {
            if lastFlush != context.flushCount {
                lastFlush = context.flushCount
                runsInFlush = 0
            }
            runsInFlush += 1
            if runsInFlush > Effect.loopLimit {
                report(SignalError(.effectLoop, """
                    an effect re-triggered itself \(Effect.loopLimit) times in one flush; \
                    it runs again at the next change
                    """))
                return false
            }
        }
        withExtendedLifetime(self) {
            scope?.clear()
            context.evaluate(node, owner: .effect(Unmanaged.passUnretained(self))) {
                do {
                    try body()
                } catch {
                    report(error)
                }
            }
        }
        return true
    }

    private func report(_ error: any Error) {
        if let errorHandler {
            errorHandler(error)
        } else {
            EffectErrors.report(error)
        }
    }

    /// Stops the effect: its cleanups run, effects it owns are disposed, and it lets go of its
    /// dependencies. Calling it again does nothing.
    public func dispose() {
        if flags & NodeFlags.disposed != 0 {
            return
        }
        flags = (flags | NodeFlags.disposed) & ~NodeFlags.stale
        withExtendedLifetime(self) {
            scope?.clear()
            ReactiveContext.current.detach(node)
            body = nil
        }
    }

    deinit {
        if flags & NodeFlags.disposed == 0 {
            scope?.clear()
        }
    }
}

/// Runs `body` now and again whenever a signal it read changes.
///
/// Cleanups registered with `onCleanup` inside `body` run before each re-run and on dispose.
/// Effects and scopes created inside `body` are owned by this effect.
///
/// - Parameters:
///   - onError: receives errors `body` throws; without it they go to `EffectErrors`.
///   - body: the side effect.
/// - Returns: the effect; keep it (or create it inside an owner) for as long as it should run.
public func effect(
    onError: ((any Error) -> Void)? = nil,
    _ body: @escaping () throws -> Void
) -> Effect {
    let context = ReactiveContext.current
    let node = Effect(body: body, errorHandler: onError)
    context.owner?.adopt(node)
    _ = context.recompute(node.node)
    return node
}

/// Registers `cleanup` with the running effect or scope: it runs before the effect runs again
/// and when it is disposed. Outside an effect or scope it does nothing.
///
/// - Parameter cleanup: what to undo.
public func onCleanup(_ cleanup: @escaping () -> Void) {
    ReactiveContext.current.owner?.addCleanup(cleanup)
}

/// Where errors thrown by effects without an `onError` handler go.
public enum EffectErrors {
    private static let handler = Locked<(@Sendable (any Error) -> Void)?>(nil)

    /// Sets the process-wide handler; `nil` restores the default, which writes one line to
    /// standard error.
    ///
    /// - Parameter newHandler: receives the errors, on the thread the effect ran on.
    public static func setHandler(_ newHandler: (@Sendable (any Error) -> Void)?) {
        handler.withLock { $0 = newHandler }
    }

    static func report(_ error: any Error) {
        if let current = handler.withLock({ $0 }) {
            current(error)
        } else {
            writeStandardError("BeaconSignals: an effect threw: \(error)\n")
        }
    }
}
