import BeaconZMQ

/// Whether libzmq's XPUB (in manual mode) will apply the daemon's next grant to the connection
/// that sent the subscription just read.
///
/// libzmq queues what subscribers send upstream, and, for each (un)subscription only, the
/// connection it came from; reading a message takes the next connection off that second queue.
/// A frame that is not an (un)subscription (any upstream byte an XSUB sends) takes one too
/// without having put one there, so from then on each grant lands on the connection of a later
/// subscription. The pairing is provably in step again only once a drain has emptied the queue
/// (both queues are then empty): until then no grant is applied. State only; loop thread only.
struct SubscriptionPairing {
    /// Whether grants apply to the connection that asked.
    private(set) var inStep = true

    /// Accounts for a message read from the publish socket.
    /// - Returns: whether a grant for it goes to the connection that sent it.
    mutating func read(_ frames: [ZMQMessage]) -> Bool {
        if !frames.allSatisfy(Self.isSubscriptionFrame) { inStep = false }
        return inStep
    }

    /// The drain found the queue empty: the pairing starts in step.
    mutating func drained() { inStep = true }

    /// Reading failed half-way: the pairing is unknown until a drain empties the queue.
    mutating func lost() { inStep = false }

    /// Whether libzmq took `frame` for an (un)subscription (and recorded its connection).
    static func isSubscriptionFrame(_ frame: ZMQMessage) -> Bool {
        frame.withUnsafeBytes { bytes in bytes.first.map { $0 <= 1 } ?? false }
    }
}
