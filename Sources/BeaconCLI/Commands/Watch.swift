import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "watch", abstract: "Print the values under prefixes, then every change, gaplessly.",
            discussion: """
                With several prefixes the changes of all of them come as one stream in revision order \
                (the daemon is followed at their common prefix and the rest is left out here).

                When the watch cannot continue from where it was — the daemon's journal was replaced \
                (a new epoch) or compacted past the watch's position while it was away — it prints a \
                resync record (op "resync", with the revision and epoch it continues from), then a \
                delete for every key that vanished meanwhile and a put for every key whose value \
                changed, all marked "resync": true, and goes on from there.
                """,
            aliases: ["sub"])
        @OptionGroup var connection: Connection
        @Argument(help: "Prefixes to follow (default: every key).") var prefixes: [String] = []
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Stop after this many changes.", valueName: "n")) var count: Int?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Replay the journal's changes from this revision first, instead of printing the current values.", valueName: "rev"))
        var from: UInt64?
        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        }
        func run() throws {
            var printed = 0
            let wanted = prefixes.isEmpty ? [""] : prefixes
            let prefix = Self.commonPrefix(wanted)
            func isWanted(_ key: String) -> Bool { wanted.contains { key.isUnder($0) } }
            let client = try connection.client()
            do {
                // Subscribe and snapshot first: the replay then ends exactly where live changes begin.
                let follower = try PrefixFollower(client: client, prefix: prefix, requestTimeoutMilliseconds: connection.timeout)
                func show(_ event: Beacon_V1_Event) throws -> Bool {
                    guard isWanted(event.change.key) else { return false }
                    try connection.print(event)
                    printed += 1
                    return count.map { printed >= $0 } ?? false
                }
                // What this watch has shown, to tell what a resync changed.
                var known = follower.state.filter { isWanted($0.key) }
                var resyncsSeen = follower.resyncs
                func showResync(at revision: UInt64) throws -> Bool {
                    resyncsSeen = follower.resyncs
                    let now = follower.state.filter { isWanted($0.key) }
                    try connection.print(["op": "resync", "revision": revision, "epoch": follower.epoch],
                                     text: "resync at revision \(revision) (epoch \(follower.epoch)): the journal was replaced or compacted past this watch")
                    for key in known.keys.sorted() where now[key] == nil {
                        try connection.print(["op": "delete", "key": key, "revision": revision, "resync": true],
                                         text: "\(revision) \(key) deleted (resync)")
                        printed += 1
                        if let count, printed >= count { return true }
                    }
                    for key in now.keys.sorted() where now[key] != known[key] {
                        var record = keyValueObject(now[key]!)
                        record["resync"] = true
                        try connection.print(record, text: "\(key) = \(now[key]!.value.jsonText) (resync)")
                        printed += 1
                        if let count, printed >= count { return true }
                    }
                    known = now
                    return false
                }
                if let from {
                    if from > follower.through + 1 {
                        warn("beacon: --from \(from) is above the head (revision \(follower.through)): changes before revision \(from) are not shown")
                    }
                    var start = from
                    do {
                        while start <= follower.through {
                            let page = try client.history(prefix, exact: false, from: start, to: follower.through,
                                                          timeoutMilliseconds: connection.timeout)
                            for event in page.events where try show(event) { return }
                            guard page.more else { break }
                            start = page.revision + 1
                        }
                    } catch let error as WireError where error.reply?.code == .compacted {
                        // The changes from --from on are gone: a resync says so, with every
                        // current value (none was shown yet), and the watch goes on from there.
                        known = [:]
                        if try showResync(at: follower.through) { return }
                    }
                } else {
                    for kv in follower.state.values.sorted(by: { $0.key < $1.key }) where isWanted(kv.key) {
                        try connection.print(keyValueObject(kv), text: "\(kv.key) = \(kv.value.jsonText)")
                    }
                }
                if let count, printed >= count { return }
                while true {
                    // Between changes too: a reader that went away (`| head -3`) ends the watch.
                    if standardOutputIsClosed() { throw CommandFailure("beacon: output closed", code: ExitCode32.outputClosed) }
                    guard let update = try follower.next(timeoutMilliseconds: 200) else { continue }
                    switch update {
                    case .revision(let events):
                        for event in events where isWanted(event.change.key) {
                            known[event.change.key] = Beacon_V1_KeyValue(after: event)
                        }
                        for event in events where event.revision >= (from ?? 0) {
                            if try show(event) { return }
                        }
                    case .resynced(let revision):
                        if follower.resyncs != resyncsSeen, try showResync(at: revision) { return }
                    }
                }
            } catch let error as WireError {
                throw connection.failure(error)
            }
        }

        /// The longest byte prefix the given prefixes share.
        static func commonPrefix(_ prefixes: [String]) -> String {
            guard var common = prefixes.first.map({ Array($0.utf8) }) else { return "" }
            for prefix in prefixes.dropFirst() {
                common = Array(zip(common, prefix.utf8).prefix { $0 == $1 }.map(\.0))
            }
            return String(decoding: common, as: UTF8.self)
        }
    }
}
