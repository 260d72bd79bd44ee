import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the daemon's revision, keys, connections, rates and journal size.")
        @OptionGroup var connection: Connection
        func run() throws {
            let stats = try connection.run { (client) throws(WireError) in try client.stats(timeoutMilliseconds: connection.timeout) }
            var object: [String: Any] = [
                "epoch": stats.epoch, "head_revision": stats.headRevision, "compacted_revision": stats.compactedRevision,
                "keys": stats.keys, "tombstones": stats.tombstones, "journal_bytes": stats.journalBytes,
                "writes": stats.writes, "commits": stats.commits, "rejected": stats.rejected, "published": stats.published,
                "requests": stats.requests, "tracked_prefixes": stats.trackedPrefixes, "uptime_ms": stats.uptimeMs,
                "read_only": stats.readOnly,
                "request_connections": stats.requestConnections, "subscriber_connections": stats.subscriberConnections,
                "writes_per_second": stats.writesPerSecond.rounded(), "publications_per_second": stats.publicationsPerSecond.rounded(),
                "connections_refused": stats.connectionsRefused, "access_denied": stats.accessDenied,
                "rate_limited": stats.rateLimited, "quota_exceeded": stats.quotaExceeded,
                "subscriptions_refused": stats.subscriptionsRefused, "batches": stats.batches,
                "connections_shed": stats.connectionsShed, "sessions": stats.sessions, "leases_refused": stats.leasesRefused,
                "reply_bytes_kept": stats.replyBytesKept, "slow_readers_closed": stats.slowReadersClosed,
                "publish_bytes_unsent": stats.publishBytesUnsent, "slow_subscribers_closed": stats.slowSubscribersClosed,
            ]
            if stats.hasUpstream {
                // A relay: where its upstream is, whether it is heard from, and how far behind this daemon is.
                let upstream = stats.upstream
                object["upstream"] = upstream.endpoint
                object["upstream_reachable"] = upstream.reachable
                object["upstream_head_revision"] = upstream.headRevision
                object["upstream_lag_revisions"] = upstream.headRevision > stats.headRevision ? upstream.headRevision - stats.headRevision : 0
                object["upstream_last_heard_ms"] = upstream.lastHeardMs
                object["writes_forwarded"] = stats.writesForwarded
            }
            try connection.print(object, text: object.keys.sorted().map { "\($0): \(object[$0]!)" }.joined(separator: "\n"))
        }
    }
}
