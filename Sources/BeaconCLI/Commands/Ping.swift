import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Ping: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask whether the daemon answers; with --wait, keep asking until it does.",
            discussion: """
                Prints the daemon's version, protocol, epoch and head revision. With --wait S, a \
                daemon that is starting (no socket yet, nobody listening, or no answer) is asked \
                again every 100 ms for up to S seconds: `beacond & beacon ping --wait 10` goes on \
                once the daemon serves. Exit code 69 when no daemon answered.
                """)
        @OptionGroup var connection: Connection
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to keep asking until the daemon answers (0: ask once).", valueName: "s"))
        var wait: Double = 0

        func validate() throws {
            guard wait >= 0, wait <= 86_400 else { throw ValidationError("--wait must be 0 to 86400 seconds") }
        }

        func run() throws {
            let deadline = Date().addingTimeInterval(wait)
            var reply: Beacon_V1_PingReply?
            while reply == nil && Date() < deadline {
                if let client = try? connection.writerClient() {
                    reply = try? client.ping(timeoutMilliseconds: 250)
                }
                if reply == nil { usleep(100_000) }
            }
            // Asked once more as every command asks: no daemon is one line and exit code 69.
            let ping = try reply ?? connection.run { (client) throws(WireError) in try client.ping(timeoutMilliseconds: connection.timeout) }
            let object: [String: Any] = [
                "daemon_version": ping.daemonVersion, "protocol_version": ping.protocolVersion, "epoch": ping.epoch,
                "head_revision": ping.headRevision, "compacted_revision": ping.compactedRevision,
            ]
            try connection.print(object, text: "beacond \(ping.daemonVersion) answers: protocol \(ping.protocolVersion), "
                + "epoch \(ping.epoch), head revision \(ping.headRevision)")
        }
    }
}
