#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps nested first evaluations (a computed reading a never-evaluated computed reading …)
/// from overflowing the thread's stack.
///
/// The outermost evaluation records where the stack stood; nested evaluations may use `budget`
/// bytes below that. Past it, evaluation continues on a helper thread with a large stack while
/// the calling thread waits, so 10,000-deep chains work even on a 512 KiB secondary thread.
///
/// The stack position is the address of a local variable. Under AddressSanitizer with fake
/// stacks (`detect_stack_use_after_return`, on by default) locals live elsewhere and the guard
/// cannot measure: run sanitized tests with `ASAN_OPTIONS=detect_stack_use_after_return=0`.
enum StackGuard {
    /// Stack the nested evaluations of one thread may use before moving to a helper thread.
    static let budget: UInt = 192 * 1024
    /// Size of each helper thread's stack (reserved address space; pages are committed on use).
    static let helperStackSize = 64 * 1024 * 1024

    /// The current stack position, approximately.
    @inline(never)
    static func stackPosition() -> UInt {
        var marker: UInt8 = 0
        return withUnsafeMutablePointer(to: &marker) { UInt(bitPattern: $0) }
    }

    /// Whether nested evaluation has used up its budget below `base`.
    static func isLow(base: UInt) -> Bool {
        let here = stackPosition()
        return here < base && base - here > budget
    }

    private final class Job {
        let context: ReactiveContext
        let body: () -> Void
        init(context: ReactiveContext, body: @escaping () -> Void) {
            self.context = context
            self.body = body
        }
    }

    /// Runs `body` to completion on a helper thread that shares `context`, while the calling
    /// thread waits. Nothing runs concurrently: this only lends `body` a deeper stack.
    static func runOnLargeStack(context: ReactiveContext, _ body: @escaping () -> Void) {
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setstacksize(&attributes, helperStackSize)
        let job = Unmanaged.passRetained(Job(context: context, body: body))
        #if canImport(Darwin)
        var thread: pthread_t?
        #else
        var thread = pthread_t()
        #endif
        let status = pthread_create(&thread, &attributes, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            job.context.install()
            let savedBase = job.context.pointee.stackBase
            job.context.pointee.stackBase = StackGuard.stackPosition()
            job.body()
            job.context.pointee.stackBase = savedBase
            job.context.uninstall()
            return nil
        }, job.toOpaque())
        guard status == 0 else {
            // No thread to lend a stack: evaluate here and hope the stack suffices.
            let job = job.takeRetainedValue()
            job.body()
            return
        }
        #if canImport(Darwin)
        pthread_join(thread!, nil)
        #else
        pthread_join(thread, nil)
        #endif
    }
}
