/// Something that can be stopped: an effect, a scope, an observer registration.
public protocol Disposable: AnyObject {
    /// Stops it and releases what it holds. Calling it again does nothing.
    func dispose()
}

/// Collects disposables and disposes them together, at `dispose()` or when the bag is freed.
///
/// ```swift
/// let bag = DisposeBag()
/// bag += signal.onValue { print($0) }
/// ```
public final class DisposeBag: Disposable {
    private var items: [any Disposable] = []

    /// An empty bag.
    public init() {}

    /// Adds `item`, to be disposed with the bag.
    ///
    /// - Parameter item: what to dispose later.
    public func add(_ item: any Disposable) {
        items.append(item)
    }

    /// Adds `item` to `bag`.
    ///
    /// - Parameters:
    ///   - bag: the bag.
    ///   - item: what to dispose with it.
    public static func += (bag: DisposeBag, item: any Disposable) {
        bag.add(item)
    }

    /// Disposes everything added so far, newest first, and empties the bag.
    public func dispose() {
        let current = items
        items = []
        for item in current.reversed() {
            item.dispose()
        }
    }

    /// The number of disposables held.
    public var count: Int { items.count }

    deinit {
        dispose()
    }
}

/// A disposable that runs a closure once.
public final class DisposeAction: Disposable {
    private var action: (() -> Void)?

    /// Creates a disposable that runs `action` on the first `dispose()`.
    ///
    /// - Parameter action: what disposing does.
    public init(_ action: @escaping () -> Void) {
        self.action = action
    }

    public func dispose() {
        let action = self.action
        self.action = nil
        action?()
    }
}

/// What an effect or scope owns: nested effects and scopes, and cleanup closures.
final class OwnerScope {
    // Touched only from the graph's own isolation domain, on every effect run.
    @exclusivity(unchecked) private var owned: [any Disposable] = []
    @exclusivity(unchecked) private var cleanups: [() -> Void] = []

    func adopt(_ item: any Disposable) {
        owned.append(item)
    }

    func addCleanup(_ cleanup: @escaping () -> Void) {
        cleanups.append(cleanup)
    }

    /// Runs the cleanups (newest first) and disposes what is owned.
    func clear() {
        if !cleanups.isEmpty {
            let current = cleanups
            cleanups = []
            for cleanup in current.reversed() {
                cleanup()
            }
        }
        if !owned.isEmpty {
            let current = owned
            owned = []
            for item in current.reversed() {
                item.dispose()
            }
        }
    }
}
