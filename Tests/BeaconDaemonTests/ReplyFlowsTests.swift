@testable import BeaconDaemon
import BeaconZMQ
import Testing
import BeaconTestSupport

/// ``ReplyFlows`` alone, playing libzmq: replies handed are held until the test lets go of them.
/// What is handed, what waits, in which order it leaves, and which connection is closed when a
/// bound is passed.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct ReplyFlowsTests {
    static let limits = ReplyFlows.Limits(perConnection: 1000, perPeer: 1500, total: 2500, handOff: 100, trackedBytes: 10)

    /// libzmq's side: what it holds, by connection, as release calls.
    final class Zmq {
        var held: [UInt8: [@Sendable () -> Void]] = [:]
        /// Writes out everything held for `connection`.
        func writeOut(_ connection: UInt8) {
            for release in held[connection] ?? [] { release() }
            held[connection] = nil
        }
    }

    func id(_ value: UInt8) -> RoutingID { [0, 0, 0, 0, value].withUnsafeBytes { RoutingID($0) } }

    func reply(_ connection: UInt8, _ tag: UInt8, size: Int) -> ReplyFlows.Reply {
        ReplyFlows.Reply(envelope: ReplyEnvelope(connection: id(connection)), body: [tag] + Array(repeating: 0, count: size - 1))
    }

    /// Offers a reply; returns "send" (handed to `zmq`), "kept", or which descriptor to close.
    func offer(_ flows: inout ReplyFlows, _ zmq: Zmq, _ connection: UInt8, _ tag: UInt8, size: Int) -> String {
        switch flows.offer(reply(connection, tag, size: size), size: size, to: id(connection)) {
        case .send(let tracking):
            if let tracking { zmq.held[connection, default: []].append(tracking.hand(size)) }
            return "send"
        case .kept: return "kept"
        case .keptClosing(let victim): return "close \(victim.fd)"
        }
    }

    /// Flushes, handing to `zmq` what it takes (all but a reply tagged `refusing`); returns the
    /// tags handed, in order.
    func flush(_ flows: inout ReplyFlows, _ zmq: Zmq, refusing: UInt8? = nil) -> [UInt8] {
        var handed: [UInt8] = []
        flows.flush { reply, tracking in
            guard reply.body[0] != refusing else { return false }
            let connection = reply.envelope.connection.withBytes { $0[4] }
            if let tracking { zmq.held[connection, default: []].append(tracking.hand(reply.body.count)) }
            handed.append(reply.body[0])
            return true
        }
        return handed
    }

    /// A peer's count of what libzmq holds outlived its connections: one entry per uid or tcp
    /// address ever seen, for the daemon's life.
    @Test("A routing id gives back the bytes it was read from, whatever their length, and is equal only to the same bytes")
    func aRoutingIDKeepsItsBytes() {
        let ids: [[UInt8]] = [[], [0], [0, 0, 0, 0, 1], [0x80, 0, 0, 0, 0xff], Array(0..<8), Array(0..<9), Array(repeating: 7, count: 255)]
        for bytes in ids {
            let id = bytes.withUnsafeBytes { RoutingID($0) }
            #expect(id.withBytes { Array($0) } == bytes)
        }
        // Leading zero bytes count: [1] and [0, 1] pack to the same number but are two ids.
        #expect([1].withUnsafeBytes { RoutingID($0) } != [0, 1].withUnsafeBytes { RoutingID($0) })
    }

    @Test func aPeersCountGoesWithItsLastConnectionOnceLibzmqLetsGo() {
        var flows = ReplyFlows(limits: Self.limits)
        let zmq = Zmq()
        for connection in UInt8(1)...100 {
            flows.connected(id(connection), fd: Int32(connection), peer: .user(UInt32(6000) + UInt32(connection)))
        }
        flows.connected(id(101), fd: 101, peer: .user(6001))  // a second connection of the first peer
        #expect(offer(&flows, zmq, 1, 1, size: 50) == "send")
        #expect(flows.peersCounted == 100)
        for connection in UInt8(2)...100 { flows.disconnected(fd: Int32(connection)) }
        #expect(flows.peersCounted == 1)
        flows.disconnected(fd: 1)
        #expect(flows.peersCounted == 1, "its other connection is open")
        flows.disconnected(fd: 101)
        #expect(flows.peersCounted == 1, "libzmq still holds its reply")
        zmq.writeOut(1)
        flows.connected(id(102), fd: 102, peer: .user(6001))
        flows.disconnected(fd: 102)
        #expect(flows.peersCounted == 0)
    }

    @Test func repliesAreHandedAsLibzmqWritesThemAndWaitInOrderMeanwhile() {
        var flows = ReplyFlows(limits: Self.limits)
        let zmq = Zmq()
        flows.connected(id(1), fd: 11, peer: .user(5001))
        // Up to handOff bytes are held by libzmq at once, and one reply of any size alone.
        #expect(offer(&flows, zmq, 1, 1, size: 60) == "send")
        #expect(offer(&flows, zmq, 1, 2, size: 40) == "send")
        #expect(flows.bytesInFlight(id(1)) == 100)
        // Beyond: replies wait, in order, even one small enough to go untracked.
        #expect(offer(&flows, zmq, 1, 3, size: 90) == "kept")
        #expect(offer(&flows, zmq, 1, 4, size: 5) == "kept")
        #expect(flows.waitingBytes == 95 && flows.hasWaiting)
        #expect(flush(&flows, zmq).isEmpty)
        // libzmq wrote them out: the waiting ones leave, in order.
        zmq.writeOut(1)
        #expect(flows.bytesInFlight(id(1)) == 0)
        #expect(flush(&flows, zmq) == [3, 4])
        #expect(flows.waitingBytes == 0 && !flows.hasWaiting)
        // Small replies go at once while nothing waits.
        #expect(offer(&flows, zmq, 1, 5, size: 9) == "send")
        // A reply libzmq refused (its queue full) goes first when the connection is offered again,
        // and one refused while flushing stays first, with the rest behind it.
        #expect(offer(&flows, zmq, 1, 6, size: 50) == "kept")
        flows.putBack(reply(1, 7, size: 9), to: id(1))
        zmq.writeOut(1)
        #expect(flush(&flows, zmq, refusing: 6) == [7])
        #expect(flush(&flows, zmq) == [6])
        // A connection not known yet whose reply libzmq refused is bounded from then on.
        flows.putBack(reply(8, 1, size: 9), to: id(8))
        #expect(offer(&flows, zmq, 8, 2, size: 9) == "kept")
        #expect(flush(&flows, zmq) == [1, 2])
        // A connection that never sent a request (or is gone) is not bounded here.
        #expect(offer(&flows, zmq, 9, 1, size: 10_000) == "send")
    }

    @Test func aConnectionPastItsBoundIsClosedAndItsRepliesDropped() {
        var flows = ReplyFlows(limits: Self.limits)
        let zmq = Zmq()
        flows.connected(id(1), fd: 11, peer: .user(5001))
        #expect(offer(&flows, zmq, 1, 1, size: 500) == "send")  // the first reply goes, however large
        #expect(offer(&flows, zmq, 1, 2, size: 600) == "kept")
        #expect(offer(&flows, zmq, 1, 3, size: 600) == "close 11")
        flows.close(id(1), now: MonotonicTime(milliseconds: 1_000))
        #expect(flows.waitingBytes == 0 && !flows.hasWaiting && flows.closedConnections == 1)
        // Its requests still arriving are dropped for a while; other connections' are not.
        let soon = flows.isClosed(id(1), now: MonotonicTime(milliseconds: 2_000))
        let other = flows.isClosed(id(2), now: MonotonicTime(milliseconds: 2_000))
        let later = flows.isClosed(id(1), now: MonotonicTime(milliseconds: 1_000 + ReplyFlows.closedMilliseconds))
        #expect(soon && !other && !later)
    }

    @Test func aPeersConnectionsTogetherAndAllConnectionsTogetherAreBounded() {
        var flows = ReplyFlows(limits: Self.limits)
        let zmq = Zmq()
        let peers: [(UInt8, ConnectionPeer)] = [(1, .user(5001)), (2, .user(5001)), (3, .user(0)), (4, .user(0)), (5, .address("10.0.0.1"))]
        for (connection, peer) in peers {
            flows.connected(id(connection), fd: Int32(10 + connection), peer: peer)
            #expect(offer(&flows, zmq, connection, 0, size: 100) == "send")  // libzmq holds its share
        }
        // What libzmq holds counts too: 200 for peer 5001 (its two connections), 500 for all.
        #expect(offer(&flows, zmq, 1, 1, size: 900) == "kept")
        #expect(offer(&flows, zmq, 2, 1, size: 400) == "kept")  // 1,300 waiting + 200 held: at the bound
        // Past the peer's bound: its connection holding the most is closed, not the last one.
        #expect(offer(&flows, zmq, 2, 2, size: 200) == "close 11")
        flows.close(id(1), now: MonotonicTime(milliseconds: 0))
        // The superuser has no per-peer bound; everyone together has one (libzmq still holds
        // the closed connection's 100 until it lets go of them).
        #expect(offer(&flows, zmq, 3, 1, size: 900) == "kept")
        #expect(offer(&flows, zmq, 4, 1, size: 400) == "kept")
        #expect(flows.waitingBytes == 1900)
        #expect(offer(&flows, zmq, 5, 1, size: 200) == "close 13")
    }

    @Test func aConnectionGoneOrItsDescriptorReusedDropsWhatWaitedForIt() {
        var flows = ReplyFlows(limits: Self.limits)
        let zmq = Zmq()
        flows.connected(id(1), fd: 11, peer: .user(5001))
        #expect(offer(&flows, zmq, 1, 1, size: 200) == "send")
        #expect(offer(&flows, zmq, 1, 2, size: 200) == "kept")
        flows.disconnected(fd: 11)
        #expect(flows.waitingBytes == 0 && !flows.knows(id(1)))
        // A new connection on the same descriptor replaces the old one's record.
        flows.connected(id(1), fd: 11, peer: .user(5001))
        #expect(offer(&flows, zmq, 1, 3, size: 200) == "send")
        #expect(offer(&flows, zmq, 1, 4, size: 200) == "kept")
        flows.connected(id(2), fd: 11, peer: .user(5002))
        #expect(flows.waitingBytes == 0 && !flows.knows(id(1)) && flows.knows(id(2)))
        #expect(flows.closedConnections == 0)
    }
}
