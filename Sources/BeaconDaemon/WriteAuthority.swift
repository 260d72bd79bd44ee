import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Logging

/// Who decides the writes of this daemon's clients: the write path as a choice. A primary decides
/// them against its own journal (``JournalAuthority``); a relay forwards them to its upstream and
/// answers once its own copy shows them (``Relay``). Another (an external consensus store) is
/// another conformance, not a new set of checks in the daemon.
///
/// The loop thread's. Every call names the daemon it works for (``AuthorityHost``).
protocol WriteAuthority: AnyObject {
    /// Whether puts may take the fast path: decoded without SwiftProtobuf and staged here at once.
    var stagesWritesHere: Bool { get }

    /// Decides a put, delete, transaction or `KeepAlive` of `context`'s peer.
    func decide(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext, host: some AuthorityHost)

    /// Whether `request` must wait behind earlier requests of its connection; one that waits is
    /// handed back to the host later (`replaying`: it is being handed back now).
    func holdsBack(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext,
                   host: some AuthorityHost) -> Bool

    /// Whether consistent reads (`Ping.sync`, `consistent` reads) see every write acknowledged
    /// anywhere before them: where writes are decided here, every read does; elsewhere the
    /// authority holds them back until its copy has caught up (``ConsistentReads``).
    var servesConsistentReads: Bool { get }

    /// The refusal of a read of a key or prefix this daemon does not hold; nil when it holds it.
    func refusesRead(of keyOrPrefix: String, host: some AuthorityHost) -> Refusal?

    /// Adds what it polls and the work it does each pass to the loop's registry.
    func register(in registry: inout PollRegistry, host: some AuthorityHost)
    /// Changes when the sockets it registers are replaced: the loop registers them again.
    var socketGeneration: Int { get }
    /// The longest the loop may wait before its next pass; nil: no limit.
    var pollTimeoutMilliseconds: Int? { get }
    /// At the end of each pass: hands back the requests that no longer need to wait.
    func finishPass(host: some AuthorityHost)

    /// A batch was committed and its replies released.
    func committed(host: some AuthorityHost)
    /// A commit failed; the writes it held were undone.
    func rolledBack(host: some AuthorityHost)
    /// The daemon stops: answers everything still waiting, then closes.
    func shutDown(host: some AuthorityHost)

    /// What pings, stats and heartbeats say of an upstream; nil without one.
    var upstreamStatus: Beacon_V1_UpstreamStatus? { get }
    /// What systemd's status line adds; empty when nothing.
    func statusLine(headRevision: UInt64) -> String
    /// Writes and `KeepAlive`s forwarded elsewhere.
    var writesForwarded: UInt64 { get }
}

/// What a write authority asks of the daemon that holds it.
protocol AuthorityHost: AnyObject {
    var writes: WritePath { get }
    var logger: Logger { get }
    /// Per connection, how many bytes of requests and replies the daemon keeps (`reply_buffer_bytes`).
    var perConnectionBytes: Int { get }

    /// Decides a put, delete or transaction against the local journal.
    func stageWrite(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext)
    /// Renews or ends a writer's session here.
    func keepAlive(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext)
    /// Checks a write against the peer's rights and limits (rates, sizes, the journal's size).
    func checkWrite(_ ops: [WriteOp], context: RequestContext) throws(Refusal)
    /// The refusal of `what`, which `context`'s peer may not do (counted).
    func denied(_ what: String, key: String, context: RequestContext) -> Refusal
    /// Answers request `id` with `refusal` (counted).
    func refuse(_ id: UInt64, _ refusal: Refusal, route: ReplyRoute, dependsOnStaged: Bool)
    /// Handles a request that waited.
    @discardableResult
    func handle(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext) -> Int
    /// Closes a connection that piles `held` bytes of requests up in the daemon.
    func closeConnection(_ connection: RoutingID, pilingUp held: Int, reason: String)
    /// How many sessions a peer may hold (`sessions_per_peer`); 0: no limit.
    var sessionLimit: Int { get }
    /// Counts refusals made without ``refuse(_:_:route:dependsOnStaged:)``.
    func countRejected(_ count: UInt64)
    /// Counts a refusal for a limit of the peer's (`QUOTA_EXCEEDED`), made without ``refuse(_:_:route:dependsOnStaged:)``.
    func countQuotaExceeded()
    /// Counts a refusal for want of rights.
    func countAccessDenied()
    /// The journal's contents were replaced and loaded anew at `revision`: prefixes restart there,
    /// waiting compactions are overtaken, subscribers hear of it at once.
    func historyReplaced(at revision: UInt64)
}

extension WriteAuthority {
    func holdsBack(_ request: Beacon_V1_Request, route: ReplyRoute, inBatch: Bool, replaying: Bool, context: RequestContext,
                   host: some AuthorityHost) -> Bool { false }
    func refusesRead(of keyOrPrefix: String, host: some AuthorityHost) -> Refusal? { nil }
    func register(in registry: inout PollRegistry, host: some AuthorityHost) {}
    var socketGeneration: Int { 0 }
    var pollTimeoutMilliseconds: Int? { nil }
    func finishPass(host: some AuthorityHost) {}
    func committed(host: some AuthorityHost) {}
    func rolledBack(host: some AuthorityHost) {}
    func shutDown(host: some AuthorityHost) {}
    var upstreamStatus: Beacon_V1_UpstreamStatus? { nil }
    func statusLine(headRevision: UInt64) -> String { "" }
    var writesForwarded: UInt64 { 0 }
}

/// A primary's write authority: writes are decided here, against the local journal, and sessions
/// live here.
final class JournalAuthority: WriteAuthority {
    var stagesWritesHere: Bool { true }
    var servesConsistentReads: Bool { true }

    func decide(_ request: Beacon_V1_Request, route: ReplyRoute, context: RequestContext, host: some AuthorityHost) {
        if case .keepAlive = request.op {
            host.keepAlive(request, route: route, context: context)
        } else {
            host.stageWrite(request, route: route, context: context)
        }
    }
}
