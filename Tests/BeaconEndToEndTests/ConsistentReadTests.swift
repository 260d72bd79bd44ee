import Beacon
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Consistent reads (PROTOCOL.md §4.8) where writes are decided (a primary: every read is one)
/// and at relays (of everything, of one prefix), through the wire, the Swift client and the CLI.
/// etcd fronts' consistent reads are in `EtcdConsistencyTests`.
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

    @Test func aRelaysConsistentReadSeesEveryWriteItsUpstreamAcknowledgedBeforeIt() async throws {
        let directory = try temporaryDirectory()
        let (primary, relay) = try startPrimaryAndRelay(in: directory)
        defer { relay.stop(); primary.stop() }
        // A relay of one prefix too: the upstream's head is often a revision it does not carry.
        let partial = try DaemonProcess(runtimeDirectory: directory + "/partial-run", stateDirectory: directory + "/partial-state",
                                        extraArguments: ["--upstream", "ipc://\(directory)/primary-run/beacon.req", "--upstream-prefix", "r."])
        defer { partial.stop() }
        let upstream = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        let wire = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        let partialWire = try WireClient.patient(runtimeDirectory: partial.runtimeDirectory)
        eventually("the relay of r. reaches its upstream") { (try? partialWire.ping().upstream.reachable) == true }
        #expect(try wire.call(.ping(.init())).ping.consistentReads)
        var stale = 0, plainStale = 0
        for round in 1...100 {
            let written = try upstream.call(.put(.with { $0.key = "r.k"; $0.value = .with { $0.intValue = Int64(round) } })).write.revision
            // Half the rounds end with a write the relay of r. does not carry.
            if round % 2 == 0 { _ = try upstream.put("other.k", .with { $0.intValue = Int64(round) }) }
            if try wire.get("r.k", consistent: true).modRevision < written { stale += 1 }
            if try partialWire.get("r.k", consistent: true).modRevision < written { stale += 1 }
            if try wire.get("r.k").modRevision < written { plainStale += 1 }
        }
        print("consistent reads at two relays after a write acknowledged upstream: \(stale) stale of 200; plain: \(plainStale) of 100")
        #expect(stale == 0)
        let head = try upstream.ping().headRevision
        let synced = try wire.call(.ping(.with { $0.sync = true })).ping
        #expect(synced.readRevision >= head && synced.headRevision == synced.readRevision)
        #expect(try wire.call(.list(.with { $0.prefix = "r."; $0.consistent = true })).list.kvs.count == 1)
        #expect(try partialWire.call(.snapshot(.with { $0.prefix = "r."; $0.consistent = true })).snapshot.kvs.count == 1)

        let client = try TestClient(runtimeDirectory: relay.runtimeDirectory).client
        defer { client.close() }
        #expect(try await client.read("r.k", consistency: .linearizable)?.value(as: Int.self) == 100)
        let cli = try await beacon(["get", "--consistent", "r.k"], runtimeDirectory: partial.runtimeDirectory)
        #expect(cli.status == 0 && cli.stdout == "100\n", "\(cli.stderr)")

        // Without its upstream, a relay refuses a consistent read at once and still serves plain ones.
        primary.stop(signal: SIGKILL)
        eventually("the relay finds its upstream gone") { (try? wire.ping().upstream.reachable) == false }
        let error = refusal { _ = try wire.get("r.k", consistent: true) }
        #expect(error?.code == .upstreamUnavailable, "\(String(describing: error))")
        #expect(try wire.get("r.k").value.intValue == 100)
    }

    @Test func aRelayStoppedWhileAConsistentReadWaitsForItsUpstreamAnswersItAndExits() async throws {
        let directory = try temporaryDirectory()
        let (primary, relay) = try startPrimaryAndRelay(in: directory)
        defer { relay.stop(); primary.stop() }
        let reader = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        let observer = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        let before = try observer.stats().requests
        // The upstream, frozen, never answers the relay's Ping{sync}: the read waits for it.
        try #require(freeze(primary.process.processIdentifier))
        defer { thaw(primary.process.processIdentifier) }
        let id = try reader.send(.get(.with { $0.key = "k"; $0.consistent = true }))
        // Read by the relay: its request count covers it (and the observer's Stats).
        var polls: UInt64 = 0
        #expect(waitUntil(seconds: 30) {
            polls += 1
            return ((try? observer.stats().requests) ?? 0) >= before + polls + 1
        })
        #expect(relay.stop() == 0, "the relay exits at once, answering the read")
        let error = refusal { _ = try reader.awaitReply(to: id, timeoutMilliseconds: 10_000) }
        #expect(error?.code == .upstreamUnavailable, "\(String(describing: error))")
    }
}
