import BeaconZMQ
internal import CBeaconAcceptGuard
import Glibc

/// Watches the connections of the request and publish sockets through their libzmq monitors,
/// counts them per peer (``ConnectionLedger``), and closes those the ledger sheds. Loop thread only.
///
/// libzmq owns each connection's descriptor; the guard only asks the kernel who is on the other
/// end (`SO_PEERCRED`, `getpeername`) and, to shed one, shuts it down (`shutdown(2)`, which
/// leaves the descriptor to libzmq: it sees the end of the stream and closes it itself).
final class ConnectionGuard {
    private(set) var ledger: ConnectionLedger
    /// The monitor of each watched socket, whose reader the loop polls.
    private(set) var monitors: [ConnectionLedger.Socket: ZMQMonitor] = [:]

    /// A connection shed, for the log.
    struct Shed {
        var peer: ConnectionPeer
        var verdict: ConnectionLedger.Verdict
    }

    init(perPeer: Int, descriptorLimit: Int) {
        ledger = ConnectionLedger(perPeer: perPeer, total: ConnectionLedger.total(forDescriptorLimit: descriptorLimit))
        // Shedding comes after libzmq has accepted: a burst can still fill the descriptor table,
        // where libzmq's ipc accept would abort the process. The guard refuses at accept instead.
        beacon_accept_guard_arm()
    }

    /// Connections refused at accept because the descriptor table was full, since start.
    var refusedAtAccept: UInt64 { UInt64(beacon_accept_guard_refused()) }

    /// Starts watching `socket`; a socket watched before under `role` (closed since) is forgotten.
    func watch(_ socket: ZMQSocket, as role: ConnectionLedger.Socket, name: String) throws(ZMQError) {
        stopWatching(role)
        monitors[role] = try socket.monitor(events: [.accepted, .disconnected], name: name)
    }

    /// Stops watching the socket of `role` and forgets its connections (it is being closed).
    func stopWatching(_ role: ConnectionLedger.Socket) {
        monitors.removeValue(forKey: role)?.stop()
        ledger.forgetAll(on: role)
    }

    /// Takes a reloaded per-peer limit; connections held already stay.
    func setPerPeerLimit(_ perPeer: Int) { ledger.perPeer = perPeer }

    /// Events applied per call of ``drain(_:closed:)`` at most: a peer that opens and closes
    /// connections as fast as it can must not keep the loop from everything else (the rest
    /// waits for the next pass; the monitor stays readable).
    static let eventsPerDrain = 1024

    /// Applies the waiting events of the socket of `role` (``eventsPerDrain`` at most); returns
    /// the connections shed. `closed` is told each descriptor whose connection is gone (or,
    /// seen again, was reused).
    func drain(_ role: ConnectionLedger.Socket, closed: (Int32) -> Void = { _ in }) -> [Shed] {
        guard let events = monitors[role] else { return [] }
        var shed: [Shed] = []
        var budget = Self.eventsPerDrain
        while budget > 0, let event = try? events.receiveEvent(flags: .dontWait) {
            budget -= 1
            let fd = Int32(bitPattern: event.value)
            if event.kind.contains(.accepted) {
                closed(fd)
                let peer = Self.peer(of: fd)
                let verdict = ledger.accepted(fd: fd, on: role, from: peer)
                if verdict != .keep {
                    Glibc.shutdown(fd, Int32(SHUT_RDWR))
                    shed.append(Shed(peer: peer, verdict: verdict))
                }
            }
            if event.kind.contains(.disconnected) {
                ledger.closed(fd: fd)
                closed(fd)
            }
        }
        return shed
    }

    /// Shuts down the connection with descriptor `fd` on the socket of `role` if it is still
    /// the one from `peer` (after applying waiting events, so that a descriptor closed and reused
    /// meanwhile is not taken for it). Returns whether it did.
    func shutDown(fd: Int32, on role: ConnectionLedger.Socket, from peer: ConnectionPeer,
                  closed: (Int32) -> Void, shed: ([Shed]) -> Void) -> Bool {
        shed(drain(role, closed: closed))
        guard ledger.peer(of: fd, on: role) == peer else { return false }
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
        return true
    }

    func close() {
        for role in Array(monitors.keys) { stopWatching(role) }
    }

    /// Who is on the other end of a connected socket.
    static func peer(of fd: Int32) -> ConnectionPeer {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(fd, $0, &length) }
        }
        guard named == 0 else { return .unknown }
        switch Int32(storage.ss_family) {
        case AF_UNIX:
            // struct ucred: pid, uid, gid.
            var credentials: (pid: Int32, uid: UInt32, gid: UInt32) = (0, 0, 0)
            var size = socklen_t(MemoryLayout.size(ofValue: credentials))
            guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) == 0 else { return .unknown }
            return .user(credentials.uid)
        case AF_INET:
            return withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var addr = address.pointee.sin_addr
                    return .address(Self.text(family: AF_INET, &addr, length: Int(INET_ADDRSTRLEN)))
                }
            }
        case AF_INET6:
            return withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                    var addr = address.pointee.sin6_addr
                    return .address(Self.text(family: AF_INET6, &addr, length: Int(INET6_ADDRSTRLEN)))
                }
            }
        default:
            return .unknown
        }
    }

    private static func text(family: Int32, _ address: inout in_addr, length: Int) -> String {
        var buffer = [CChar](repeating: 0, count: length)
        guard inet_ntop(family, &address, &buffer, socklen_t(length)) != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    private static func text(family: Int32, _ address: inout in6_addr, length: Int) -> String {
        var buffer = [CChar](repeating: 0, count: length)
        guard inet_ntop(family, &address, &buffer, socklen_t(length)) != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// The process's limit on open file descriptors.
enum DescriptorLimit {
    /// Raises the soft limit to the hard one (a daemon started by hand inherits a shell's 1,024)
    /// and returns the limit in force.
    static func raise() -> Int {
        var limits = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limits) == 0 else { return 1024 }
        if limits.rlim_cur < limits.rlim_max {
            var raised = limits
            raised.rlim_cur = min(limits.rlim_max, 1 << 20)
            if setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &raised) == 0 { limits = raised }
        }
        return Int(min(limits.rlim_cur, 1 << 20))
    }
}
