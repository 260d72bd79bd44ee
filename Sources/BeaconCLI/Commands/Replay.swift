import ArgumentParser
import BeaconProtocol
import BeaconWire
import Foundation
import Synchronization

extension Beacon {
    struct Replay: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Re-emit a range of the journal as a change stream (JSON lines `beacon pub` reads).",
            discussion: """
                Prints every change under PREFIX with --from <= revision <= --to, in order, one JSON \
                object per line: revision, part, parts, key, op (put, delete, expire), version and, \
                for puts, value. Pipe it into `beacon pub` (of another daemon) to apply the same \
                changes there. Values keep their types: 1 is an int and 1.0 a double, and bytes \
                travel as {"$bytes": "<base64>"}.
                """)
        @OptionGroup var connection: Connection
        @Argument(help: "The prefix (default: every key).") var prefix: String = ""
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("First revision (default: oldest retained).", valueName: "rev")) var from: UInt64?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Last revision (default: head).", valueName: "rev")) var to: UInt64?

        func validate() throws {
            if let from, let to, from > to { throw ValidationError("--from \(from) is after --to \(to): no revision is in that range") }
        }

        func run() throws {
            var progress = ProgressLine()
            var count = 0
            var lines = ""  // written about 64 KiB at a time: a range, not a live stream
            try connection.forEachChange(of: prefix, exact: false, from: from ?? 0, to: to ?? 0) { event in
                lines += eventJSONLine(event)
                lines += "\n"
                if lines.utf8.count >= 1 << 16 { try writeText(&lines) }
                count += 1
                progress.show("beacon replay: \(count) changes, at revision \(event.revision)")
            }
            try writeText(&lines)
            progress.clear()
        }
    }
}
