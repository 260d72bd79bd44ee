import Foundation

/// A Unix datagram socket bound at `path`, as systemd's notification socket is (tests play
/// systemd's part with it); `nil` when it cannot be bound. The caller closes it.
public func boundDatagramSocket(at path: String) -> Int32? {
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0 else {
        close(fd)
        return nil
    }
    return fd
}
