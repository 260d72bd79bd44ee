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
///
/// The threads are started by one thread of its own, not by whoever enqueues a job: a new thread
/// inherits its creator's CPU placement and scheduling policy, and jobs are often enqueued from
/// a daemon's loop thread (resuming a test that waited for it), which runs placed on one CPU.
public final class ThreadPerJobExecutor: TaskExecutor, @unchecked Sendable {
    public static let shared = ThreadPerJobExecutor()

    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []

    private init() {
        let starter = Thread { [unowned self] in
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let ready = jobs
                jobs.removeAll()
                condition.unlock()
                for job in ready {
                    let thread = Thread { [unowned self] in job.runSynchronously(on: asUnownedTaskExecutor()) }
                    thread.stackSize = 4 << 20
                    thread.start()
                }
            }
        }
        starter.name = "test-job-starter"
        starter.start()
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }
}
