import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List keys and values under a prefix.")
        @OptionGroup var connection: Connection
        @Argument(help: "The prefix (default: every key).") var prefix: String = ""
        @Flag(name: .long, help: "See every write acknowledged anywhere before the read, at every etcd front too (a front asks etcd first).")
        var consistent = false
        func run() throws {
            try printKeys(under: prefix, connection: connection, consistent: consistent)
        }
    }
}
