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
    /// Most requests in one batch.
    public static let maxBatchRequests = 1024
    /// Longest write id, in bytes.
    public static let maxWriteIDBytes = 64
    /// Maximum length of a session id.
    public static let maxSessionBytes = 64
    /// Maximum time to live of a session, in milliseconds.
    public static let maxSessionTTLMilliseconds: UInt32 = 3_600_000
    /// Maximum time to live of a key, in milliseconds (100 years).
    public static let maxTTLMilliseconds: UInt64 = 100 * 366 * 86_400_000
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

    /// A bundle topic starts and ends with this byte, which no key may contain: `#P#` carries
    /// the bundles of prefix P (proto/PROTOCOL.md §5.4).
    public static let bundleMark = UInt8(ascii: "#")

    /// The topic of prefix `prefix`'s bundles, which is also the subscription to them.
    public static func bundle(of prefix: String) -> String { "#" + prefix + "#" }

    /// What a follower of `prefix` subscribes to: the prefix itself, or its bundles.
    public static func subscription(to prefix: String, bundled: Bool) -> [UInt8] {
        Array((bundled ? bundle(of: prefix) : prefix).utf8)
    }

    /// The prefix a bundle subscription names: `nil` unless `topic` is `#`, a valid prefix, `#`.
    public static func bundledPrefix(_ topic: [UInt8]) -> String? {
        let mark = bundleMark
        guard topic.count >= 2, topic.first == mark, topic.last == mark,
              let prefix = String(validating: topic[1..<(topic.count - 1)], as: UTF8.self),
              KeyPath.problem(prefix: prefix) == nil
        else { return nil }
        return prefix
    }

    /// Whether a subscription to `topic` receives diffs of some key: it is not a control topic
    /// or a bundle's, whose first byte no key holds (the empty topic matches every key).
    public static func matchesKeys(_ topic: [UInt8]) -> Bool {
        guard let first = topic.first else { return true }
        return first != bundleMark && first != UInt8(ascii: "!")
    }

    /// What a publication's topic says it is.
    public enum Kind: Sendable {
        case heartbeat, commit, diff, bundle
    }

    /// The kind of a publication from its topic. A control topic may carry a read-scope suffix
    /// after its first two bytes (`!h#2#`), so only those two count.
    public static func kind(of topic: UnsafeRawBufferPointer) -> Kind {
        if topic.first == bundleMark { return .bundle }
        guard topic.count >= 2, topic[0] == UInt8(ascii: "!") else { return .diff }
        switch topic[1] {
        case UInt8(ascii: "h"): return .heartbeat
        case UInt8(ascii: "c"): return .commit
        default: return .diff
        }
    }
}

/// File names of the daemon's ipc sockets inside its runtime directory, and how clients and the
/// daemon agree on that directory.
public enum WireEndpoint {
    /// The runtime directory of a daemon run by systemd (`RuntimeDirectory=beacon`).
    public static let systemRuntimeDirectory = "/run/beacon"

    /// The per-user runtime directory: `$XDG_RUNTIME_DIR/beacon`, else `/tmp/beacon-UID`.
    public static func userRuntimeDirectory(environment: [String: String], uid: UInt32) -> String {
        if let dir = environment["XDG_RUNTIME_DIR"], !dir.isEmpty { return dir + "/beacon" }
        return "/tmp/beacon-\(uid)"
    }

    /// Where a client looks for the daemon: `$BEACON_RUNTIME_DIR`; else the per-user directory
    /// or `/run/beacon`, whichever holds a request socket (per-user first); else the per-user one.
    /// - Parameter socketExists: tells whether a socket file exists at a path.
    public static func clientRuntimeDirectory(environment: [String: String], uid: UInt32,
                                              socketExists: (String) -> Bool) -> String {
        if let dir = environment["BEACON_RUNTIME_DIR"], !dir.isEmpty { return dir }
        let user = userRuntimeDirectory(environment: environment, uid: uid)
        for candidate in [user, systemRuntimeDirectory] where socketExists(candidate + "/" + requestSocketName) {
            return candidate
        }
        return user
    }

    /// The publish endpoint a request endpoint implies: `beacon.pub` beside an ipc `beacon.req`,
    /// the next port for tcp (as the daemon's defaults and a relay's `upstream_publish` go); nil
    /// for any other.
    public static func publish(impliedBy request: String) -> String? {
        if request.hasPrefix("ipc://"), request.hasSuffix("/" + requestSocketName) {
            return String(request.dropLast(requestSocketName.count)) + publishSocketName
        }
        guard request.hasPrefix("tcp://"), let colon = request.lastIndex(of: ":"),
              let port = UInt16(request[request.index(after: colon)...]), port > 0, port < .max else { return nil }
        return request[..<colon] + ":\(port + 1)"
    }

    /// What is wrong with `endpoint` as the address of a daemon's socket, or `nil`: it must be
    /// `ipc://PATH` or `tcp://HOST:PORT` (a port from 1 to 65535).
    public static func problem(endpoint: String) -> String? {
        if endpoint.hasPrefix("ipc://") {
            return endpoint.count > "ipc://".count ? nil : "'\(endpoint)' names no socket file (ipc://PATH)"
        }
        guard endpoint.hasPrefix("tcp://") else {
            return "'\(endpoint)' is not an endpoint: ipc://PATH or tcp://HOST:PORT"
        }
        let address = endpoint.dropFirst("tcp://".count)
        guard let colon = address.lastIndex(of: ":"), colon != address.startIndex,
              let port = UInt16(address[address.index(after: colon)...]), port > 0 else {
            return "'\(endpoint)' needs a host and a port from 1 to 65535 (tcp://HOST:PORT)"
        }
        return nil
    }

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
