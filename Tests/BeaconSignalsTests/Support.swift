#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

private final class ThreadJob<T> {
    let body: () -> T
    var result: T?
    init(_ body: @escaping () -> T) { self.body = body }
}

/// Runs `body` on a new thread with the given stack size and returns its result.
func runOnThread<T>(stackSize: Int, _ body: @escaping () -> T) async -> T {
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    pthread_attr_setstacksize(&attributes, stackSize)
    let job = ThreadJob(body)
    let raw = Unmanaged.passRetained(job).toOpaque()
    #if canImport(Darwin)
    var thread: pthread_t?
    #else
    var thread = pthread_t()
    #endif
    let status = pthread_create(&thread, &attributes, { raw in
        let job = Unmanaged<AnyObject>.fromOpaque(raw!).takeUnretainedValue()
        (job as! Runnable).run()
        return nil
    }, raw)
    precondition(status == 0)
    #if canImport(Darwin)
    pthread_join(thread!, nil)
    #else
    pthread_join(thread, nil)
    #endif
    pthread_attr_destroy(&attributes)
    let finished = Unmanaged<ThreadJob<T>>.fromOpaque(raw).takeRetainedValue()
    return finished.result!
}

private protocol Runnable { func run() }
extension ThreadJob: Runnable {
    func run() { result = body() }
}
