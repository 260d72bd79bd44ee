import Beacon
import BeaconLocking
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization
import Testing
import BeaconTestSupport

/// Daemons on loopback tcp with CURVE: a primary, relays of it, and relays of relays.
final class RelayCluster {
    let directory: String
    private(set) var keys: [String: ZMQCurveKeyPair] = [:]

    init() throws {
        directory = try temporaryDirectory()
    }

    /// The key pair named `name`, made (and written to `name.key`) on first use.
    func key(_ name: String) throws -> ZMQCurveKeyPair {
        if let existing = keys[name] { return existing }
        let pair = try ZMQCurveKeyPair.generate()
        try CurveKeyFile(publicKey: pair.publicKey, secretKey: pair.secretKey).text
            .write(toFile: "\(directory)/\(name).key", atomically: true, encoding: .utf8)
        keys[name] = pair
        return pair
    }

    /// The tcp ports each daemon was given: by the kernel at its first start (`:*`, read back from
    /// the endpoints file it writes), the same again when it is started anew.
    private var given: [String: (request: Int, publish: Int)] = [:]

    /// The tcp ports daemon `name` listens on.
    func ports(_ name: String) throws -> (request: Int, publish: Int) {
        try #require(given[name], "daemon \(name) was never started")
    }

    /// Daemon `name`'s request endpoint.
    func requestEndpoint(_ name: String) throws -> String { "tcp://127.0.0.1:\(try ports(name).request)" }

    /// Starts daemon `name` on loopback tcp (CURVE key `name`; ports the kernel chooses, kept for
    /// its later starts), letting this uid and the keys `clients` read and write everything; with
    /// `upstream`, as a relay of that daemon (with its own key `name`).
    func start(_ name: String, clients: [String] = [], upstream: String? = nil,
               lines extra: [String] = [], localRights: String = "read=* write=*") throws -> DaemonProcess {
        let ports = given[name].map { (String($0.request), String($0.publish)) } ?? ("*", "*")
        var lines = [
            "request_endpoint = tcp://127.0.0.1:\(ports.0)", "publish_endpoint = tcp://127.0.0.1:\(ports.1)",
            "curve_secret_key_file = \(directory)/\(name).key",
            "allow = uid:\(getuid()) \(localRights)",
        ]
        _ = try key(name)
        for client in clients { lines.append("allow = key:\(try key(client).publicKey) read=* write=*") }
        if let upstream {
            lines += ["upstream = \(try requestEndpoint(upstream))", "upstream_publish = tcp://127.0.0.1:\(try self.ports(upstream).publish)",
                      "upstream_server_key = \(try key(upstream).publicKey)", "upstream_key_file = \(directory)/\(name).key"]
        }
        let config = "\(directory)/\(name).conf"
        try (lines + extra).joined(separator: "\n").write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: "\(directory)/\(name)-run", stateDirectory: "\(directory)/\(name)-state",
                                       extraArguments: ["--config", config])
        if given[name] == nil {
            let bound = try daemon.boundEndpoints()
            func port(_ endpoints: [String]) throws -> Int {
                try #require(endpoints.first { $0.hasPrefix("tcp://") }.flatMap { $0.split(separator: ":").last.flatMap { Int($0) } })
            }
            given[name] = (try port(bound.request), try port(bound.publish))
        }
        return daemon
    }
}

/// A primary and a relay of it over ipc (no CURVE), in `directory` (`primary-run`, `run`),
/// returned once the relay has reached its upstream.
func startPrimaryAndRelay(in directory: String, primaryArguments: [String] = [],
                          relayArguments: [String] = []) throws -> (primary: DaemonProcess, relay: DaemonProcess) {
    let primary = try DaemonProcess(runtimeDirectory: directory + "/primary-run", stateDirectory: directory + "/primary-state",
                                    extraArguments: primaryArguments)
    let relay = try DaemonProcess(runtimeDirectory: directory + "/run", stateDirectory: directory + "/state",
                                  extraArguments: ["--upstream", "ipc://\(directory)/primary-run/beacon.req"] + relayArguments)
    let run = relay.runtimeDirectory
    eventually("the relay reaches its upstream") { (try? WireClient.patient(runtimeDirectory: run).ping().upstream.reachable) == true }
    return (primary, relay)
}

/// Aborts every tcp connection to `port` on loopback, as a dropped link would (`ss -K`, iproute2),
/// and expects there was one at least.
func dropConnections(toPort port: Int) throws {
    let ss = Process()
    ss.executableURL = URL(fileURLWithPath: "/usr/bin/ss")
    ss.arguments = ["-K", "-H", "-t", "dst", "127.0.0.1", "dport", "=", ":\(port)"]
    let output = Pipe.forChild()
    ss.standardOutput = output
    ss.standardError = FileHandle.nullDevice
    try ss.runSerially()
    let killed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
    ss.waitUntilExit()
    #expect(ss.terminationStatus == 0 && !killed.isEmpty, "ss -K (iproute2) dropped no connection to \(port)")
}

/// The daemon's error that `body` was refused with; `nil` if it succeeded or failed otherwise.
func refusal(_ body: () throws -> Void) -> Beacon_V1_Error? {
    do {
        try body()
        return nil
    } catch {
        return (error as? WireError)?.reply
    }
}

/// Every live key of a daemon, as it reports them.
func everything(_ client: WireClient) throws -> [Beacon_V1_KeyValue] {
    guard case .list(let list) = try client.call(.list(.init()), timeoutMilliseconds: expectedReplyWait).result else { return [] }
    return list.kvs
}

/// Runs transactions setting `keys(i)` to i = 1, 2, … on the daemon in `runtimeDirectory`, each
/// retried with its write id until acknowledged, until `stop` says so; each acknowledged i goes
/// to `acknowledged`, then `after` runs, on the same connection. A transaction sent but not yet
/// acknowledged when `stop` says so may have been applied: it is retried until it is (60 s at
/// most), so that the last acknowledged i is the last applied.
func writeTransactions(on runtimeDirectory: String, keys: @escaping @Sendable (Int) -> [String], until stop: @escaping @Sendable () -> Bool,
                       acknowledged: @escaping @Sendable (Int) -> Void, group: DispatchGroup,
                       after: @escaping @Sendable (WireClient, Int) -> Void = { _, _ in }) {
    DispatchQueue.global().async(group: group) {
        guard let client = try? WireClient.patient(runtimeDirectory: runtimeDirectory) else { return }
        var i = 1
        var unacknowledged = false
        var stoppedAt: ContinuousClock.Instant?
        while !stop() || (unacknowledged && ContinuousClock.now < (stoppedAt ?? .now) + .seconds(60)) {
            if stoppedAt == nil && stop() { stoppedAt = .now }
            let ops: [Beacon_V1_TxnOp] = keys(i).map { key in
                .with { $0.put = .with { $0.key = key; $0.value = .with { $0.intValue = Int64(i) } } }
            }
            if (try? client.transaction(ops, writeID: Array("t\(i)".utf8), timeoutMilliseconds: 500)) != nil {
                acknowledged(i)
                after(client, i)
                i += 1
                unacknowledged = false
            } else {
                unacknowledged = true
            }
        }
    }
}

/// Waits (30 s at most) for `probe`'s effect over its pair of keys to see both at `total`, and
/// expects that it never saw half a transaction nor a value go back.
func expectWholeEffectRuns(_ probe: ProbeProcess, endingAt total: Int) async throws {
    let deadline = ContinuousClock.now + .seconds(30)
    func runs() -> [[Int]] { probe.lines.filter { $0.hasPrefix("E ") }.map { $0.split(separator: " ").dropFirst().map { Int($0)! } } }
    while runs().last != [total, total] && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
    let effectRuns = runs()
    #expect(effectRuns.last == [total, total])
    #expect(effectRuns.allSatisfy { $0[0] == $0[1] }, "an effect saw half a transaction: \(effectRuns.filter { $0[0] != $0[1] }.prefix(5))")
    #expect(zip(effectRuns, effectRuns.dropFirst()).allSatisfy { $0[0] < $1[0] }, "values went backwards or repeated")
}

/// A relay is a daemon like any other to its clients: same epoch, revisions, versions and
/// values as its upstream, live diffs and deltas, writes forwarded and read back through it.
@Suite(.serialized, .enabled(if: ZMQCurveKeyPair.isSupported, "libzmq without CURVE"), .offThePool, .timeLimit(.minutes(3)))
struct RelayTests {
    /// Waits until `relay` shows everything `primary` has, under the same epoch.
    static func waitForMirror(_ relay: WireClient, of primary: WireClient, seconds: Double = 10) throws {
        let head = try primary.ping()
        eventually("the relay reaches the primary's head \(head.headRevision)", seconds: seconds) {
            guard let ping = try? relay.ping(timeoutMilliseconds: 1000) else { return false }
            return ping.epoch == head.epoch && ping.headRevision >= head.headRevision
        }
        #expect(try everything(relay) == everything(primary))
    }

    @Test("A relay mirrors its upstream with the same numbers, serves its reads, live diffs and deltas, and forwards writes")
    func relayMirrorsAndForwards() async throws {
        let cluster = try RelayCluster()
        let primary = try cluster.start("primary", clients: ["relay"])
        defer { primary.stop() }
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<50 { _ = try root.put("a.k\(index)", .with { $0.intValue = Int64(index) }) }
        _ = try root.transaction([.with { $0.put = .with { $0.key = "a.x"; $0.value = .with { $0.intValue = 1 } } },
                                  .with { $0.put = .with { $0.key = "a.y"; $0.value = .with { $0.intValue = 1 } } }])
        _ = try root.delete("a.k0")
        _ = try root.put("b.ttl", .with { $0.stringValue = "later" }, ttlMilliseconds: 3_600_000)

        let relayDaemon = try cluster.start("relay", upstream: "primary")
        defer { relayDaemon.stop() }
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try Self.waitForMirror(relay, of: root)
        let ping = try relay.ping()
        #expect(try ping.upstream.endpoint == cluster.requestEndpoint("primary"))
        #expect(ping.upstream.reachable)
        #expect(try root.ping().upstream == Beacon_V1_UpstreamStatus(), "a primary reports no upstream")
        #expect(try relay.get("b.ttl").expiresAtMs == root.get("b.ttl").expiresAtMs)

        // Live: a follower of the relay sees the primary's revisions, whole, with their numbers.
        let follower = try PrefixFollower(client: relay, prefix: "a.")
        let txn = try root.transaction([.with { $0.put = .with { $0.key = "a.x"; $0.value = .with { $0.intValue = 2 } } },
                                        .with { $0.put = .with { $0.key = "a.y"; $0.value = .with { $0.intValue = 2 } } }])
        var seen: [Beacon_V1_Event] = []
        try eventually("the relay's subscriber sees the transaction") {
            if case .revision(let events) = try follower.next(timeoutMilliseconds: 100) { seen = events }
            return !seen.isEmpty
        }
        #expect(seen.map(\.revision) == [txn.revision, txn.revision])
        #expect(seen.map(\.change.key) == ["a.x", "a.y"])

        // Writes through the relay: applied once at the primary, and readable at the relay when answered.
        let written = try relay.put("a.k1", .with { $0.intValue = 100 })
        #expect(try relay.get("a.k1").modRevision == written.revision, "read-your-writes through the relay")
        #expect(try root.get("a.k1").version == written.versions[0])
        let id = Array("relay-write-1".utf8)
        let first = try relay.transaction([.with { $0.put = .with { $0.key = "a.z"; $0.value = .with { $0.intValue = 7 } } }], writeID: id)
        let retry = try relay.transaction([.with { $0.put = .with { $0.key = "a.z"; $0.value = .with { $0.intValue = 7 } } }], writeID: id)
        #expect(retry.replayed && retry.revision == first.revision, "a retry with the same write id is applied once")
        #expect(try root.get("a.z").version == 1)
        // Pipelined on one connection: replies come in request order, and a read sent after a
        // write sees it (§4.1 through a relay).
        var sent: [UInt64] = []
        for index in 0..<100 {
            sent.append(try relay.send(.put(.with { $0.key = "p.k\(index % 10)"; $0.value = .with { $0.intValue = Int64(index) } })))
            sent.append(try relay.send(.get(.with { $0.key = "p.k\(index % 10)" })))
        }
        var answered: [Beacon_V1_Reply] = []
        while answered.count < sent.count, let reply = try relay.receiveReply(timeoutMilliseconds: expectedReplyWait) { answered.append(reply) }
        #expect(answered.map(\.id) == sent, "replies in request order")
        for pair in stride(from: 0, to: answered.count - 1, by: 2) {
            #expect(answered[pair + 1].get.kv.modRevision == answered[pair].write.revision, "the read after a write sees it")
        }
        // In a batch too: each request as if sent alone, in order.
        let batch = try relay.batch([.put(.with { $0.key = "b.k"; $0.value = .with { $0.intValue = 5 } }),
                                     .get(.with { $0.key = "b.k" }),
                                     .delete(.with { $0.key = "b.k" }),
                                     .get(.with { $0.key = "b.k" })])
        #expect(batch[1].get.kv.value.intValue == 5 && batch[1].get.kv.modRevision == batch[0].write.revision)
        #expect(batch[3].error.code == .notFound, "the read after the delete in the batch sees it")
        let conflict = refusal { _ = try relay.put("a.k2", .with { $0.intValue = 0 }, ifVersion: 99) }
        #expect(conflict?.code == .versionConflict && conflict?.currentVersion == 1, "\(String(describing: conflict))")

        // Deltas above the relay's first sync are the primary's, event for event.
        let since = try relay.stats().compactedRevision
        try Self.waitForMirror(relay, of: root)
        #expect(try relay.delta(prefix: "", since: since).events == root.delta(prefix: "", since: since).events)
        let stats = try relay.stats()
        #expect(stats.writesForwarded == 106)
        #expect(stats.upstream.reachable && stats.upstream.headRevision >= written.revision)
        // The operator's view: `beacon stats` names the upstream, its head and the lag.
        let run = try await beacon(["stats", "--json"], runtimeDirectory: relayDaemon.runtimeDirectory)
        let object = try run.json()
        #expect(try object["upstream"] as? String == cluster.requestEndpoint("primary"))
        #expect(object["upstream_reachable"] as? Bool == true)
        #expect(object["upstream_lag_revisions"] as? Int == 0)
    }

    @Test("A relay serves reads and refuses writes while its upstream is down, resumes by delta after a kill -9 of either, and resyncs to a new epoch")
    func relaySurvivesFaults() throws {
        let cluster = try RelayCluster()
        var primary = try cluster.start("primary", clients: ["relay"])
        defer { primary.stop() }
        var root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<20 { _ = try root.put("k\(index)", .with { $0.intValue = Int64(index) }) }
        var relayDaemon = try cluster.start("relay", upstream: "primary")
        defer { relayDaemon.stop() }
        var relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try Self.waitForMirror(relay, of: root)
        let firstSync = try relay.stats().compactedRevision

        // The upstream killed: reads go on, the relay says it is stale, writes are refused.
        #expect(primary.stop(signal: SIGKILL) == SIGKILL)
        try eventually("the relay reports its upstream unreachable") { try !relay.ping().upstream.reachable }
        #expect(try relay.get("k3").value.intValue == 3)
        let refused = refusal { _ = try relay.put("k1", .with { $0.intValue = -1 }) }
        #expect(refused?.code == .upstreamUnavailable, "\(String(describing: refused))")
        let subscriber = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try subscriber.subscribe("k")
        try eventually("the relay's heartbeats say it is stale") {
            guard case .heartbeat(let heartbeat) = try subscriber.receivePublication(timeoutMilliseconds: 500) else { return false }
            return !heartbeat.upstream.reachable
        }

        // The upstream back (same journal): the relay catches up by delta, no resync.
        primary = try cluster.start("primary", clients: ["relay"])
        root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<10 { _ = try root.put("k\(index)", .with { $0.intValue = Int64(100 + index) }) }
        try Self.waitForMirror(relay, of: root)
        #expect(try relay.ping().upstream.reachable)
        #expect(try relay.stats().compactedRevision == firstSync, "resumed by delta: nothing replaced")
        _ = try relay.put("k19", .with { $0.intValue = 1900 })

        // The relay killed while the primary writes on: it restarts from its journal and catches up.
        #expect(relayDaemon.stop(signal: SIGKILL) == SIGKILL)
        for index in 10..<20 { _ = try root.put("k\(index)", .with { $0.intValue = Int64(100 + index) }) }
        relayDaemon = try cluster.start("relay", upstream: "primary")
        relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try Self.waitForMirror(relay, of: root)
        #expect(try relay.stats().compactedRevision == firstSync, "resumed by delta after its own restart")

        // A new upstream journal: a new epoch, and the relay takes the new state whole.
        let oldEpoch = try root.ping().epoch
        primary.stop()
        try FileManager.default.removeItem(atPath: primary.stateDirectory)
        primary = try cluster.start("primary", clients: ["relay"])
        root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        _ = try root.put("fresh", .with { $0.boolValue = true })
        try Self.waitForMirror(relay, of: root)
        #expect(try relay.ping().epoch != oldEpoch)
        #expect(try everything(relay).map(\.key) == ["fresh"])
    }

    @Test("A relay that missed history its upstream compacted away takes the upstream's state, and its own subscriber resyncs")
    func aRelayBehindTheUpstreamsCompactionResyncs() throws {
        let cluster = try RelayCluster()
        let primary = try cluster.start("primary", clients: ["relay"])
        defer { primary.stop() }
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<10 { _ = try root.put("c.k\(index)", .with { $0.intValue = Int64(index) }) }
        var relayDaemon = try cluster.start("relay", upstream: "primary")
        defer { relayDaemon.stop() }
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try Self.waitForMirror(relay, of: root)
        // A subscriber of the relay, complete through the head before the gap.
        let follower = try PrefixFollower(client: relay, prefix: "c.", requestTimeoutMilliseconds: 5000)
        #expect(follower.state.count == 10)
        relayDaemon.stop()

        // While the relay is down the upstream deletes and rewrites keys, then compacts it all.
        for index in 0..<5 { _ = try root.delete("c.k\(index)") }
        for index in 5..<10 { _ = try root.put("c.k\(index)", .with { $0.intValue = Int64(100 + index) }) }
        let head = try root.ping().headRevision
        guard case .compact = try root.call(.compact(.with { $0.revision = head }), timeoutMilliseconds: expectedReplyWait).result else {
            Issue.record("the primary did not compact")
            return
        }

        relayDaemon = try cluster.start("relay", upstream: "primary")
        try Self.waitForMirror(relay, of: root)
        #expect(try relay.stats().compactedRevision == head, "the relay took the upstream's state at its compaction")
        #expect(try everything(relay).map(\.key) == (5..<10).map { "c.k\($0)" }, "the deleted keys are gone at the relay too")
        // The subscriber from before the gap learns of it, finds the history gone, and resyncs.
        _ = try root.put("c.k9", .with { $0.intValue = 9000 })
        try eventually("the relay's subscriber resyncs and follows on") {
            _ = try follower.next(timeoutMilliseconds: 100)
            return follower.state["c.k9"]?.value.intValue == 9000
        }
        #expect(follower.state.keys.sorted() == (5..<10).map { "c.k\($0)" })
        #expect(follower.resyncs >= 1)
    }

    @Test("A relay of one prefix carries its keys with their revisions, refuses the rest plainly, and needs only that prefix upstream")
    func aRelayOfOnePrefix() throws {
        let cluster = try RelayCluster()
        let relayKey = try cluster.key("relay").publicKey
        let primary = try cluster.start("primary", lines: ["allow = key:\(relayKey) read=a. write=a."])
        defer { primary.stop() }
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<5 {
            _ = try root.put("a.k\(index)", .with { $0.intValue = Int64(index) })
            _ = try root.put("b.k\(index)", .with { $0.intValue = Int64(index) })
        }
        let relayDaemon = try cluster.start("relay", upstream: "primary", lines: ["upstream_prefix = a."])
        defer { relayDaemon.stop() }
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        func list(_ client: WireClient, _ prefix: String) throws -> [Beacon_V1_KeyValue] {
            guard case .list(let list) = try client.call(.list(.with { $0.prefix = prefix })).result else { return [] }
            return list.kvs
        }
        eventually("the relay carries the primary's a. keys") { (try? list(relay, "a.")) == (try? list(root, "a.")) }
        let since = try relay.stats().compactedRevision

        // Live: a transaction across a. and b. reaches the relay's subscriber as a whole revision
        // of what the relay carries; the b. writes never reach the relay.
        let follower = try PrefixFollower(client: relay, prefix: "a.")
        let txn = try root.transaction([.with { $0.put = .with { $0.key = "a.x"; $0.value = .with { $0.intValue = 1 } } },
                                        .with { $0.put = .with { $0.key = "b.y"; $0.value = .with { $0.intValue = 1 } } }])
        _ = try root.put("b.z", .with { $0.intValue = 2 })
        var seen: [Beacon_V1_Event] = []
        eventually("the relay's subscriber sees its part of the transaction") {
            if case .revision(let events) = try? follower.next(timeoutMilliseconds: 100) { seen = events }
            return !seen.isEmpty
        }
        #expect(seen.map(\.revision) == [txn.revision] && seen.map(\.change.key) == ["a.x"])
        #expect(seen.first.map { ($0.part, $0.parts) } ?? (9, 9) == (0, 1), "parts numbered within what the relay carries")

        // Writes: under the prefix through the relay; the rest refused by the relay itself.
        let written = try relay.put("a.w", .with { $0.intValue = 3 })
        #expect(try relay.get("a.w").modRevision == written.revision)
        let outside = refusal { _ = try relay.put("b.w", .with { $0.intValue = 3 }) }
        #expect(outside?.code == .permissionDenied && outside?.message.contains("carries only the keys under 'a.'") == true,
                "\(String(describing: outside))")
        #expect(refusal { _ = try relay.get("b.k1") }?.code == .permissionDenied)
        #expect(refusal { _ = try everything(relay) }?.code == .permissionDenied, "a list wider than the prefix is refused")

        // The relay's deltas are the primary's changes under the prefix, revision for revision.
        let relayDelta = try relay.delta(prefix: "a.", since: since).events.map { ($0.revision, $0.change.key, $0.change.version) }
        let rootDelta = try root.delta(prefix: "a.", since: since).events.map { ($0.revision, $0.change.key, $0.change.version) }
        #expect(relayDelta.elementsEqual(rootDelta, by: ==))
        let stats = try relay.stats()
        #expect(stats.upstream.reachable && stats.upstream.headRevision == written.revision, "the upstream's last revision under a.")
    }

    @Test("A relay of several prefixes keeps the upstream's transactions across them whole and in order under dropped links, small high-water marks and a kill -9; restarted with other prefixes it takes them anew")
    func aRelayOfSeveralPrefixes() async throws {
        let cluster = try RelayCluster()
        let relayKey = try cluster.key("relay").publicKey
        let small = ["publish_hwm = 20"]
        // The upstream lets the relay read only what it carries (and c., for its second life).
        let primary = try cluster.start("primary", lines: small + ["allow = key:\(relayKey) read=a.,b.,c. write=a.,b."])
        defer { primary.stop() }
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<5 {
            for prefix in ["a.", "b.", "c."] { _ = try root.put("\(prefix)k\(index)", .with { $0.intValue = Int64(index) }) }
        }
        let carrying = small + ["upstream_prefix = a. b.", "upstream_prefix = a.nested."]
        var relayDaemon = try cluster.start("relay", upstream: "primary", lines: carrying)
        defer { relayDaemon.stop() }
        func list(_ client: WireClient, _ prefix: String) throws -> [Beacon_V1_KeyValue] {
            guard case .list(let list) = try client.call(.list(.with { $0.prefix = prefix })).result else { return [] }
            return list.kvs
        }
        let relayDirectory = relayDaemon.runtimeDirectory
        eventually("the relay carries a. and b.") {
            guard let relay = try? WireClient.patient(runtimeDirectory: relayDirectory) else { return false }
            return (try? list(relay, "a.")) == (try? list(root, "a.")) && (try? list(relay, "b.")) == (try? list(root, "b."))
        }
        let probe = try ProbeProcess(runtimeDirectory: relayDirectory, prefix: "b.k", highWaterMark: 20, pair: ("a.x", "b.y"))
        defer { probe.stop() }
        #expect(try await probe.waitForState { _, connection in connection == "live" })

        // At the primary: transactions over a.x, b.y and a b.k key; between them, writes that
        // touch only a. (the relay must confirm b. before passing them on) or only c.
        let stop = Atomic<Bool>(false)
        let lastTransaction = Atomic<Int>(0)
        let primaryDirectory = primary.runtimeDirectory
        let writers = DispatchGroup()
        writeTransactions(on: primaryDirectory, keys: { ["a.x", "b.y", "b.k\($0 % 20)"] }, until: { stop.load(ordering: .relaxed) },
                          acknowledged: { lastTransaction.store($0, ordering: .relaxed) }, group: writers) { client, i in
            _ = try? client.put("a.only\(i % 7)", .with { $0.intValue = Int64(i) }, timeoutMilliseconds: 500)
            _ = try? client.put("c.k\(i % 7)", .with { $0.intValue = Int64(i) }, timeoutMilliseconds: 500)
        }
        try await Task.sleep(for: .milliseconds(300))
        try dropConnections(toPort: try cluster.ports("primary").publish)  // the relay's subscription to the primary
        try await Task.sleep(for: .milliseconds(300))
        kill(relayDaemon.process.processIdentifier, SIGSTOP)  // its queues from the primary overflow
        try await Task.sleep(for: .milliseconds(500))
        kill(relayDaemon.process.processIdentifier, SIGCONT)
        try await Task.sleep(for: .milliseconds(300))
        #expect(relayDaemon.stop(signal: SIGKILL) == SIGKILL)
        relayDaemon = try cluster.start("relay", upstream: "primary", lines: carrying)
        try await Task.sleep(for: .milliseconds(500))
        // The writer goes on until it has been acknowledged many times: a starved machine gets
        // through fewer transactions in the faults above.
        _ = waitUntil(seconds: 90) { lastTransaction.load(ordering: .relaxed) > 50 }
        stop.store(true, ordering: .relaxed)
        writers.wait()

        let total = lastTransaction.load(ordering: .relaxed)
        #expect(total > 50, "the writer should have been acknowledged many times")
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        eventually("the relay ends equal to the primary under a. and b.", seconds: 30) {
            (try? list(relay, "a.")) == (try? list(root, "a.")) && (try? list(relay, "b.")) == (try? list(root, "b."))
        }
        #expect(try relay.ping().epoch == root.ping().epoch)
        // Its history under each prefix is the primary's, revision for revision, from where its
        // own history starts.
        let since = try relay.stats().compactedRevision
        for prefix in ["a.", "b."] {
            let relayDelta = try daemonHistory(relay, prefix: prefix, after: since)
            let rootDelta = try daemonHistory(root, prefix: prefix, after: since)
            let relayChanges = relayDelta.map { "\($0.revision) \($0.key)" }, rootChanges = rootDelta.map { "\($0.revision) \($0.key)" }
            let first = zip(relayChanges, rootChanges).enumerated().first { $0.element.0 != $0.element.1 }?.offset
                ?? min(relayChanges.count, rootChanges.count)
            let difference = "\(prefix): \(relayChanges.count) changes at the relay, \(rootChanges.count) at the primary; from the first "
                + "difference: relay \(relayChanges.dropFirst(first).prefix(3)), primary \(rootChanges.dropFirst(first).prefix(3))"
            #expect(relayChanges == rootChanges, "\(difference)")
        }
        #expect(refusal { _ = try relay.get("c.k1") }?.message.contains("carries only the keys under 'a.', 'b.'") == true)
        #expect(refusal { _ = try everything(relay) }?.code == .permissionDenied, "a list wider than a carried prefix is refused")

        // A client of the relay mirroring a.x and b.y never saw half a transaction, nor a value
        // go back, and ends at the last one.
        try await expectWholeEffectRuns(probe, endingAt: total)
        let history = probe.history
        #expect(zip(history, history.dropFirst()).allSatisfy { $0.revision < $1.revision }, "history went back or repeated")

        #expect(relayDaemon.stderr.contains("following the upstream's bundles"), "the link took bundles (PROTOCOL.md §5.4)")

        // Restarted to carry a. and c.: it takes them anew; b. is no longer carried.
        relayDaemon.stop()
        relayDaemon = try cluster.start("relay", upstream: "primary", lines: small + ["upstream_prefix = a., c."])
        let second = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        eventually("the restarted relay carries a. and c.") {
            (try? list(second, "c.")) == (try? list(root, "c.")) && (try? list(second, "a.")) == (try? list(root, "a."))
        }
        #expect(refusal { _ = try second.get("b.y") }?.code == .permissionDenied)
        #expect(relayDaemon.stderr.contains("the relay takes them anew"))
    }

    @Test("A client of a relay that piles requests up behind a write its upstream has not answered is closed at reply_buffer_bytes; others are served")
    func requestsBehindAnUnansweredWriteAreBounded() throws {
        let directory = try temporaryDirectory()
        try "reply_buffer_bytes = 1048576\n".write(toFile: directory + "/relay.conf", atomically: true, encoding: .utf8)
        let (primary, relay) = try startPrimaryAndRelay(in: directory, relayArguments: ["--config", directory + "/relay.conf"])
        defer { primary.stop(); relay.stop() }
        // The upstream stops answering; the relay still counts it reachable for a few seconds and
        // forwards the write, whose answer then never comes.
        try #require(freeze(primary.process.processIdentifier))
        defer { thaw(primary.process.processIdentifier) }
        let piler = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        let write = try piler.send(.put(.with { $0.key = "p.k"; $0.value = .with { $0.intValue = 1 } }))
        // Reads behind it wait to see the write: 6,000 of about 215 bytes are 1.3 MB.
        let key = "p." + String(repeating: "x", count: 200)
        for _ in 0..<6000 { try piler.send(.get(.with { $0.key = key })) }
        eventually("the relay closes the piling connection", seconds: 60) { relay.stderr.contains("it piles requests up behind writes") }
        let other = try WireClient.patient(runtimeDirectory: relay.runtimeDirectory)
        #expect(try other.ping().upstream.endpoint.hasSuffix("primary-run/beacon.req"), "another client is served")
        // The write's own answer may have left before the close (UPSTREAM_UNAVAILABLE once the
        // forward timeout passed, on a slow machine); none of the reads held behind it did.
        var answered: [UInt64] = []
        while let reply = try piler.receiveReply(timeoutMilliseconds: 200) { answered.append(reply.id) }
        #expect(answered.allSatisfy { $0 == write }, "reads held behind the write were answered: \(answered.prefix(5))")
    }

    @Test("A relay whose key the upstream does not list says why in its log, reports the upstream unreachable and refuses writes")
    func aRefusedRelayLogsWhy() throws {
        let cluster = try RelayCluster()
        let primary = try cluster.start("primary")  // no rule for the relay's key
        defer { primary.stop() }
        let relayDaemon = try cluster.start("relay", upstream: "primary")
        defer { relayDaemon.stop() }
        eventually("the relay logs the refusal") { relayDaemon.stderr.contains("no allow rule there lists its key") }
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        #expect(try !relay.ping().upstream.reachable)
        #expect(refusal { _ = try relay.put("k", .with { $0.intValue = 1 }) }?.code == .upstreamUnavailable)
    }

    @Test("A write through a relay passes the relay's own rules, then the upstream's rules for the relay's key")
    func bothRulesApplyToWritesThroughARelay() throws {
        let cluster = try RelayCluster()
        // The primary lets the relay write app. and sensor. only; the relay lets this uid write
        // app. and shared. only.
        let relayKey = try cluster.key("relay").publicKey
        let primary = try cluster.start("primary", lines: ["allow = key:\(relayKey) read=* write=app.,sensor."])
        defer { primary.stop() }
        let relayDaemon = try cluster.start("relay", upstream: "primary", localRights: "read=* write=app.,shared.")
        defer { relayDaemon.stop() }
        let relay = try WireClient.patient(runtimeDirectory: relayDaemon.runtimeDirectory)
        try eventually("the relay reaches its upstream") { try relay.ping().upstream.reachable }
        #expect(try relay.put("app.x", .with { $0.intValue = 1 }).revision > 0, "allowed by both")
        let local = refusal { _ = try relay.put("sensor.x", .with { $0.intValue = 1 }) }
        #expect(local?.code == .permissionDenied && local?.message.contains("writable: app.,shared.") == true,
                "refused by the relay's own rules: \(String(describing: local))")
        let upstream = refusal { _ = try relay.put("shared.x", .with { $0.intValue = 1 }) }
        #expect(upstream?.code == .permissionDenied, "refused by the upstream's rules for the relay: \(String(describing: upstream))")
        #expect(try relay.stats().writesForwarded == 2, "the locally refused write never left the relay")
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        #expect(refusal { _ = try root.get("shared.x") }?.code == .notFound)
    }

    @Test("beacon against a relay: set, get, ls, watch, history, stats and backup work as against the primary")
    func theCLIWorksAgainstARelay() async throws {
        let dir = try temporaryDirectory()
        let (primary, relay) = try startPrimaryAndRelay(in: dir)
        defer {
            relay.stop()
            primary.stop()
        }
        let run = relay.runtimeDirectory
        let set = try await beacon(["set", "cli.a", "1"], runtimeDirectory: run)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(try await beacon(["get", "cli.a"], runtimeDirectory: run).stdout == "1\n", "read-your-writes through the relay")
        // The current value, then one change.
        let wire = try WireClient.patient(runtimeDirectory: run)
        let requestsBefore = try wire.stats().requests
        let watcher = Task(executorPreference: ThreadPerJobExecutor.shared) { try await beacon(["watch", "cli.", "--json", "--count", "1"], runtimeDirectory: run) }
        // The relay has read the watch's snapshot request (beside each Stats of these polls): a
        // write from now on is a change to the watch, not one of its current values.
        var polls: UInt64 = 0
        #expect(waitUntil(seconds: 30) {
            polls += 1
            return ((try? wire.stats().requests) ?? 0) >= requestsBefore + polls + 1
        }, "the watch asked for its snapshot")
        _ = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory).put("cli.b", .with { $0.intValue = 2 })
        let watched = try await watcher.value
        #expect(watched.status == 0, "\(watched.stderr)")
        #expect(try (0..<watched.lines.count).map { try watched.json($0)["key"] as? String } == ["cli.a", "cli.b"], "\(watched.stdout)")
        #expect(try await beacon(["ls", "cli."], runtimeDirectory: run).lines.count == 2)
        let history = try await beacon(["history", "cli.", "--prefix", "--json"], runtimeDirectory: run)
        #expect(history.status == 0 && history.lines.count == 2, "\(history.stderr)")
        let stats = try await beacon(["stats", "--json"], runtimeDirectory: run)
        #expect(try stats.json()["upstream_reachable"] as? Bool == true, "\(stats.stderr)")
        let backup = try await beacon(["backup", dir + "/relay-copy.sqlite"], runtimeDirectory: run)
        #expect(backup.status == 0 && FileManager.default.fileExists(atPath: dir + "/relay-copy.sqlite"), "\(backup.stderr)")
    }

    @Test("A relay of a relay: writes go up two hops and come back down, and every mirror equals the primary")
    func relayOfARelay() throws {
        let cluster = try RelayCluster()
        let primary = try cluster.start("primary", clients: ["near"])
        defer { primary.stop() }
        let near = try cluster.start("near", clients: ["far"], upstream: "primary")
        defer { near.stop() }
        let far = try cluster.start("far", upstream: "near")
        defer { far.stop() }
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        let nearClient = try WireClient.patient(runtimeDirectory: near.runtimeDirectory)
        let farClient = try WireClient.patient(runtimeDirectory: far.runtimeDirectory)
        // Each relay refuses writes until it has reached its upstream.
        try eventually("the near relay reaches the primary") { try nearClient.ping().upstream.reachable }
        try eventually("the far relay reaches the near one") { try farClient.ping().upstream.reachable }
        for index in 0..<20 {
            _ = try farClient.put("f\(index)", .with { $0.intValue = Int64(index) })
            _ = try root.put("p\(index)", .with { $0.intValue = Int64(index) })
        }
        let written = try farClient.put("f0", .with { $0.stringValue = "two hops" })
        #expect(try farClient.get("f0").modRevision == written.revision)
        try Self.waitForMirror(nearClient, of: root)
        try Self.waitForMirror(farClient, of: root)
    }

    @Test("Through two relay hops, under dropped links, kill -9 of the primary and of a relay, a frozen relay and overflowing high-water marks, a mirror keeps every guarantee and all end equal to the primary")
    func guaranteesHoldThroughTwoHopsUnderFaults() async throws {
        let cluster = try RelayCluster()
        // Small publish high-water marks: under load each hop drops diffs, and each mirror repairs.
        let small = ["publish_hwm = 20"]
        var primary = try cluster.start("primary", clients: ["near"], lines: small)
        defer { primary.stop() }
        var near = try cluster.start("near", clients: ["far"], upstream: "primary", lines: small)
        defer { near.stop() }
        let far = try cluster.start("far", upstream: "near", lines: small)
        defer { far.stop() }
        let probe = try ProbeProcess(runtimeDirectory: far.runtimeDirectory, prefix: "k", highWaterMark: 20, pair: ("a.x", "a.y"))
        defer { probe.stop() }
        #expect(try await probe.waitForState { _, connection in connection == "live" })

        // At the primary: transactions setting a.x, a.y and one k key to i, each retried with its
        // write id until acknowledged. Through the far relay: puts of w keys, the same way.
        let stop = Atomic<Bool>(false)
        let lastTransaction = Atomic<Int>(0)
        let relayAcks = Locked<[(key: String, value: Int, revision: UInt64)]>([])
        let primaryDirectory = primary.runtimeDirectory, farDirectory = far.runtimeDirectory
        let writers = DispatchGroup()
        writeTransactions(on: primaryDirectory, keys: { ["a.x", "a.y", "k\($0 % 20)"] }, until: { stop.load(ordering: .relaxed) },
                          acknowledged: { lastTransaction.store($0, ordering: .relaxed) }, group: writers)
        DispatchQueue.global().async(group: writers) {
            guard let client = try? WireClient.patient(runtimeDirectory: farDirectory) else { return }
            var j = 1
            while !stop.load(ordering: .relaxed) {
                let key = "w\(j % 10)"
                if let written = try? client.put(key, .with { $0.intValue = Int64(j) }, writeID: Array("w\(j)".utf8), timeoutMilliseconds: 2000) {
                    relayAcks.withLock { $0.append((key, j, written.revision)) }
                    j += 1
                } else {
                    usleep(20_000)  // refused while the relays are stale: retried with its write id
                }
            }
        }

        try await Task.sleep(for: .milliseconds(300))
        // Dropped links: the near relay's tcp connections to the primary are torn down under it
        // (ss -K: the kernel aborts them); it reconnects and repairs what went by meanwhile.
        try dropConnections(toPort: try cluster.ports("primary").publish)
        try dropConnections(toPort: try cluster.ports("primary").request)
        try await Task.sleep(for: .milliseconds(300))
        kill(near.process.processIdentifier, SIGSTOP)  // a frozen relay: the far one goes stale
        try await Task.sleep(for: .milliseconds(700))
        kill(near.process.processIdentifier, SIGCONT)
        try await Task.sleep(for: .milliseconds(400))
        #expect(near.stop(signal: SIGKILL) == SIGKILL)
        try await Task.sleep(for: .milliseconds(200))
        near = try cluster.start("near", clients: ["far"], upstream: "primary", lines: small)
        try await Task.sleep(for: .milliseconds(400))
        #expect(primary.stop(signal: SIGKILL) == SIGKILL)
        try await Task.sleep(for: .milliseconds(300))
        primary = try cluster.start("primary", clients: ["near"], lines: small)
        // The writers go on until both have been acknowledged many times (a slow machine, or the
        // ThreadSanitizer run, takes longer through the faults above).
        _ = waitUntil(seconds: 90) { lastTransaction.load(ordering: .relaxed) > 100 && relayAcks.withLock { $0.count } > 10 }
        stop.store(true, ordering: .relaxed)
        writers.wait()

        let total = lastTransaction.load(ordering: .relaxed)
        #expect(total > 100, "the writer should have been acknowledged many times")
        let root = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        try Self.waitForMirror(try WireClient.patient(runtimeDirectory: near.runtimeDirectory), of: root, seconds: 30)
        try Self.waitForMirror(try WireClient.patient(runtimeDirectory: far.runtimeDirectory), of: root, seconds: 30)

        // Durable and applied once: every write acknowledged through two relays is at the
        // primary, each key at its last acknowledged value, at increasing revisions.
        let acks = relayAcks.withLock { $0 }
        #expect(acks.count > 10, "writes through the relays should have been acknowledged")
        #expect(zip(acks, acks.dropFirst()).allSatisfy { $0.revision < $1.revision })
        var lastValue: [String: Int] = [:]
        for ack in acks { lastValue[ack.key] = ack.value }
        // The write the writer was retrying when it stopped may have been applied unacknowledged.
        let pending = acks.count + 1
        for (key, value) in lastValue {
            let stored = Int(try root.get(key).value.intValue)
            #expect(stored == value || (stored == pending && key == "w\(pending % 10)"), "\(key): \(stored), acknowledged \(value)")
        }

        // Atomic, ordered, monotonic: the effect over a.x and a.y, two hops away, never saw half
        // a transaction nor a value go back, and ends at the last one.
        try await expectWholeEffectRuns(probe, endingAt: total)

        // Convergent and gapless: the far mirror equals the primary; its history stream is
        // ordered and unique, and after its last resync has every change the primary journaled.
        let expected = try daemonState(root, prefix: "k")
        #expect(try await probe.waitForState { state, connection in state == expected && connection == "live" })
        let history = probe.history
        #expect(zip(history, history.dropFirst()).allSatisfy { $0.revision < $1.revision }, "history went back or repeated")
        let resync = probe.lines.last { $0.hasPrefix("R ") }.flatMap { UInt64($0.split(separator: " ")[1]) } ?? 0
        let journaled = try daemonHistory(root, prefix: "k").filter { $0.revision > resync }
        let streamed = history.filter { $0.revision > resync }
        #expect(streamed.map(\.revision) == journaled.map(\.revision), "the stream through two relays skipped or added changes")
        #expect(try await probe.dump().repairs > 0, "the faults should have made the far mirror repair")
    }

    /// The request side is one `RequestChannel` in every client: the Beacon client watches the
    /// handshake as the CLI does, so that a daemon refusing its key is an error at once — before,
    /// its writes waited out their timeout and failed as if no daemon ran.
    @Test("A Beacon client whose key no rule admits: its write fails PERMISSION_DENIED naming the key, not a timeout")
    func aClientTheDaemonRefusesIsToldWhy() async throws {
        let cluster = try RelayCluster()
        let primary = try cluster.start("primary")
        defer { primary.stop() }
        let stranger = try cluster.key("stranger")
        var configuration = BeaconConfiguration(requestEndpoint: try cluster.requestEndpoint("primary"),
                                                publishEndpoint: "tcp://127.0.0.1:\(try cluster.ports("primary").publish)")
        configuration.curve = CurveCredentials(serverKey: try cluster.key("primary").publicKey, keys: stranger)
        configuration.writeTimeout = .seconds(120)  // a refusal must not wait it out
        let client = try BeaconClient(configuration: configuration)
        defer { client.close() }
        do {
            _ = try await client.set("s.a", 1)
            Issue.record("a write from a key no rule admits succeeded")
        } catch {
            #expect(error.code == .permissionDenied, "\(error)")
            #expect(error.message.contains(stranger.publicKey), "\(error.message)")
        }
        #expect(try WireClient.patient(runtimeDirectory: primary.runtimeDirectory).ping().headRevision == 0)
    }

    @Test("A Beacon client on a relay: its connection goes stale with the upstream, a write waits it out and completes once the upstream is back")
    func aClientOnARelaySeesItStaleAndItsWriteRetried() async throws {
        let cluster = try RelayCluster()
        var primary = try cluster.start("primary", clients: ["relay"])
        defer { primary.stop() }
        let relay = try cluster.start("relay", upstream: "primary")
        defer { relay.stop() }
        let test = try TestClient(runtimeDirectory: relay.runtimeDirectory) { $0.writeTimeout = .seconds(20) }
        defer { test.client.close() }
        let map = try test.onQueue { try test.client.mirror(prefix: "s.", as: Int.self) }
        _ = try await test.client.set("s.a", 1)
        await test.wait("for the mirror") { test.client.connection.value == .live && map.value == ["s.a": 1] }

        #expect(primary.stop(signal: SIGKILL) == SIGKILL)
        await test.wait("for the client to see the relay stale") { test.client.connection.value == .stale }
        #expect(test.onQueue { map.value } == ["s.a": 1], "the relay's last values stay")
        let client = test.client
        let write = Task(executorPreference: ThreadPerJobExecutor.shared) { try await client.set("s.a", 2) }
        try await Task.sleep(for: .milliseconds(500))
        primary = try cluster.start("primary", clients: ["relay"])
        let written = try await write.value
        #expect(test.onQueue { map.value } == ["s.a": 2], "read-your-writes once the write completes")
        await test.wait("for the connection to be live again") { test.client.connection.value == .live }
        #expect(try WireClient.patient(runtimeDirectory: primary.runtimeDirectory).get("s.a").modRevision == written.revision)
    }
}
