#if canImport(Glibc)
import Glibc
#endif

/// A non-blocking pipe that other threads write to wake a thread blocked in
/// ``ZMQPoller/poll(timeoutMilliseconds:)``: the polling thread watches ``fileDescriptor``.
public final class WakePipe: @unchecked Sendable {
    /// The read end, polled by the waiting thread.
    public let fileDescriptor: Int32
    private let writeEnd: Int32

    /// Opens the pipe.
    /// - Throws: ``ZMQError`` with the `errno` of `pipe(2)`.
    public init() throws(ZMQError) {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw ZMQError(code: errno, operation: "pipe") }
        for fd in ends {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        fileDescriptor = ends[0]
        writeEnd = ends[1]
    }

    /// Wakes the polling thread; safe from any thread (a full pipe already means "wake").
    public func wake() {
        var one: UInt8 = 1
        _ = write(writeEnd, &one, 1)
    }

    /// Clears pending wake-ups; call it on the polling thread after the pipe polled readable.
    public func drain() {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(fileDescriptor, &buffer, buffer.count) > 0 {}
    }

    deinit {
        close(fileDescriptor)
        close(writeEnd)
    }
}
