import BeaconWire
import Foundation

/// A Unix datagram socket bound at `path`, as systemd's notification socket is (tests play
/// systemd's part with it); `nil` when it cannot be bound. The caller closes it.
public func boundDatagramSocket(at path: String) -> Int32? {
    guard let address = UnixSocketAddress(path: path) else { return nil }
    let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    guard address.withSockaddr({ bind(fd, $0, $1) }) == 0 else {
        close(fd)
        return nil
    }
    return fd
}
