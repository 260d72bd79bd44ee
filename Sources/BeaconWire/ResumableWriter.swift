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
/// the others are applied now. A relay that could not reach its upstream (`UPSTREAM_UNAVAILABLE`:
/// perhaps applied) is treated the same way.
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
        while pending.count - pendingStart >= window { try receiveOne() }
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
            answers.append(.committed(line: line, write))
        case .error(let error) where error.code == .upstreamUnavailable:
            // Perhaps applied: asked again with its write id, with what follows it, once the
            // relay reaches its upstream again.
            let since = upstreamUnavailableSince ?? now
            upstreamUnavailableSince = since
            if (now - since) / 1_000_000 >= UInt64(patienceMilliseconds) {
                throw Stopped(reason: .unavailable, description: "\(error.message) (for \(patienceMilliseconds) ms)")
            }
            usleep(100_000)
            try resendAfterReconnecting(restoring: index)
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

    /// Connects anew (same journal, or stop) and sends every unanswered write again, in order.
    /// `restoring` is a write whose answer asked for it to be sent again.
    private func resendAfterReconnecting(restoring: Int? = nil) throws(Stopped) {
        var unanswered = Set(indexOfRequest.values)
        if let restoring { unanswered.insert(restoring) }
        let inOrder = unanswered.sorted()
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
            if sentAll { return }
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
