import BeaconProtocol
import BeaconWire

/// What the application's side asks of the I/O thread.
enum EngineCommand: Sendable {
    /// Mirror the keys under `prefix` (reference counted: one per mirror asking).
    case follow(prefix: String)
    /// One mirror of `prefix` is gone.
    case unfollow(prefix: String)
    /// Send a write and report its outcome.
    case write(WriteRequest)
    /// Send a read and hand its reply back.
    case read(ReadRequest)
    /// Start a history stream.
    case history(HistoryRequest)
    /// Stop a history stream.
    case cancelHistory(id: Int)
}

/// A write on its way to the daemon.
struct WriteRequest: Sendable {
    var op: Beacon_V1_Request.OneOf_Op
    /// The keys it writes: the mirrors that follow them must reflect the result before it returns.
    var keys: [String]
    /// Whether it binds keys to the client's session (which must then be kept alive).
    var bindsSession = false
    /// Called once, from the graph's delivery context after the mirror caught up (success), or
    /// from the I/O thread (failure).
    var complete: @Sendable (Result<WriteResult, BeaconError>) -> Void
}

/// A history stream on its way to the I/O thread.
struct HistoryRequest: Sendable {
    var id: Int
    var prefix: String
    var exact: Bool
    var fromRevision: UInt64
    var feed: HistoryFeed
}

/// What the I/O thread hands to the graph, in order.
enum GraphUpdate: Sendable {
    /// What the mirrors' follower core released, in order: whole revisions, snapshots, resumed
    /// prefixes. `settled`: no change at or below it can still arrive late.
    case release(steps: [FollowerCore.Step], settled: UInt64)
    /// The client's connection state changed.
    case connection(ConnectionState)
    /// Run after the updates before it are applied (a write's completion).
    case completion(@Sendable () -> Void)
}
