import BeaconProtocol
import BeaconZMQ

/// Why a wire call failed: the daemon's error reply, a timeout, or the transport.
public struct WireError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure.
    public enum Kind: Sendable, Equatable {
        /// The daemon answered with an error.
        case rejected
        /// No reply within the timeout (daemon down or overloaded).
        case timeout
        /// libzmq failed.
        case transport
        /// The reply was not a valid `beacon.v1.Reply`, or not the kind expected.
        case malformedReply
        /// The daemon refused the connection: its access policy admits no such peer, or CURVE
        /// keys do not match.
        case refused
        /// The connection ended (the daemon stopped or restarted) and, made with
        /// `reconnects: false`, the client does not reconnect by itself: what it sent and was not
        /// answered may or may not have been applied.
        case connectionLost
    }

    /// The kind of failure.
    public var kind: Kind
    /// What went wrong, for a person.
    public var message: String
    /// The daemon's error, when `kind` is `.rejected`.
    public var reply: Beacon_V1_Error?

    /// Creates an error.
    public init(kind: Kind, message: String, reply: Beacon_V1_Error? = nil) {
        self.kind = kind
        self.message = message
        self.reply = reply
    }

    init(_ error: ZMQError) {
        self.init(kind: .transport, message: error.description)
    }

    public var description: String { message }
}
