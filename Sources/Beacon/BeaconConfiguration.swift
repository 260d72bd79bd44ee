import BeaconProtocol
@_exported import struct BeaconWire.CurveCredentials
@_exported import struct BeaconZMQ.ZMQCurveKeyPair
import Dispatch
import Foundation

/// Where a client finds the daemon, where its updates are applied, and how patient it is.
public struct BeaconConfiguration: Sendable {
    /// Where mirrored signals change and effects run: the isolation domain that owns them.
    public enum Delivery: Sendable {
        /// Updates are applied on this serial queue (`.main` for the main actor). Create remote
        /// signals, computeds and effects on the same queue.
        case queue(DispatchQueue)
        /// Updates wait until the application calls ``BeaconClient/applyPendingUpdates()`` in
        /// its own domain; `wake` is called (on the client's I/O thread) when some are waiting.
        /// Use it to drive an actor: `wake: { Task { await model.pump() } }`.
        case manual(wake: @Sendable () -> Void)
    }

    /// The daemon's request endpoint (`ipc://…/beacon.req` or `tcp://…`).
    public var requestEndpoint: String
    /// The daemon's publish endpoint.
    public var publishEndpoint: String
    /// Where updates are applied; `.queue(.main)` unless set.
    public var delivery: Delivery = .queue(.main)
    /// How long one request may go unanswered before a write is re-sent (with the same write
    /// id) or a sync is retried, and the client reports `stale`.
    public var requestTimeout: Duration = .seconds(1)
    /// How long a write may take in all, retries included, before it fails with `.unreachable`.
    public var writeTimeout: Duration = .seconds(10)
    /// How long the daemon keeps this client's session-bound keys after it stops hearing from
    /// the client (kill -9, a lost connection). The client renews the session three times per
    /// period while it has session-bound keys; `close()` ends it at once.
    public var sessionTimeout: Duration = .seconds(10)
    /// A local journal (an SQLite file) that keeps what this client mirrors. With it, a client
    /// that starts while the daemon is down shows the last known values (status `stale`), and
    /// on connect fetches only the changes since its last applied revision. `nil`: none.
    public var localJournalPath: String?
    /// How long to wait before retrying a sync that got no answer.
    public var retryInterval: Duration = .milliseconds(250)
    /// Publications queued by libzmq before it drops new ones (drops are detected and repaired).
    public var receiveHighWaterMark: Int32 = 1_000_000
    /// Whether to take a followed prefix's diffs in bundles, a group commit's in one message,
    /// once the daemon's heartbeat says it publishes them (fewer messages to receive under load;
    /// the same changes, in the same order). `false`: one message per change, as every daemon sends.
    public var receivesBundles = true
    /// Keys for a daemon's CURVE tcp endpoints (the daemon's public key and this client's key
    /// pair, which the daemon's `allow = key:` rules must list); `nil` for ipc.
    public var curve: CurveCredentials?

    /// The daemon in `runtimeDirectory` (its `beacon.req` and `beacon.pub` ipc sockets).
    public init(runtimeDirectory: String) {
        requestEndpoint = WireEndpoint.request(inRuntimeDirectory: runtimeDirectory)
        publishEndpoint = WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory)
    }

    /// A daemon at explicit endpoints (tcp, or ipc elsewhere).
    public init(requestEndpoint: String, publishEndpoint: String) {
        self.requestEndpoint = requestEndpoint
        self.publishEndpoint = publishEndpoint
    }

    /// The daemon found like the `beacon` tool finds it: `$BEACON_RUNTIME_DIR`, else the first of
    /// `$XDG_RUNTIME_DIR/beacon` (or `/tmp/beacon-UID`) and `/run/beacon` that holds a request
    /// socket, else the per-user directory (a daemon started later is found there).
    public init() {
        let directory = WireEndpoint.clientRuntimeDirectory(
            environment: ProcessInfo.processInfo.environment, uid: getuid(),
            socketExists: { FileManager.default.fileExists(atPath: $0) })
        self.init(runtimeDirectory: directory)
    }

    var requestTimeoutMilliseconds: UInt64 { Self.milliseconds(requestTimeout) }
    var writeTimeoutMilliseconds: UInt64 { Self.milliseconds(writeTimeout) }
    var retryIntervalMilliseconds: UInt64 { Self.milliseconds(retryInterval) }
    var sessionTimeoutMilliseconds: UInt64 { Self.milliseconds(sessionTimeout) }

    private static func milliseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000))
    }
}
