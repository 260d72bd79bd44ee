import Foundation
import Synchronization

/// The thread that owns a component's state: claimed by the loop thread as it starts, then
/// checked on the component's entry points in debug builds (the habit of swift-nio's
/// `NIOLoopBound`); release builds check nothing and cost nothing. Before a claim — while the
/// server starts, or in a test that drives the component itself — any one thread may use it.
final class LoopOwnership: Sendable {
    private let owner = Atomic<UInt>(0)

    /// Makes the calling thread the owner.
    func claim() {
        owner.store(UInt(pthread_self()), ordering: .releasing)
    }

    /// Traps in debug builds when a thread other than the owner calls.
    @inline(__always)
    func check(file: StaticString = #fileID, line: UInt = #line) {
        assert({
            let claimed = owner.load(ordering: .acquiring)
            return claimed == 0 || claimed == UInt(pthread_self())
        }(), "used off the thread that owns it", file: file, line: line)
    }
}
