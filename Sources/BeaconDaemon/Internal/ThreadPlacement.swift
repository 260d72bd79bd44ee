internal import CBeaconKernel
import Glibc

/// A thread's CPUs and scheduling policy, read from and applied to the calling thread.
///
/// The daemon keeps its loop and libzmq's I/O thread on one CPU with `SCHED_BATCH`
/// (``DaemonConfiguration/loopCPU``). The two hand every request, reply and diff to each other.
/// On two CPUs each hand-over wakes the other CPU, which on a virtual machine costs an exit to the
/// hypervisor, and the I/O thread, woken at once, sends each few messages the loop queues in
/// their own `sendto`, waking the peer's process as often. On one CPU, with no preemption on
/// wake-up, a woken thread waits until the other one blocks: the loop queues a whole group's
/// diffs and replies, then the I/O thread sends them in few large writes (BENCHMARKS.md).
struct ThreadPlacement: Equatable {
    /// Bit `n` of byte `n / 8`: the thread may run on CPU `n` (the kernel's `cpu_set_t`).
    var mask: [UInt8]
    /// `SCHED_OTHER`, `SCHED_BATCH`, …
    var policy: Int32
    var priority: Int32

    /// `SCHED_BATCH` from `<linux/sched.h>`: Glibc hides it without `_GNU_SOURCE`.
    static let batchPolicy: Int32 = 3
    /// Room for 1,024 CPUs, the size of glibc's `cpu_set_t`.
    private static let maskBytes = 128

    /// What stopped a placement: the call and its `errno`.
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var code: Int32
        var description: String { "\(call): \(String(cString: strerror(code)))" }
    }

    /// The calling thread's placement.
    static func current() throws(Failure) -> ThreadPlacement {
        var mask = [UInt8](repeating: 0, count: maskBytes)
        let written = mask.withUnsafeMutableBufferPointer { cbeacon_get_thread_cpus($0.baseAddress, $0.count) }
        guard written >= 0 else { throw Failure(call: "sched_getaffinity", code: errno) }
        var policy: Int32 = 0
        var parameters = sched_param()
        let code = pthread_getschedparam(pthread_self(), &policy, &parameters)
        guard code == 0 else { throw Failure(call: "pthread_getschedparam", code: code) }
        return ThreadPlacement(mask: mask, policy: policy, priority: parameters.sched_priority)
    }

    /// CPU `cpu` alone, scheduled as batch work (a woken thread does not preempt the running one).
    static func batch(onCPU cpu: Int) -> ThreadPlacement {
        var mask = [UInt8](repeating: 0, count: maskBytes)
        mask[cpu / 8] |= 1 << UInt8(cpu % 8)
        return ThreadPlacement(mask: mask, policy: batchPolicy, priority: 0)
    }

    /// The CPUs this placement allows, in increasing order.
    var cpus: [Int] {
        (0..<mask.count * 8).filter { mask[$0 / 8] & (1 << UInt8($0 % 8)) != 0 }
    }

    /// Whether `cpu` can be named in a placement (it fits the mask).
    static func isRepresentable(cpu: Int) -> Bool { cpu >= 0 && cpu < maskBytes * 8 }

    /// Applies this placement to the calling thread. Threads it creates afterwards inherit it.
    func apply() throws(Failure) {
        let set = mask.withUnsafeBufferPointer { cbeacon_set_thread_cpus($0.baseAddress, $0.count) }
        guard set == 0 else { throw Failure(call: "sched_setaffinity", code: errno) }
        var parameters = sched_param()
        parameters.sched_priority = priority
        // Through pthread, not sched_setscheduler: glibc caches a thread's policy, hands the cached
        // one to the threads it creates, and libzmq's I/O thread sets itself to what it reads there.
        let code = pthread_setschedparam(pthread_self(), policy, &parameters)
        guard code == 0 else { throw Failure(call: "pthread_setschedparam", code: code) }
    }
}

/// Names the calling thread as `top`, `perf` and /proc show it (15 bytes at most). Foundation's
/// `Thread.name` does not always reach the kernel: a thread started while its creator is busy
/// keeps the creator's name, such as libdispatch's `oot.default-qos`.
func nameCurrentThread(_ name: String) {
    _ = cbeacon_name_thread(name)
}
