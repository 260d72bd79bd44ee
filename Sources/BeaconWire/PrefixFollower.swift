import BeaconProtocol

/// Mirrors every key under one prefix by the protocol's subscriber rules (proto/PROTOCOL.md,
/// "Following a prefix"): subscribe, snapshot, apply diffs newer than the snapshot whose
/// sequencing marks chain, and repair any gap — a dropped diff, a missing part of a
/// transaction, a silent tail — from a delta, or resync from a snapshot when history is gone.
///
/// Owns no thread: call ``next(timeoutMilliseconds:)`` in a loop on the client's thread.
public final class PrefixFollower {
    /// What the follower did with one publication or repair.
    public enum Update {
        /// One whole revision applied, in order.
        case revision([Beacon_V1_Event])
        /// State replaced by a snapshot (first sync, new epoch, or compacted history).
        case resynced(revision: UInt64)
    }

    /// The prefix followed.
    public let prefix: String
    /// The live keys under the prefix as of ``through``.
    public private(set) var state: [String: Beacon_V1_KeyValue] = [:]
    /// The mirror is complete through this revision.
    public var through: UInt64 { core.through(prefix) ?? 0 }
    /// The journal epoch the mirror belongs to.
    public var epoch: UInt64 { core.epoch }
    /// How many gaps were repaired from deltas.
    public var repairs: Int { core.statistics.repairs }
    /// How many times state was replaced by a snapshot after the first.
    public var resyncs: Int { core.statistics.resyncs }

    private let client: WireClient
    private let requestTimeout: Int
    private var core = FollowerCore(mode: .stream)
    private var queued: [Update] = []

    /// Subscribes to `prefix` and takes the first snapshot (subscribe first: no update between
    /// the two can be lost).
    /// - Parameter requestTimeoutMilliseconds: how long a snapshot or delta request may take.
    public init(client: WireClient, prefix: String, receiveHighWaterMark: Int32 = 100_000,
                requestTimeoutMilliseconds: Int = 30_000) throws(WireError) {
        self.client = client
        self.prefix = prefix
        self.requestTimeout = requestTimeoutMilliseconds
        try client.subscribe(prefix, receiveHighWaterMark: receiveHighWaterMark)
        core.follow(prefix)
        try runFetches()
        takeReleased()
    }

    /// Processes publications for up to `timeoutMilliseconds`; returns as soon as something was
    /// applied, or `nil` on timeout.
    public func next(timeoutMilliseconds: Int) throws(WireError) -> Update? {
        if !queued.isEmpty { return queued.removeFirst() }
        guard let publication = try client.receivePublication(timeoutMilliseconds: timeoutMilliseconds) else { return nil }
        core.receive(publication)
        try runFetches()
        takeReleased()
        return queued.isEmpty ? nil : queued.removeFirst()
    }

    /// Performs every fetch the core asks for; a refused one is thrown.
    private func runFetches() throws(WireError) {
        while let fetch = core.nextFetch() {
            let reply: Beacon_V1_Reply
            do {
                reply = try client.call(fetch.request, timeoutMilliseconds: requestTimeout)
            } catch where error.kind == .rejected {
                guard let refusal = error.reply, refusal.code == .compacted || refusal.code == .futureRevision else { throw error }
                core.complete(fetch, with: .with { $0.result = .error(refusal) })
                continue
            }
            core.complete(fetch, with: reply)
        }
    }

    private func takeReleased() {
        while let release = core.takeRelease() {
            for step in release.steps {
                switch step {
                case .revisions(_, let events):
                    for revision in PrefixSequencer.revisions(in: events) {
                        apply(revision)
                        queued.append(.revision(revision))
                    }
                case .snapshot(_, _, let revision, let kvs):
                    state = Dictionary(kvs.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
                    queued.append(.resynced(revision: revision))
                case .resumed:
                    break
                }
            }
        }
    }

    private func apply(_ events: [Beacon_V1_Event]) {
        for event in events {
            state[event.change.key] = Beacon_V1_KeyValue(after: event)
        }
    }
}
