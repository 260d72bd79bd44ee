import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the values of keys, or of every key under a prefix.",
            discussion: """
                One key prints its value alone; several, or --prefix, print KEY = VALUE lines. A key \
                that does not exist is named on stderr and the others still print; the exit code is \
                then 1.
                """)
        @OptionGroup var connection: Connection
        @Argument(help: "Keys, or prefixes with --prefix.") var keys: [String]
        @Flag(name: .long, help: "Print every key under each argument.") var prefix = false
        @Flag(name: .long, help: "Print values alone, one per line, also for several keys.") var printValueOnly = false
        @Flag(name: .long, help: ArgumentHelp("See every write acknowledged anywhere before the read, at every etcd front too (a front asks etcd first).",
                                              discussion: "A front asks etcd first, a relay its upstream; a plain daemon's reads are all consistent."))
        var consistent = false
        func validate() throws {
            if keys.isEmpty { throw ValidationError("give at least one key") }
        }
        func run() throws {
            if prefix {
                for prefix in keys {
                    try printKeys(under: prefix, connection: connection, valuesOnly: printValueOnly, consistent: consistent)
                }
                return
            }
            if consistent { try connection.requireConsistentReads() }
            var missing = 0
            let client = try connection.client()
            for key in keys {
                let kv: Beacon_V1_KeyValue
                do {
                    kv = try client.get(key, consistent: consistent, timeoutMilliseconds: connection.timeout)
                } catch where error.reply?.code == .notFound {
                    warn("beacon: \(error.message)")
                    missing += 1
                    continue
                } catch {
                    throw connection.failure(error)
                }
                try connection.print(keyValueObject(kv), text: keys.count == 1 || printValueOnly ? kv.value.jsonText : keyValueText(kv))
            }
            if missing > 0 { throw ExitCode(ExitCode32.notFound) }
        }
    }
}
