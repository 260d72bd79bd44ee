import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// File descriptors a process got from whoever started it.
///
/// A long-running daemon should not keep them: a parent that watches for a child's exit
/// through a socket or reads a child's output to its end waits for as long as anyone holds the
/// other end. Foundation's `Process` on Linux watches children that way, and a `beacond`
/// started while another child was being spawned could inherit that child's descriptors and
/// keep its parent waiting for as long as the daemon runs (swift-corelibs-foundation#4795).
public enum InheritedDescriptors {
    /// Closes every descriptor above standard error that does not close on exec: what this
    /// process opens itself is close-on-exec (Swift's runtime, libdispatch, libzmq and SQLite
    /// all open theirs that way), so these came from the parent. Call it first thing.
    /// - Returns: the descriptors closed.
    @discardableResult
    public static func closeAll() -> [Int32] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return [] }
        var closed: [Int32] = []
        for entry in entries {
            guard let fd = Int32(entry), fd > 2 else { continue }
            let flags = fcntl(fd, F_GETFD)
            // The directory listing's own descriptor is close-on-exec and gone by now (EBADF).
            guard flags >= 0, flags & FD_CLOEXEC == 0 else { continue }
            close(fd)
            closed.append(fd)
        }
        return closed.sorted()
    }
}
