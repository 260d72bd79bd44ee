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

extension Beacon_V1_Bundle {
    /// The diffs of a `Bundle` body frame, in order, each read as ``Beacon_V1_Diff/init(frame:)``
    /// reads a diff; by SwiftProtobuf when the bundle holds anything but diffs.
    public static func diffs(frame: ZMQMessage) throws -> [Beacon_V1_Diff] {
        try frame.withUnsafeBytes { bytes in
            guard let ranges = FastDiff.bundledDiffs(bytes) else {
                return try Beacon_V1_Bundle(serializedBytes: Array(bytes)).diffs
            }
            return try ranges.map { range in
                let diff = UnsafeRawBufferPointer(rebasing: bytes[range])
                return try FastDiff.decode(diff) ?? Beacon_V1_Diff(serializedBytes: Array(diff))
            }
        }
    }
}
