import Glibc

/// Whether a connection to the unix socket at `path` is refused: nobody listens there, and the
/// file is one a daemon that was killed left behind. A slow daemon still accepts connections.
public func unixSocketRefusesConnections(atPath path: String) -> Bool {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let fits = withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        guard path.utf8.count < buffer.count else { return false }
        for (index, byte) in path.utf8.enumerated() { buffer[index] = byte }
        return true
    }
    guard fits else { return false }
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var result: Int32
    repeat {
        result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    } while result != 0 && errno == EINTR
    return result != 0 && errno == ECONNREFUSED
}
