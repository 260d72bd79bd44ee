import BeaconDaemon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// Stored value bytes that no longer decode (a damaged journal) used to be answered as an empty
/// value, silently. Now every read path answers `INTERNAL` naming the key, and the rest still works.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct DamagedValueTests {
    @Test("A stored value that does not decode is an INTERNAL error on get, list, snapshot, delta and history",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3"), "needs the sqlite3 shell"))
    func undecodableStoredValueIsAnError() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let directory = daemon.directory
        let client = try daemon.client()
        _ = try client.put("d.bad", .with { $0.intValue = 1 })
        _ = try client.put("d.good", .with { $0.intValue = 2 })
        await daemon.stop()
        // 0xff opens field 31 with wire type 7, which does not exist: no Value decodes from it.
        let sqlite = Process()
        sqlite.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        sqlite.arguments = [daemon.configuration.journalPath,
                            "UPDATE change_log SET value = x'ff' WHERE key = 'd.bad'; UPDATE state SET value = x'ff' WHERE key = 'd.bad';"]
        try sqlite.run()
        sqlite.waitUntilExit()
        try #require(sqlite.terminationStatus == 0)

        let again = try TestDaemon(reopening: directory)
        defer { again.stopNow() }
        let reopened = try again.client()
        func expectInternal(_ what: String, _ body: () throws(WireError) -> Void) {
            do {
                try body()
                Issue.record("\(what) answered with a value")
            } catch {
                #expect(error.reply?.code == .internal, "\(what): \(error)")
                #expect(error.reply?.key == "d.bad", "\(what): \(error)")
            }
        }
        expectInternal("get") { () throws(WireError) in _ = try reopened.get("d.bad") }
        expectInternal("list") { () throws(WireError) in _ = try reopened.call(.list(.with { $0.prefix = "d." })) }
        expectInternal("snapshot") { () throws(WireError) in _ = try reopened.snapshot(prefix: "d.") }
        expectInternal("snapshot at a revision") { () throws(WireError) in _ = try reopened.snapshot(prefix: "d.", revision: 1) }
        expectInternal("delta") { () throws(WireError) in _ = try reopened.delta(prefix: "d.", since: 0) }
        expectInternal("history") { () throws(WireError) in _ = try reopened.history("d.bad", exact: true) }
        #expect(try reopened.get("d.good").value.intValue == 2, "the rest reads as before")
        let keysOnly = try reopened.call(.list(.with { $0.prefix = "d."; $0.keysOnly = true }))
        #expect(keysOnly.list.kvs.map(\.key) == ["d.bad", "d.good"], "a keys-only list needs no value")
        await again.stop()
    }
}
