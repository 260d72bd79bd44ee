import BeaconProtocol
import BeaconZMQ

/// What a request message carried before its body, which its reply goes back with: the routing
/// id the ROUTER put first (the connection), and any frames the peer sent before the body (a
/// REQ socket's empty delimiter). Plain bytes: a reply waiting for its commit holds no libzmq
/// message.
struct ReplyEnvelope {
    let connection: RoutingID
    /// The frames between the routing id and the body; none from a DEALER.
    var inner: [[UInt8]] = []
}

/// Where the reply to one request goes: back to the peer with the envelope its message came
/// with, or into a slot of the reply to the batch that carried it.
enum ReplyRoute {
    case peer(ReplyEnvelope)
    case batch(BatchReplies, slot: Int)

    /// The routing id of the connection the reply goes to.
    var connection: RoutingID {
        switch self {
        case .peer(let envelope): envelope.connection
        case .batch(let replies, _): replies.envelope.connection
        }
    }
}

/// The replies to the requests of one `Batch`, gathered until every request has its own. They
/// are filled out of order: a refusal at once, a write once its group commit completes.
final class BatchReplies {
    /// The envelope of the message that carried the batch.
    let envelope: ReplyEnvelope
    /// The batch request's own id.
    let id: UInt64
    // The loop thread's alone: no dynamic exclusivity checks (two per write otherwise).
    @exclusivity(unchecked) private var replies: [WireEncoder.BatchReplyItem?]
    @exclusivity(unchecked) private var missing: Int
    /// The peer that sent it (`RequestContext.peer`).
    let peer: String
    /// Reply bytes its reads have built so far (``ReadCost``): a batch costs the sum of its
    /// parts, counted against its peer's allowance until it is answered whole.
    @exclusivity(unchecked) var builtBytes = 0

    init(envelope: ReplyEnvelope, id: UInt64, count: Int, peer: String = "") {
        self.envelope = envelope
        self.id = id
        self.peer = peer
        replies = Array(repeating: nil, count: count)
        missing = count
    }

    /// Stores the reply of the request in `slot`; returns the encoded `BatchReply` once it was
    /// the last one missing.
    func fill(_ slot: Int, with reply: WireEncoder.BatchReplyItem) -> [UInt8]? {
        guard replies.indices.contains(slot), replies[slot] == nil else {
            assertionFailure("a request of a batch was answered twice")
            return nil
        }
        replies[slot] = reply
        missing -= 1
        guard missing == 0 else { return nil }
        defer { replies = [] }
        return WireEncoder.batchReply(id: id, items: replies.map { $0! })
    }
}
