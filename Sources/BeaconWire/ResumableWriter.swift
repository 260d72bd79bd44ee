import BeaconProtocol
import Foundation

/// Writes sent in order with many in flight, each applied exactly once and in order whatever
/// happens to the daemon — or stopped at the first write that cannot be accounted for, with
/// nothing sent after it.
///
/// Every write carries a write id of this writer's own (PROTOCOL.md §4.2: the daemon applies a
/// write id at most once, also across restarts). The connection never reconnects by itself
/// (`WireClient(reconnects: false)`), so nothing queued for a daemon that stopped reaches the
/// next one ahead of what was lost. When the connection ends, the writer connects anew, checks
/// that the journal is the same one (its epoch), and sends every unanswered write again, in
/// order: those the daemon applied before are answered with their first result (`replayed`),
/// the others are applied now.
///
/// A relay that cannot reach its upstream answers `UPSTREAM_UNAVAILABLE` (perhaps applied), and
/// turns away this connection's later writes until one of those comes back (PROTOCOL.md §7.6).
/// The writer then sends nothing new: it waits for the answers to every write in flight, then
/// until the relay reaches its upstream again (its pings say so, asked at growing intervals),
/// and sends the writes turned away again, in order, on the same connection. It never sends its
/// window again while the relay still has the last copy to read: a relay that reads each write
/// many times falls behind by seconds, and answers nothing in the meantime.
///
/// It stops (``Stopped``) when no daemon answers within the patience, or when the journal was
/// replaced (writes answered before are in the old one, and unanswered ones cannot be known).
/// Not thread-safe: one thread drives it.
public final class ResumableWriter {
    /// The answer to one submitted write.
    public enum Outcome {
        /// Applied (perhaps before, and answered now from the daemon's memory of its write id).
        case committed(line: Int, Beacon_V1_WriteReply)
        /// Refused by the daemon: not applied.
        case refused(line: Int, Beacon_V1_Error)
    }

    /// Why the writer stopped. Writes from ``firstUnaccountedLine`` on may or may not be applied;
    /// none submitted after it was sent after the stop.
    public struct Stopped: Error, CustomStringConvertible {
        public enum Reason: Sendable, Equatable {
            /// No daemon answered within the patience.
            case unavailable
            /// The daemon's journal is another one than when the writer started.
            case journalReplaced
            /// The daemon refused this peer's connection.
            case refused
        }
        public let reason: Reason
        public let description: String
    }

    private struct Pending {
        let line: Int
        var op: Beacon_V1_Request.OneOf_Op
        var requestID: UInt64
    }

    private let connect: () throws(WireError) -> WireClient
    private let window: Int
    private let patienceMilliseconds: Int
    private let runID: String
    private var client: WireClient
    /// The journal's epoch when the writer started.
    private let epoch: UInt64
    /// Writes sent and not yet answered, in the order they were submitted.
    private var pending: [Pending] = []
    private var pendingStart = 0
    /// Index in `pending` of each request id in flight.
    private var indexOfRequest: [UInt64: Int] = [:]
    /// Answers not returned to the caller yet.
    private var answers: [Outcome] = []
    /// Answered lines past the first unanswered one.
    private var answeredOutOfTurn = Set<Int>()
    private var lastProgress = DispatchTime.now().uptimeNanoseconds
    /// When a relay first answered that it could not reach its upstream, since the last write
    /// it applied.
    private var upstreamUnavailableSince: UInt64?
    /// Writes a relay turned away because it could not reach its upstream, to be sent again once
    /// nothing is in flight and it can.
    private var turnedAway = Set<Int>()
    /// How long the writer waits before it asks again whether a relay reaches its upstream
    /// (doubled each time, up to a second; back to the least after a write is applied).
    private var upstreamPollMicroseconds = upstreamPollLeastMicroseconds
    private static let upstreamPollLeastMicroseconds: useconds_t = 50_000
    /// How many times the writer sent its unanswered writes again.
    public private(set) var resends = 0
    /// New connections since the last answer: a write that ends every connection it is sent on
    /// (one libzmq will not take) must not be sent for ever.
    private var reconnectionsWithoutAnswer = 0
    private static let reconnectionsWithoutAnswerLimit = 3

    /// Connects with `connect` (called again for each new connection; it must make a client with
    /// `reconnects: false`) and learns the journal's epoch.
    /// - Parameters:
    ///   - window: writes in flight at most.
    ///   - patienceMilliseconds: how long the writer waits for an answer, or for a daemon to
    ///     connect to, before it stops.
    public init(window: Int, patienceMilliseconds: Int, connect: @escaping () throws(WireError) -> WireClient) throws(Stopped) {
        self.connect = connect
        self.window = max(window, 1)
        self.patienceMilliseconds = patienceMilliseconds
        runID = (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0 ... .max)) }.joined()
        let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(patienceMilliseconds) * 1_000_000
        (client, epoch) = try Self.connectAndPing(connect, until: deadline, patience: patienceMilliseconds)
        lastProgress = DispatchTime.now().uptimeNanoseconds
    }

    /// The first submitted line not answered yet; `nil` when every submitted line is answered.
    public var firstUnaccountedLine: Int? { pendingStart < pending.count ? pending[pendingStart].line : nil }

    /// Sends the write of input `line` (lines increase), after waiting for room in the window.
    /// - Returns: the answers that came meanwhile, in the order they came. When it throws, those
    ///   are in ``takeAnswers()``.
    public func submit(_ op: Beacon_V1_Request.OneOf_Op, line: Int) throws(Stopped) -> [Outcome] {
        // Nothing new goes while writes wait to be sent again: the relay would turn it away.
        while pending.count - pendingStart >= window || !turnedAway.isEmpty { try receiveOne() }
        let identified = Self.withWriteID(op, Array("\(runID)-\(line)".utf8))
        pending.append(Pending(line: line, op: identified, requestID: 0))
        try send(index: pending.count - 1)
        return takeAnswers()
    }

    /// Waits for the answers to every write in flight.
    /// - Returns: the answers, in the order they came. When it throws, those that came are in
    ///   ``takeAnswers()``.
    public func finish() throws(Stopped) -> [Outcome] {
        while pendingStart < pending.count { try receiveOne() }
        return takeAnswers()
    }

    /// The answers that came and were not returned yet (after a ``Stopped``, say).
    public func takeAnswers() -> [Outcome] {
        defer { answers.removeAll(keepingCapacity: true) }
        return answers
    }

    // MARK: Sending and answers

    private func send(index: Int) throws(Stopped) {
        while true {
            do {
                let id = try client.send(pending[index].op)
                pending[index].requestID = id
                indexOfRequest[id] = index
                return
            } catch where error.kind == .connectionLost || error.kind == .timeout || error.kind == .transport {
                try resendAfterReconnecting()
                // Resending sent this write too, if it was pending already.
                if pending[index].requestID != 0 && indexOfRequest[pending[index].requestID] == index { return }
            } catch {
                throw Stopped(reason: .refused, description: error.message)
            }
        }
    }

    private func receiveOne() throws(Stopped) {
        if indexOfRequest.isEmpty && !turnedAway.isEmpty { return try resendTurnedAwayOnceTheUpstreamIsReachable() }
        let reply: Beacon_V1_Reply?
        do {
            reply = try client.receiveReply(timeoutMilliseconds: 100)
        } catch where error.kind == .refused {
            throw Stopped(reason: .refused, description: error.message)
        } catch {
            try resendAfterReconnecting()
            return
        }
        guard let reply else {
            let waited = (DispatchTime.now().uptimeNanoseconds - lastProgress) / 1_000_000
            if waited >= UInt64(patienceMilliseconds) {
                throw Stopped(reason: .unavailable, description: "no answer from the daemon at \(client.requestEndpoint) within \(patienceMilliseconds) ms")
            }
            return
        }
        guard let index = indexOfRequest.removeValue(forKey: reply.id) else { return }
        let now = DispatchTime.now().uptimeNanoseconds
        lastProgress = now
        reconnectionsWithoutAnswer = 0
        let line = pending[index].line
        switch reply.result {
        case .write(let write):
            upstreamUnavailableSince = nil
            upstreamPollMicroseconds = Self.upstreamPollLeastMicroseconds
            answers.append(.committed(line: line, write))
        case .error(let error) where error.code == .upstreamUnavailable:
            // Perhaps applied: sent again with its write id, with what follows it, once the
            // relay reaches its upstream again.
            upstreamUnavailableSince = upstreamUnavailableSince ?? now
            try checkUpstreamPatience(error.message)
            pending[index].requestID = 0
            turnedAway.insert(index)
            return
        case .error(let error):
            answers.append(.refused(line: line, error))
        default:
            answers.append(.refused(line: line, .with { $0.message = "unexpected reply" }))
        }
        answered(index)
    }

    /// Marks `pending[index]` answered and moves the start past every answered write.
    private func answered(_ index: Int) {
        pending[index].requestID = 0
        pending[index].op = .ping(.init())  // its bytes are not needed any more
        answeredOutOfTurn.insert(index)
        while pendingStart < pending.count, answeredOutOfTurn.remove(pendingStart) != nil { pendingStart += 1 }
        if pendingStart == pending.count {
            pending.removeAll(keepingCapacity: true)
            pendingStart = 0
        } else if pendingStart >= 1024 && pendingStart * 2 >= pending.count {
            // Answered writes before the first unanswered one are dropped, and indexes shift.
            let shift = pendingStart
            pending.removeFirst(shift)
            pendingStart = 0
            indexOfRequest = indexOfRequest.mapValues { $0 - shift }
            answeredOutOfTurn = Set(answeredOutOfTurn.map { $0 - shift })
        }
    }

    /// Stops when a relay has not reached its upstream for the whole patience.
    private func checkUpstreamPatience(_ message: String) throws(Stopped) {
        guard let since = upstreamUnavailableSince,
              (DispatchTime.now().uptimeNanoseconds - since) / 1_000_000 >= UInt64(patienceMilliseconds) else { return }
        throw Stopped(reason: .unavailable, description: "\(message) (for \(patienceMilliseconds) ms)")
    }

    /// Every write in flight is answered, and a relay turned some away: once the relay reaches
    /// its upstream again, they are sent again in order on this connection (the first one lifts
    /// the relay's fence on the connection's writes).
    private func resendTurnedAwayOnceTheUpstreamIsReachable() throws(Stopped) {
        while true {
            try checkUpstreamPatience("the relay at \(client.requestEndpoint) does not reach its upstream")
            usleep(upstreamPollMicroseconds)
            upstreamPollMicroseconds = min(upstreamPollMicroseconds * 2, 1_000_000)
            let ping: Beacon_V1_PingReply
            do throws(WireError) {
                ping = try client.ping(timeoutMilliseconds: 1_000)
            } catch where error.kind == .refused {
                throw Stopped(reason: .refused, description: error.message)
            } catch where error.kind == .timeout {
                // A relay busy with its backlog: asked again, within the patience.
                let waited = (DispatchTime.now().uptimeNanoseconds - lastProgress) / 1_000_000
                if waited >= UInt64(patienceMilliseconds) {
                    throw Stopped(reason: .unavailable, description: "no answer from the daemon at \(client.requestEndpoint) within \(patienceMilliseconds) ms")
                }
                continue
            } catch {
                return try resendAfterReconnecting()
            }
            guard ping.epoch == epoch else {
                throw Stopped(reason: .journalReplaced, description: "the daemon's journal was replaced (epoch \(epoch), now \(ping.epoch))")
            }
            lastProgress = DispatchTime.now().uptimeNanoseconds
            if !ping.hasUpstream || ping.upstream.reachable { break }
        }
        resends += 1
        for index in turnedAway.sorted() {
            guard let id = try? client.send(pending[index].op) else { return try resendAfterReconnecting() }
            pending[index].requestID = id
            indexOfRequest[id] = index
            turnedAway.remove(index)
        }
    }

    /// Connects anew (same journal, or stop) and sends every unanswered write again, in order:
    /// those in flight and those a relay turned away.
    private func resendAfterReconnecting() throws(Stopped) {
        let inOrder = Set(indexOfRequest.values).union(turnedAway).sorted()
        while true {
            reconnectionsWithoutAnswer += 1
            if reconnectionsWithoutAnswer > Self.reconnectionsWithoutAnswerLimit {
                throw Stopped(reason: .unavailable, description: "the connection to the daemon at \(client.requestEndpoint) ended "
                    + "\(Self.reconnectionsWithoutAnswerLimit) times in a row before any answer")
            }
            let deadline = DispatchTime.now().uptimeNanoseconds + UInt64(patienceMilliseconds) * 1_000_000
            let (fresh, freshEpoch) = try Self.connectAndPing(connect, until: deadline, patience: patienceMilliseconds)
            guard freshEpoch == epoch else {
                throw Stopped(reason: .journalReplaced, description: "the daemon's journal was replaced (epoch \(epoch), now \(freshEpoch))")
            }
            client = fresh
            resends += 1
            lastProgress = DispatchTime.now().uptimeNanoseconds
            // Request ids are the new client's own: the old ones mean nothing any more.
            indexOfRequest.removeAll(keepingCapacity: true)
            var sentAll = true
            for index in inOrder {
                guard let id = try? client.send(pending[index].op) else {
                    sentAll = false  // lost again: every one of them once more, on the next connection
                    break
                }
                pending[index].requestID = id
                indexOfRequest[id] = index
            }
            if sentAll {
                turnedAway.removeAll()
                return
            }
        }
    }

    private static func connectAndPing(_ connect: () throws(WireError) -> WireClient, until deadline: UInt64,
                                       patience: Int) throws(Stopped) -> (WireClient, UInt64) {
        var last = "no daemon answered"
        repeat {
            do {
                let client = try connect()
                let ping = try client.ping(timeoutMilliseconds: 250)
                return (client, ping.epoch)
            } catch where error.kind == .refused {
                throw Stopped(reason: .refused, description: error.message)
            } catch {
                last = error.message
                usleep(50_000)  // a daemon restarting: try again shortly
            }
        } while DispatchTime.now().uptimeNanoseconds < deadline
        throw Stopped(reason: .unavailable, description: "\(last) (waited \(patience) ms)")
    }

    private static func withWriteID(_ op: Beacon_V1_Request.OneOf_Op, _ id: [UInt8]) -> Beacon_V1_Request.OneOf_Op {
        switch op {
        case .put(var put):
            put.writeID = Data(id)
            return .put(put)
        case .delete(var delete):
            delete.writeID = Data(id)
            return .delete(delete)
        case .txn(var txn):
            txn.writeID = Data(id)
            return .txn(txn)
        default:
            return op
        }
    }
}
