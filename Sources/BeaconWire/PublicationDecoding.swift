import BeaconProtocol
import BeaconZMQ

extension Beacon_V1_Diff {
    /// Decodes a publication's body frame: read in place by ``FastDiff``, or by SwiftProtobuf
    /// when the fast reader declines (a field from a newer protocol, a damaged message).
    public init(frame: ZMQMessage) throws {
        if let diff = frame.withUnsafeBytes({ FastDiff.decode($0) }) {
            self = diff
        } else {
            self = try Beacon_V1_Diff(serializedBytes: frame.bytes)
        }
    }
}
