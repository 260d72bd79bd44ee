import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct History: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the journaled changes of a key or prefix.")
        @OptionGroup var connection: Connection
        @Argument(help: "A key, or a prefix with --prefix.") var key: String
        @Flag(name: .long, help: "Treat the argument as a prefix.") var prefix = false
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("First revision (default: oldest retained).", valueName: "rev")) var from: UInt64?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Last revision (default: head).", valueName: "rev")) var to: UInt64?

        func validate() throws {
            if let from, let to, from > to { throw ValidationError("--from \(from) is after --to \(to): no revision is in that range") }
        }
        func run() throws {
            try connection.forEachChange(of: key, exact: !prefix, from: from ?? 0, to: to ?? 0) { event in
                try connection.print(event)
            }
        }
    }
}
