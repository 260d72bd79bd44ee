import BeaconProtocol
import Foundation

/// Keeps each connection's writes in order across `UPSTREAM_UNAVAILABLE` answers on a relay.
///
/// That answer says a write may or may not have been applied, and its client sends it again with
/// its write id. The writes the client sent after it, before it saw the answer, must not be
/// applied ahead of it — they would be, once the upstream is back. So once a write of a connection
/// is answered so, every later write of that connection is answered the same way, unforwarded,
/// until the client sends one of those writes again (by its write id): the sign that it went back
/// to the first write it could not account for, and sends in order from there. A client that
/// gives up on those writes instead is not held for long: a fence falls ``holdMilliseconds``
/// after the last write it turned away, or after the connection's last held answer was given,
/// whichever is later (what the client sent before it saw the answer arrives well within that).
/// It stands while the relay holds answers for the connection: the client sees an answer only
/// after those before it, and those can wait for the relay's mirror far longer than the hold.
///
/// Writes without a write id are never sent again as the same write: they neither set a fence nor
/// lift one. A value: no sockets; times are passed in (monotonic milliseconds).
struct WriteFences {
    private struct Fence {
        /// The write ids answered unavailable since the fence went up.
        var ids: Set<Data> = []
        /// When the last of them was answered, or the connection's last held answer given.
        var lastAnswered: UInt64
    }

    /// Per fenced connection, its fence.
    private var fenced: [RoutingID: Fence] = [:]
    /// Fenced connections, oldest first (some may have been lifted since).
    private var raised: [RoutingID] = []

    /// Fences kept at most: past it the oldest goes (its connection has most likely ended: the
    /// daemon is not told when a connection ends).
    static let maxConnections = 4096
    /// Write ids kept per fence at most: a client goes back to the first ones.
    static let maxIDsPerConnection = 65_536
    /// How long a fence stands after the last write it turned away: as long as a forwarded write
    /// waits for its answer, so that what a client sent before it saw the answer is turned away
    /// even by a relay that fell seconds behind its sockets.
    static let holdMilliseconds: UInt64 = 5000

    /// Connections fenced now.
    var count: Int { fenced.count }

    /// A write of `connection` with `writeID` was answered `UPSTREAM_UNAVAILABLE`.
    mutating func unavailable(_ connection: RoutingID, writeID: Data, at now: UInt64) {
        guard !writeID.isEmpty else { return }
        if fenced[connection] == nil {
            fenced[connection] = Fence(lastAnswered: now)
            raised.append(connection)
            evictOldest()
        }
        fenced[connection]!.lastAnswered = now
        if fenced[connection]!.ids.count < Self.maxIDsPerConnection { fenced[connection]!.ids.insert(writeID) }
    }

    /// The relay gave `connection` the last answer it held for it (its client can see the
    /// unavailable answers behind it now): a fence stands for the hold from now.
    mutating func answersGiven(_ connection: RoutingID, at now: UInt64) {
        guard fenced[connection] != nil else { return }
        fenced[connection]!.lastAnswered = max(fenced[connection]!.lastAnswered, now)
    }

    /// Whether a write of `connection` with `writeID` may be forwarded at `now`: no fence stands,
    /// or the write is one answered unavailable before, which lifts the fence.
    /// - Parameter answersHeld: whether the relay still holds answers for the connection (its
    ///   forwarded writes not answered yet): then the fence stands, however long ago it rose.
    mutating func admits(_ connection: RoutingID, writeID: Data, at now: UInt64, answersHeld: Bool) -> Bool {
        guard let fence = fenced[connection] else { return true }
        guard answersHeld || now < fence.lastAnswered + Self.holdMilliseconds else {
            fenced[connection] = nil
            return true
        }
        guard !writeID.isEmpty, fence.ids.contains(writeID) else { return false }
        fenced[connection] = nil
        return true
    }

    private mutating func evictOldest() {
        while fenced.count > Self.maxConnections, !raised.isEmpty {
            fenced[raised.removeFirst()] = nil
        }
        // Lifted fences leave entries behind: compacted once they are most of them.
        if raised.count > 2 * Self.maxConnections { raised.removeAll { fenced[$0] == nil } }
    }
}
