import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a key, or every key under a prefix.",
            discussion: """
                With --prefix, the keys under the prefix are deleted in one transaction, at one \
                revision, each on condition that it has not changed since it was listed (a key that \
                changed meanwhile makes it list and try again). A transaction holds at most \
                1,024 operations: more keys are deleted in transactions of 1,024, in key order, \
                each at a revision of its own (a reader may see part of the prefix gone meanwhile); \
                if it is interrupted, run it again to delete the rest.
                """,
            aliases: ["del", "rm"])
        @OptionGroup var connection: Connection
        @Argument(help: "The key, or the prefix with --prefix.") var key: String
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Delete only if the key is at this version.", valueName: "n")) var ifVersion: UInt64?
        @Flag(name: .long, help: "Delete every key under the argument (at one revision up to 1,024 keys).") var prefix = false
        func run() throws {
            if prefix {
                guard ifVersion == nil else { throw CommandFailure("beacon: --if-version applies to one key, not to --prefix", code: ExitCode32.usage) }
                return try deletePrefix()
            }
            let reply = try connection.write(.delete(.with {
                $0.key = key
                if let ifVersion { $0.ifVersion = ifVersion }
            }))
            try connection.print(["key": key, "revision": reply.revision], text: "\(key) deleted at revision \(reply.revision)")
        }

        private func deletePrefix() throws {
            var deleted = 0, transactions = 0
            var firstRevision: UInt64 = 0, lastRevision: UInt64 = 0
            var conflicts = 0
            listing: while true {
                let listed = try connection.run { (client) throws(WireError) in
                    try client.snapshot(prefix: key, timeoutMilliseconds: connection.timeout)
                }
                // In key order, a transaction of at most 1,024 at a time, each key on condition
                // that it has not changed since the listing.
                for start in stride(from: 0, to: listed.kvs.count, by: WireLimits.maxTxnOps) {
                    let chunk = listed.kvs[start..<min(start + WireLimits.maxTxnOps, listed.kvs.count)]
                    let ops = chunk.map { kv in
                        Beacon_V1_TxnOp.with { $0.delete = .with { $0.key = kv.key; $0.ifVersion = kv.version } }
                    }
                    do {
                        let reply = try connection.client().transaction(ops, timeoutMilliseconds: connection.timeout)
                        deleted += ops.count
                        transactions += 1
                        if firstRevision == 0 { firstRevision = reply.revision }
                        lastRevision = reply.revision
                    } catch let error as WireError where error.reply?.code == .versionConflict || error.reply?.code == .notFound {
                        // A key changed or went since the listing: list what is left again.
                        conflicts += 1
                        guard conflicts < 10 else {
                            throw CommandFailure("beacon: the keys under \(key) kept changing; deleted \(deleted) in \(transactions) transactions, run it again for the rest",
                                code: ExitCode32.conflict)
                        }
                        continue listing
                    } catch let error as WireError {
                        if deleted > 0 { warn("beacon: deleted \(deleted) keys under \(key) before this; run it again for the rest") }
                        throw connection.failure(error)
                    } catch let failure as CommandFailure {
                        throw failure
                    } catch {
                        throw CommandFailure("beacon: \(error)", code: ExitCode32.daemonError)
                    }
                }
                break
            }
            guard deleted > 0 else {
                try connection.print(["prefix": key, "deleted": 0], text: "nothing under \(key)")
                return
            }
            let revisions = firstRevision == lastRevision ? "at revision \(lastRevision)"
                : "in \(transactions) transactions (revisions \(firstRevision)–\(lastRevision))"
            try connection.print(["prefix": key, "deleted": deleted, "revision": lastRevision, "first_revision": firstRevision, "transactions": transactions],
                             text: "deleted \(deleted) key\(deleted == 1 ? "" : "s") under \(key) \(revisions)")
        }
    }
}
