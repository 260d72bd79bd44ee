/// The protocol's constants and limits (proto/PROTOCOL.md, "Limits").
public enum WireLimits {
    /// The protocol version a daemon reports in `PingReply`.
    public static let protocolVersion: UInt32 = 1
    /// Longest key, in UTF-8 bytes.
    public static let maxKeyBytes = 256
    /// Largest encoded `Value`, in bytes.
    public static let maxValueBytes = 1 << 20
    /// Deepest nesting of lists and maps in a value.
    public static let maxValueDepth = 32
    /// Most operations in one transaction.
    public static let maxTxnOps = 1024
    /// Longest write id, in bytes.
    public static let maxWriteIDBytes = 64
    /// Largest request body the daemon reads; larger messages drop the connection.
    public static let maxRequestBytes = 16 << 20
    /// Events returned by one Delta or History reply when the request sets no limit.
    public static let defaultEventLimit = 10_000
}

/// Topics of the publish socket (proto/PROTOCOL.md, "Topics").
public enum WireTopic {
    /// Every control topic starts with this byte, which no key may contain.
    public static let controlPrefix = "!"
    /// Heartbeats.
    public static let heartbeat = "!h"
    /// Commit markers of multi-change revisions.
    public static let commit = "!c"
}

/// File names of the daemon's ipc sockets inside its runtime directory.
public enum WireEndpoint {
    /// The request socket's file name.
    public static let requestSocketName = "beacon.req"
    /// The publish socket's file name.
    public static let publishSocketName = "beacon.pub"

    /// The ipc endpoint of the request socket in `runtimeDirectory`.
    public static func request(inRuntimeDirectory runtimeDirectory: String) -> String {
        "ipc://\(runtimeDirectory)/\(requestSocketName)"
    }

    /// The ipc endpoint of the publish socket in `runtimeDirectory`.
    public static func publish(inRuntimeDirectory runtimeDirectory: String) -> String {
        "ipc://\(runtimeDirectory)/\(publishSocketName)"
    }
}
