import Foundation
import Testing

/// Runs each test of a suite on threads of its own instead of Swift's cooperative pool.
///
/// Tests that talk to real sockets and processes block: a receive with a timeout, a wait for a
/// process, a poll of a condition. The cooperative pool has one thread per core (two here); two
/// such tests held both, and every other test — even one that needed a millisecond — waited
/// until its time limit ran out. With this trait a test's body, and the child tasks it starts,
/// run on ``ThreadPerJobExecutor``, so blocking holds only the test that blocks.
public struct OffThePool: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> OffThePool? {
        testCase == nil ? nil : self  // each test case, not the suite as a whole
    }

    public func provideScope(for test: Test, testCase: Test.Case?,
                             performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(ThreadPerJobExecutor.shared) { try await function() }
    }
}

extension Trait where Self == OffThePool {
    /// Runs the tests on threads of their own, off Swift's cooperative pool (``OffThePool``).
    public static var offThePool: OffThePool { OffThePool() }
}

/// A task executor that runs every job it is given on a new thread: nothing a job does (block,
/// sleep, wait for a process) can keep another job from running.
public final class ThreadPerJobExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = ThreadPerJobExecutor()

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let thread = Thread { [self] in job.runSynchronously(on: asUnownedTaskExecutor()) }
        thread.stackSize = 4 << 20
        thread.start()
    }
}
