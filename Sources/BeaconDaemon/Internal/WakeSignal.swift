#if canImport(Glibc)
import Glibc
#endif

/// A non-blocking pipe that another thread writes to wake the daemon's poll loop.
final class WakeSignal: @unchecked Sendable {
    /// The read end, polled by the loop.
    let fileDescriptor: Int32
    private let writeEnd: Int32

    init() throws(DaemonError) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw DaemonError(.startup, "pipe: \(String(cString: strerror(errno)))") }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = ends[0]
        writeEnd = ends[1]
    }

    /// Wakes the loop; safe from any thread (a full pipe already means "wake").
    func wake() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }

    /// Clears pending wake-ups (loop thread).
    func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fileDescriptor, &buffer, buffer.count) > 0 {}
    }

    deinit {
        close(fileDescriptor)
        close(writeEnd)
    }
}
