/// Who a connection comes from, as the kernel tells it when the connection is accepted:
/// before any handshake, so a tcp peer is known only by its address.
enum ConnectionPeer: Hashable, CustomStringConvertible {
    /// A local process on an ipc socket, by its user id (`SO_PEERCRED`).
    case user(UInt32)
    /// A tcp peer, by its IP address.
    case address(String)
    /// The kernel could not say (the connection was gone already).
    case unknown

    var description: String {
        switch self {
        case .user(let uid): "uid:\(uid)"
        case .address(let address): "address:\(address)"
        case .unknown: "unknown"
        }
    }
}

/// The daemon's accepted connections, per peer and in all, and the decision whether to keep a
/// new one. State only: ``ConnectionGuard`` reads the monitors and closes what this sheds.
///
/// Every connection holds a file descriptor, and libzmq aborts the whole process when `accept`
/// finds none left (its ipc listener). So connections are shed well before the descriptor limit:
/// a peer holding `perPeer` connections gets no more, and once `total` are open nobody does.
/// Shed connections count until they are gone, because their descriptors are held until then.
struct ConnectionLedger {
    enum Socket: Hashable {
        case requests, subscribers
    }

    enum Verdict: Equatable {
        case keep
        /// Close it: the peer holds its limit already.
        case shedPeerLimit
        /// Close it: the daemon holds as many connections as its descriptors allow.
        case shedTotalLimit
    }

    /// Connections one peer may hold (0: no limit); the superuser has none.
    var perPeer: Int
    /// Connections all peers may hold together.
    var total: Int

    private struct Open {
        var socket: Socket
        var peer: ConnectionPeer
        var kept: Bool
    }

    /// Open connections by descriptor.
    private var open: [Int32: Open] = [:]
    private var byPeer: [ConnectionPeer: Int] = [:]
    private var kept: [Socket: Int] = [:]
    /// Connections shed since start.
    private(set) var shed: UInt64 = 0

    init(perPeer: Int, total: Int) {
        self.perPeer = perPeer
        self.total = total
    }

    /// Connections on `socket` now, not counting those being shed.
    func count(_ socket: Socket) -> Int { kept[socket, default: 0] }

    /// Connections `peer` holds now, shed ones included.
    func count(of peer: ConnectionPeer) -> Int { byPeer[peer, default: 0] }

    /// Every descriptor held for a connection now.
    var descriptors: Int { open.count }

    /// The descriptors and peers of the connections kept open on `socket`.
    func connections(on socket: Socket) -> [(fd: Int32, peer: ConnectionPeer)] {
        open.compactMap { $0.value.socket == socket && $0.value.kept ? ($0.key, $0.value.peer) : nil }
    }

    /// The peer of the connection with descriptor `fd` on `socket`, if it is open.
    func peer(of fd: Int32, on socket: Socket) -> ConnectionPeer? {
        guard let entry = open[fd], entry.socket == socket else { return nil }
        return entry.peer
    }

    /// Records a connection accepted on `socket` with descriptor `fd` and decides its fate.
    mutating func accepted(fd: Int32, on socket: Socket, from peer: ConnectionPeer) -> Verdict {
        // A descriptor seen again was closed and reused before its close was reported.
        closed(fd: fd)
        let verdict: Verdict
        if open.count >= total {
            verdict = .shedTotalLimit
        } else if perPeer > 0, peer != .user(0), byPeer[peer, default: 0] >= perPeer {
            verdict = .shedPeerLimit
        } else {
            verdict = .keep
        }
        open[fd] = Open(socket: socket, peer: peer, kept: verdict == .keep)
        byPeer[peer, default: 0] += 1
        if verdict == .keep { kept[socket, default: 0] += 1 } else { shed += 1 }
        return verdict
    }

    /// Records that the connection with descriptor `fd` is gone.
    mutating func closed(fd: Int32) {
        guard let entry = open.removeValue(forKey: fd) else { return }
        byPeer[entry.peer, default: 1] -= 1
        if byPeer[entry.peer] == 0 { byPeer[entry.peer] = nil }
        if entry.kept { kept[entry.socket, default: 1] -= 1 }
    }

    /// Forgets every connection of `socket` (it was closed, and with it its monitor).
    mutating func forgetAll(on socket: Socket) {
        for (fd, entry) in open where entry.socket == socket { closed(fd: fd) }
    }

    /// The connections a descriptor limit leaves room for: a quarter of it (at least 64) stays
    /// free for the journal, the sockets' own descriptors and connections accepted faster than the
    /// loop reads their events.
    static func total(forDescriptorLimit limit: Int) -> Int {
        max(limit - max(limit / 4, 64), 16)
    }
}
