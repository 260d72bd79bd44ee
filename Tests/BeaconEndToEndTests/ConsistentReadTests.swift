import Beacon
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Consistent reads (PROTOCOL.md §4.8) where writes are decided (a primary: every read is one)
/// and at a relay (refused, plainly), through the wire, the Swift client and the CLI. etcd
/// fronts' consistent reads are in `EtcdConsistencyTests`.
@Suite("consistent reads at a primary and a relay", .offThePool)
struct ConsistentReadTests {
    @Test func aPrimaryAnswersConsistentReadsAtOnceAndItsReadIndexIsItsHead() async throws {
        let directory = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: directory + "/run", stateDirectory: directory + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        var head: UInt64 = 0
        for index in 1...3 {
            head = try wire.call(.put(.with { $0.key = "c.\(index)"; $0.value = .with { $0.intValue = Int64(index) } })).write.revision
        }
        let ping = try wire.call(.ping(.with { $0.sync = true })).ping
        #expect(ping.consistentReads && ping.readRevision == head && ping.headRevision == head)
        #expect(try wire.call(.ping(.init())).ping.readRevision == 0, "a Ping without sync names no read index")
        #expect(try wire.get("c.2", consistent: true).value.intValue == 2)
        #expect(try wire.call(.list(.with { $0.prefix = "c."; $0.consistent = true })).list.kvs.map(\.key) == ["c.1", "c.2", "c.3"])
        #expect(try wire.call(.snapshot(.with { $0.prefix = "c."; $0.consistent = true })).snapshot.revision == head)

        let client = try TestClient(runtimeDirectory: daemon.runtimeDirectory).client
        defer { client.close() }
        let read = try #require(try await client.read("c.3", consistency: .linearizable))
        #expect(try read.value(as: Int.self) == 3 && read.version == 1 && read.modRevision == head)
        #expect(try await client.read("c.none", consistency: .linearizable) == nil)
        #expect(try await client.list(prefix: "c.").map(\.key) == ["c.1", "c.2", "c.3"])
        #expect(try await client.list(prefix: "c.", consistency: .linearizable).count == 3)

        let cli = try await beacon(["get", "--consistent", "c.1"], runtimeDirectory: daemon.runtimeDirectory)
        #expect(cli.status == 0 && cli.stdout == "1\n", "\(cli.stderr)")
        let listed = try await beacon(["ls", "--consistent", "c."], runtimeDirectory: daemon.runtimeDirectory)
        #expect(listed.status == 0 && listed.stdout.split(separator: "\n").count == 3, "\(listed.stderr)")
    }

    @Test func aRelayRefusesAConsistentReadPlainlyAndStillServesPlainOnes() async throws {
        let directory = try temporaryDirectory()
        let (primary, relay) = try startPrimaryAndRelay(in: directory)
        defer { relay.stop(); primary.stop() }
        let upstream = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        let revision = try upstream.call(.put(.with { $0.key = "r.k"; $0.value = .with { $0.stringValue = "v" } })).write.revision
        let wire = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        eventually("the relay holds the write") { ((try? wire.ping())?.headRevision ?? 0) >= revision }
        let ping = try wire.call(.ping(.init())).ping
        #expect(!ping.consistentReads && ping.hasUpstream)
        for op: Beacon_V1_Request.OneOf_Op in [.get(.with { $0.key = "r.k"; $0.consistent = true }),
                                              .list(.with { $0.prefix = "r."; $0.consistent = true }),
                                              .snapshot(.with { $0.prefix = "r."; $0.consistent = true }),
                                              .ping(.with { $0.sync = true })] {
            let error = refusal { _ = try wire.call(op) }
            #expect(error?.code == .invalidArgument && error?.message.contains("consistent") == true, "\(String(describing: error))")
        }
        #expect(try wire.get("r.k").value.stringValue == "v")
        // A snapshot at a past revision is the same everywhere: it is served.
        #expect(try wire.call(.snapshot(.with { $0.prefix = "r."; $0.revision = revision; $0.consistent = true })).snapshot.kvs.count == 1)

        let client = try TestClient(runtimeDirectory: relay.runtimeDirectory).client
        defer { client.close() }
        await #expect(throws: BeaconError.self) { _ = try await client.read("r.k", consistency: .linearizable) }
        #expect(try await client.read("r.k")?.value(as: String.self) == "v")

        let cli = try await beacon(["get", "--consistent", "r.k"], runtimeDirectory: relay.runtimeDirectory)
        #expect(cli.status != 0 && cli.stderr.contains("cannot serve a consistent read"), "\(cli.stderr)")
    }
}
