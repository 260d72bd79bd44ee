import BeaconLocking
import BeaconProtocol
import CoreMetrics
import Prometheus

/// What the daemon tells a Prometheus scraper (`metrics_listen`): its counts as swift-metrics
/// counters, gauges and timers, kept in swift-prometheus's registry, which renders the text
/// format a scraper reads.
///
/// Nothing is counted on the write path for it: the loop hands over the totals it keeps anyway
/// once a heartbeat (``record(_:waitingRequests:)``), and times each group commit and each read
/// as it answers them. Thread-safe (the registry's locks, and one for what was last recorded):
/// the loop records, the endpoint's thread renders (``exposition()``).
final class DaemonMetrics: Sendable {
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    /// A counter fed from one of the loop's totals, by what it grew since it was last recorded.
    private struct Total: Sendable {
        let counter: CoreMetrics.Counter
        let read: @Sendable (Beacon_V1_StatsReply) -> UInt64
    }

    /// A gauge set from the loop's state.
    private struct Level: Sendable {
        let gauge: CoreMetrics.Gauge
        let read: @Sendable (Beacon_V1_StatsReply) -> Double
    }

    private let totals: [Total]
    private let levels: [Level]
    private let refusals: [Refusal.Code: CoreMetrics.Counter]
    private let commitDuration: CoreMetrics.Timer
    private let readDuration: CoreMetrics.Timer
    /// What each total was when last recorded, and the refusals by code.
    private let recorded = Locked<(totals: [UInt64], refusals: [Refusal.Code: UInt64])>(([], [:]))

    /// The metrics' names and meanings: `docs/DAEMON.md` lists the same.
    init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        // From a tenth of a millisecond (a commit without fsync) to ten seconds.
        factory.defaultDurationHistogramBuckets = [
            .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5),
            .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500),
            .seconds(1), .seconds(2.5), .seconds(10),
        ]
        self.factory = factory
        func total(_ label: String, _ dimensions: [(String, String)] = [], _ read: @escaping @Sendable (Beacon_V1_StatsReply) -> UInt64) -> Total {
            Total(counter: CoreMetrics.Counter(label: label, dimensions: dimensions, factory: factory), read: read)
        }
        func level(_ label: String, _ read: @escaping @Sendable (Beacon_V1_StatsReply) -> Double) -> Level {
            Level(gauge: CoreMetrics.Gauge(label: label, dimensions: [], factory: factory), read: read)
        }
        totals = [
            total("beacon_writes_total") { $0.writes },
            total("beacon_requests_total") { $0.requests },
            total("beacon_batches_total") { $0.batches },
            total("beacon_commits_total") { $0.commits },
            total("beacon_publications_total") { $0.published },
            total("beacon_writes_forwarded_total") { $0.writesForwarded },
            total("beacon_connections_refused_total") { $0.connectionsRefused },
            total("beacon_limit_hits_total", [("limit", "writes_per_second")]) { $0.rateLimited },
            total("beacon_limit_hits_total", [("limit", "quota")]) { $0.quotaExceeded },
            total("beacon_limit_hits_total", [("limit", "subscriptions_per_peer")]) { $0.subscriptionsRefused },
            total("beacon_limit_hits_total", [("limit", "leases_per_peer")]) { $0.leasesRefused },
            total("beacon_limit_hits_total", [("limit", "connections")]) { $0.connectionsShed },
            total("beacon_limit_hits_total", [("limit", "reply_buffer")]) { $0.slowReadersClosed },
            total("beacon_limit_hits_total", [("limit", "publish_buffer")]) { $0.slowSubscribersClosed },
        ]
        levels = [
            level("beacon_head_revision") { Double($0.headRevision) },
            level("beacon_compacted_revision") { Double($0.compactedRevision) },
            level("beacon_keys") { Double($0.keys) },
            level("beacon_journal_bytes") { Double($0.journalBytes) },
            level("beacon_read_only") { $0.readOnly ? 1 : 0 },
            level("beacon_request_connections") { Double($0.requestConnections) },
            level("beacon_subscriber_connections") { Double($0.subscriberConnections) },
            level("beacon_followed_prefixes") { Double($0.trackedPrefixes) },
            level("beacon_sessions") { Double($0.sessions) },
            level("beacon_reply_bytes_kept") { Double($0.replyBytesKept) },
            level("beacon_publish_bytes_unsent") { Double($0.publishBytesUnsent) },
            level("beacon_uptime_seconds") { Double($0.uptimeMs) / 1000 },
            level("beacon_upstream_reachable") { $0.hasUpstream ? ($0.upstream.reachable ? 1 : 0) : 1 },
            level("beacon_upstream_head_revision") { $0.hasUpstream ? Double($0.upstream.headRevision) : Double($0.headRevision) },
            level("beacon_upstream_lag_revisions") {
                $0.hasUpstream && $0.upstream.headRevision > $0.headRevision ? Double($0.upstream.headRevision - $0.headRevision) : 0
            },
        ]
        var refusals: [Refusal.Code: CoreMetrics.Counter] = [:]
        for code in Refusal.Code.allCases {
            refusals[code] = CoreMetrics.Counter(label: "beacon_refusals_total", dimensions: [("code", Self.name(of: code))], factory: factory)
        }
        self.refusals = refusals
        commitDuration = CoreMetrics.Timer(label: "beacon_commit_duration_seconds", dimensions: [], factory: factory)
        readDuration = CoreMetrics.Timer(label: "beacon_read_duration_seconds", dimensions: [], factory: factory)
        waiting = CoreMetrics.Gauge(label: "beacon_requests_waiting", dimensions: [], factory: factory)
        upstreamSilence = CoreMetrics.Gauge(label: "beacon_upstream_silent_seconds", dimensions: [], factory: factory)
    }

    private let waiting: CoreMetrics.Gauge
    private let upstreamSilence: CoreMetrics.Gauge

    /// A refusal's code as the label names it: `permission_denied` for `PERMISSION_DENIED`.
    static func name(of code: Refusal.Code) -> String {
        var name = ""
        for character in String(describing: code) {
            if character.isUppercase { name += "_" + character.lowercased() } else { name.append(character) }
        }
        return name
    }

    /// Takes the loop's totals and state (once a heartbeat).
    /// - Parameters:
    ///   - stats: what a `Stats` request would answer now.
    ///   - refusals: requests refused since start, by code.
    ///   - waitingRequests: requests waiting for their peer's turn.
    ///   - nowMilliseconds: wall-clock Unix ms, for how long the upstream has been silent.
    func record(_ stats: Beacon_V1_StatsReply, refusals counts: [Refusal.Code: UInt64], waitingRequests: Int, nowMilliseconds: UInt64) {
        recorded.withLock { recorded in
            if recorded.totals.count != totals.count { recorded.totals = Array(repeating: 0, count: totals.count) }
            for (index, total) in totals.enumerated() {
                let value = total.read(stats)
                if value > recorded.totals[index] { total.counter.increment(by: Int(value - recorded.totals[index])) }
                recorded.totals[index] = value
            }
            for (code, value) in counts {
                let before = recorded.refusals[code, default: 0]
                if value > before { refusals[code]?.increment(by: Int(value - before)) }
                recorded.refusals[code] = value
            }
        }
        for level in levels { level.gauge.record(level.read(stats)) }
        waiting.record(waitingRequests)
        let heard = stats.hasUpstream ? stats.upstream.lastHeardMs : nowMilliseconds
        upstreamSilence.record(Double(nowMilliseconds > heard ? nowMilliseconds - heard : 0) / 1000)
    }

    /// Times a group commit, from its hand-over to the commit thread to its outcome.
    func recordCommit(nanoseconds: UInt64) { commitDuration.recordNanoseconds(Int64(clamping: nanoseconds)) }

    /// Times a read, from its request's arrival to its reply's.
    func recordRead(nanoseconds: UInt64) { readDuration.recordNanoseconds(Int64(clamping: nanoseconds)) }

    /// Every metric in Prometheus's text exposition format.
    func exposition() -> [UInt8] { registry.emitToBuffer() }
}
