import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An exclusive `flock` on a file in the runtime directory: one daemon per directory. The
/// kernel releases it when the process dies, however it dies.
final class InstanceLock {
    private var descriptor: Int32

    /// Takes the lock at `path`, or throws a ``DaemonError`` naming the holder's pid.
    init(path: String) throws(DaemonError) {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw DaemonError(.startup, "cannot open lock file \(path): \(String(cString: strerror(errno)))")
        }
        if flock(fd, LOCK_EX | LOCK_NB) != 0 {
            var buffer = [UInt8](repeating: 0, count: 32)
            let count = pread(fd, &buffer, buffer.count, 0)
            let holder = String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            close(fd)
            let directory = (path as NSString).deletingLastPathComponent
            throw DaemonError(.alreadyRunning, "another beacond (pid \(holder.isEmpty ? "?" : holder)) is running on \(directory)")
        }
        let pid = "\(getpid())\n"
        ftruncate(fd, 0)
        _ = pid.withCString { pwrite(fd, $0, strlen($0), 0) }
        descriptor = fd
    }

    /// Releases the lock. Idempotent.
    func release() {
        guard descriptor >= 0 else { return }
        close(descriptor)
        descriptor = -1
    }

    deinit { release() }
}
