import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation

extension Beacon {
    struct Top: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "A live view of the daemon: writes/s, connections, subscribers, upstream lag, limits hit, journal size.",
            discussion: """
                Asks the daemon for its statistics every interval. On a terminal the view is drawn \
                anew in place (Ctrl-C ends it); into a pipe, or with --json, each interval is one JSON \
                object on a line of its own, with the rates over that interval. Needs read=* in the \
                daemon's access rules, like `stats`.
                """)
        @OptionGroup var connection: Connection
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Milliseconds between views, 100 to 60000.", valueName: "ms"))
        var interval: Int = 1000
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Stop after this many views.", valueName: "n")) var count: Int?

        func validate() throws {
            guard (100...60_000).contains(interval) else { throw ValidationError("--interval must be 100 to 60000 ms") }
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        }

        func run() throws {
            let onTerminal = isatty(STDOUT_FILENO) == 1 && !connection.json
            var previous: (stats: Beacon_V1_StatsReply, at: Date)?
            var shown = 0
            while count.map({ shown < $0 }) ?? true {
                if standardOutputIsClosed() { throw CommandFailure("beacon: output closed", code: ExitCode32.outputClosed) }
                let stats = try connection.run { (client) throws(WireError) in try client.stats(timeoutMilliseconds: connection.timeout) }
                let now = Date()
                let view = Self.view(of: stats, since: previous, at: now)
                if onTerminal {
                    // Home, clear the screen, then the view: it stays in place as it is redrawn.
                    var text = "\u{1B}[H\u{1B}[2J" + Self.text(of: view, stats: stats, interval: interval) + "\n"
                    try writeText(&text)
                } else {
                    try writeLine(jsonLine(view))
                }
                previous = (stats, now)
                shown += 1
                if count.map({ shown >= $0 }) ?? false { break }
                usleep(useconds_t(interval * 1000))
            }
        }

        /// One interval's figures: totals and levels from `stats`, rates against `previous`.
        static func view(of stats: Beacon_V1_StatsReply, since previous: (stats: Beacon_V1_StatsReply, at: Date)?, at now: Date) -> [String: Any] {
            func rate(_ value: (Beacon_V1_StatsReply) -> UInt64) -> Double {
                guard let previous, value(stats) >= value(previous.stats) else { return 0 }
                let seconds = max(now.timeIntervalSince(previous.at), 0.001)
                return (Double(value(stats) - value(previous.stats)) / seconds).rounded()
            }
            var view: [String: Any] = [
                "head_revision": stats.headRevision, "keys": stats.keys, "journal_bytes": stats.journalBytes,
                "writes_per_second": previous == nil ? stats.writesPerSecond.rounded() : rate(\.writes),
                "requests_per_second": rate(\.requests), "refusals_per_second": rate(\.rejected),
                "publications_per_second": previous == nil ? stats.publicationsPerSecond.rounded() : rate(\.published),
                "request_connections": stats.requestConnections, "subscriber_connections": stats.subscriberConnections,
                "followed_prefixes": stats.trackedPrefixes, "sessions": stats.sessions, "read_only": stats.readOnly,
                "reply_bytes_kept": stats.replyBytesKept, "publish_bytes_unsent": stats.publishBytesUnsent,
                "slow_readers_closed": stats.slowReadersClosed, "slow_subscribers_closed": stats.slowSubscribersClosed,
                "limits_hit": stats.rateLimited + stats.quotaExceeded + stats.subscriptionsRefused + stats.leasesRefused + stats.connectionsShed,
                "uptime_ms": stats.uptimeMs,
            ]
            if stats.hasUpstream {
                view["upstream"] = stats.upstream.endpoint
                view["upstream_reachable"] = stats.upstream.reachable
                view["upstream_lag_revisions"] = stats.upstream.headRevision > stats.headRevision ? stats.upstream.headRevision - stats.headRevision : 0
            }
            return view
        }

        /// The view as a terminal shows it.
        static func text(of view: [String: Any], stats: Beacon_V1_StatsReply, interval: Int) -> String {
            func field(_ key: String) -> String { view[key].map { "\($0)" } ?? "-" }
            var lines = [
                "beacond  revision \(field("head_revision"))  keys \(field("keys"))  journal \(stats.journalBytes / 1024) KiB"
                    + (stats.readOnly ? "  READ-ONLY" : "") + "  up \(stats.uptimeMs / 1000) s   (every \(interval) ms)",
                "",
                "writes/s \(field("writes_per_second"))  requests/s \(field("requests_per_second"))  refusals/s \(field("refusals_per_second"))  publications/s \(field("publications_per_second"))",
                "connections: requests \(field("request_connections"))  subscribers \(field("subscriber_connections"))  followed prefixes \(field("followed_prefixes"))  sessions \(field("sessions"))",
                "slow peers: reply bytes kept \(field("reply_bytes_kept"))  publication bytes unsent \(field("publish_bytes_unsent"))  readers closed \(field("slow_readers_closed"))  subscribers closed \(field("slow_subscribers_closed"))  limits hit \(field("limits_hit"))",
            ]
            if stats.hasUpstream {
                lines.append("upstream \(stats.upstream.endpoint): \(stats.upstream.reachable ? "reachable" : "UNREACHABLE"), \(field("upstream_lag_revisions")) revisions behind")
            }
            return lines.joined(separator: "\n")
        }
    }
}
