import Glibc

/// The address of a unix socket at a file system path: the one place a path becomes a
/// `sockaddr_un` for the tools, benchmarks and tests that open plain unix sockets.
public struct UnixSocketAddress: Sendable {
    /// The socket file's path.
    public let path: String
    private var storage = sockaddr_un()

    /// `nil` when `path` does not fit in a `sockaddr_un` (107 bytes and a terminating zero).
    public init?(path: String) {
        self.path = path
        storage.sun_family = sa_family_t(AF_UNIX)
        let fits = withUnsafeMutableBytes(of: &storage.sun_path) { buffer in
            guard path.utf8.count < buffer.count else { return false }
            buffer.copyBytes(from: path.utf8)
            buffer[path.utf8.count] = 0
            return true
        }
        guard fits else { return nil }
    }

    /// Calls `body` with the address as the socket calls take it.
    public func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        withUnsafePointer(to: storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Opens a stream socket connected to this address (retrying on `EINTR`).
    /// - Returns: its descriptor, which the caller closes; -1 with `errno` set when the socket
    ///   cannot be made or the connection is refused.
    public func connectStream() -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return -1 }
        var result: Int32
        repeat {
            result = withSockaddr { connect(fd, $0, $1) }
        } while result != 0 && errno == EINTR
        guard result == 0 else {
            let reason = errno
            close(fd)
            errno = reason
            return -1
        }
        return fd
    }
}

/// Whether a connection to the unix socket at `path` is refused: nobody listens there, and the
/// file is one a daemon that was killed left behind. A slow daemon still accepts connections.
public func unixSocketRefusesConnections(atPath path: String) -> Bool {
    guard let address = UnixSocketAddress(path: path) else { return false }
    let fd = address.connectStream()
    if fd >= 0 {
        close(fd)
        return false
    }
    return errno == ECONNREFUSED
}

/// Opens a plain tcp connection to `port` on 127.0.0.1 (no ZMTP: the tools, benchmarks and
/// tests that hold raw connections use it).
/// - Returns: its descriptor, which the caller closes; -1 with `errno` set when none was made.
public func connectLoopbackTCP(port: UInt16) -> Int32 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return -1 }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard connected == 0 else {
        let reason = errno
        close(fd)
        errno = reason
        return -1
    }
    return fd
}
