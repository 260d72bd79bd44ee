#if Etcd  // the Etcd trait (Package.swift)
import Beacon
import BeaconEtcd
import BeaconLocking
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Fronts of one etcd cluster show one history: DESIGN.md's guarantees across fronts. On the
/// cluster the tests share, each test under an etcd prefix of its own.
@Suite("etcd fronts", .timeLimit(.minutes(4)), .offThePool)
struct EtcdFrontTests {
    @Test func aNewGenerationInEtcdGivesEveryFrontTheSameNewEpochAndKeepsTheState() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        _ = try atA.put("g.x", value(1))
        let before = try atA.ping().epoch
        let etcd = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.etcd.endpointList))
        defer { etcd.close() }
        _ = try await etcd.txn(.with { $0.success = [.with { $0.requestPut = .with { $0.key = Data((cluster.prefix + "generation").utf8); $0.value = Data("2 1f".utf8) } }] },
                               idempotent: true)
        for client in [atA, atB] {
            #expect(waitUntil(seconds: 30) { ((try? client.ping())?.epoch ?? before) != before }, "the epoch stayed")
        }
        #expect(try atA.ping().epoch == atB.ping().epoch)
        #expect(try atB.get("g.x").value.intValue == 1)
        #expect(cluster.front("a").stderr.contains("the front took the cluster's state"))
    }

    @Test func aTransactionWrittenAtOneFrontIsSeenWholeByAComputedAtTheOther() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }

        let test = try TestClient(runtimeDirectory: cluster.front("b").runtimeDirectory)
        defer { test.client.close() }
        let pairs = Recorder<[Int]>()
        let (a, b, handle) = try test.onQueue {
            let a = try test.client.signal("t.a", as: Int.self, default: 0)
            let b = try test.client.signal("t.b", as: Int.self, default: 0)
            let pair = computed { [a.value, b.value] }
            return (a, b, effect { pairs.append(pair.value) })
        }
        defer { test.onQueue { handle.dispose() } }
        await test.wait("for the first sync") { a.status == .live && b.status == .live }

        let writer = try cluster.client("a")
        var last: UInt64 = 0
        for round in 1...30 {
            last = try writer.transaction([
                .with { $0.put = .with { $0.key = "t.a"; $0.value = value(Int64(round)) } },
                .with { $0.put = .with { $0.key = "t.b"; $0.value = value(Int64(round)) } },
            ]).revision
        }
        await test.wait("for the last transaction at front b") { a.value == 30 && b.value == 30 }
        #expect(pairs.all.allSatisfy { $0[0] == $0[1] }, "a computed saw half a transaction: \(pairs.all)")
        #expect(test.onQueue { a.metadata.modRevision } == last)

        // The same numbers at both fronts: epoch, head, versions, history.
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        try cluster.waitUntilEveryFrontHolds(last)
        #expect(try atA.ping().epoch == atB.ping().epoch)
        #expect(try atA.get("t.a").version == 30)
        #expect(try atB.get("t.a").version == 30)
        #expect(try historyText(atA, "t.") == historyText(atB, "t."))
        #expect(try historyText(atA, "t.").count == 60)
    }

    @Test func theCLIWritesAtOneFrontAndReadsTheSameAtTheOther() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let a = cluster.front("a").runtimeDirectory, b = cluster.front("b").runtimeDirectory
        #expect(try await beacon(["set", "cli.n", "1"], runtimeDirectory: a).status == 0)
        let piped = try await beacon(["pub"], input: (1...200).map { "cli.p\($0 % 20) \($0)" }.joined(separator: "\n") + "\n", runtimeDirectory: a)
        #expect(piped.status == 0, "\(piped.stderr)")
        let txn = try await beacon(["txn"], input: "cli.x 1\ncli.y 2\n", runtimeDirectory: b)
        #expect(txn.status == 0, "\(txn.stderr)")
        try cluster.waitUntilEveryFrontHolds(try cluster.client("b").ping().headRevision)
        let atA = try await beacon(["ls", "cli.", "--json"], runtimeDirectory: a)
        let atB = try await beacon(["ls", "cli.", "--json"], runtimeDirectory: b)
        #expect(atA.status == 0 && atA.stdout == atB.stdout)
        #expect(atB.stdout.contains("\"key\":\"cli.p19\""))
        #expect(try cluster.client("a").get("cli.p0").value.intValue == 200)
    }

    @Test func aClientMovedFromOneFrontToTheOtherResumesByDelta() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        for index in 0..<10 { _ = try atA.put("m.\(index)", value(Int64(index))) }
        let bookmark = try atA.snapshot(prefix: "m.")
        for index in 10..<20 { _ = try atA.put("m.\(index % 12)", value(Int64(index))) }
        let head = try atA.ping().headRevision
        try cluster.waitUntilEveryFrontHolds(head)

        // The bookmark (epoch, revision) taken at front a is valid at front b.
        #expect(try atB.ping().epoch == bookmark.epoch)
        let fromB = try atB.delta(prefix: "m.", since: bookmark.revision)
        let fromA = try atA.delta(prefix: "m.", since: bookmark.revision)
        #expect(fromB.events.map(\.revision) == fromA.events.map(\.revision))
        #expect(fromB.events.count == 10)
        #expect(fromB.revision == head)
    }

    @Test func aFrontKilledUnderAWriterCatchesUpByWatchAndItsClientsResumeByDelta() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let writer = AcknowledgingWriter(cluster, through: ["a", "b"])
        try writer.write(20)
        let bookmark = try cluster.client("b").snapshot(prefix: "w.")
        #expect(cluster.front("b").stop(signal: SIGKILL) == SIGKILL)
        writer.fronts = ["a"]
        try writer.write(20)
        try cluster.start("b")
        try cluster.waitUntilReachable("b")
        writer.fronts = ["a", "b"]
        try writer.write(20)
        try await writer.check()
        // A client of b resumes from its bookmark by delta: b kept its history through the kill.
        let delta = try cluster.client("b").delta(prefix: "w.", since: bookmark.revision)
        #expect(delta.events.count == 40)
        #expect(!cluster.front("b").stderr.contains("the front took the cluster's state anew"))
    }

    @Test func aKeysTimeToLiveEndsItInOneExpiryThatEveryFrontJournals() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        let written = try atA.put("x.brief", value(1), ttlMilliseconds: 300)
        _ = try atB.put("x.kept", value(2))
        for client in [atA, atB] {
            #expect(waitUntil(seconds: 30) { (try? client.get("x.brief")) == nil }, "x.brief did not expire")
        }
        try cluster.waitUntilEveryFrontHolds(try atA.ping().headRevision)
        let history = try historyText(atA, "x.")
        #expect(history == (try historyText(atB, "x.")))
        #expect(history.filter { $0.contains("x.brief") }.count == 2, "one put and one expiry, whichever front sent it: \(history)")
        #expect(try atA.wholeHistory("x.brief").last?.change.kind == .expire)
        // The put's expiry is the same at both fronts: any of them may send it.
        #expect(try atA.wholeHistory("x.brief").first?.change.expiresAtMs == atB.wholeHistory("x.brief").first?.change.expiresAtMs)
        #expect(try atA.wholeHistory("x.brief").first?.change.expiresAtMs ?? 0 > 0)
        #expect(try atA.wholeHistory("x.brief").last.map { $0.revision > written.revision } == true)
    }

    @Test func aSessionsKeysEndInOneRevisionWhenItsKeepAlivesStopAtWhicheverFront() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        let session = Array("writer-1".utf8)
        #expect(try atA.keepAlive(session: session, ttlMilliseconds: 2_000).keys == 0)
        _ = try atA.put("s.a", value(1), session: session)
        _ = try atA.transaction([.with { $0.put = .with { $0.key = "s.b"; $0.value = value(2); $0.session = Data(session) } }])
        // The session is the writer's wherever it renews it.
        let renewed = try atB.keepAlive(session: session, ttlMilliseconds: 2_000)
        #expect(renewed.keys == 2)
        #expect(renewed.expiresAtMs > UInt64(Date().timeIntervalSince1970 * 1000))

        for client in [atA, atB] {
            #expect(waitUntil(seconds: 30) { (try? client.get("s.a")) == nil && (try? client.get("s.b")) == nil }, "the session's keys stayed")
        }
        try cluster.waitUntilEveryFrontHolds(try atA.ping().headRevision)
        let ends = try atB.wholeHistory("s.").filter { $0.change.kind == .expire }
        #expect(ends.map(\.change.key).sorted() == ["s.a", "s.b"])
        #expect(Set(ends.map(\.revision)).count == 1, "a session's keys go in one revision")
        #expect(try historyText(atA, "s.") == historyText(atB, "s."))

        // A KeepAlive of 0 ends a session at once.
        let other = Array("writer-2".utf8)
        _ = try atB.put("s.c", value(3), session: other)
        #expect(try atA.keepAlive(session: other, ttlMilliseconds: 0).expiresAtMs == 0)
        #expect(waitUntil(seconds: 30) { (try? atB.get("s.c")) == nil })
        #expect(try atB.wholeHistory("s.c").last?.change.kind == .expire)
    }

    /// `sessions_per_peer` counts a peer's sessions in etcd, whichever front started them.
    @Test func aPeersSessionsAreBoundedAcrossFronts() async throws {
        let cluster = try await FrontedCluster()
        defer { cluster.shutDown() }
        let config = cluster.directory + "/limits.conf"
        try "allow = uid:0 read=* write=*\nsessions_per_peer = 2\n".write(toFile: config, atomically: true, encoding: .utf8)
        for name in ["a", "b"] {
            try cluster.start(name, extraArguments: ["--config", config])
            try cluster.waitUntilReachable(name)
        }
        let atA = try cluster.client("a"), atB = try cluster.client("b")
        func refusal(_ body: () throws -> Void) -> Beacon_V1_Error.Code? {
            do { try body() } catch { return (error as? WireError)?.reply?.code }
            return nil
        }
        _ = try atA.keepAlive(session: Array("one".utf8), ttlMilliseconds: 30_000)
        _ = try atB.put("limit.k", value(1), session: Array("two".utf8))
        #expect(refusal { _ = try atA.keepAlive(session: Array("three".utf8), ttlMilliseconds: 30_000) } == .quotaExceeded)
        #expect(refusal { _ = try atB.put("limit.k", value(2), session: Array("three".utf8)) } == .quotaExceeded)
        #expect(try atB.get("limit.k").value.intValue == 1, "a refused write changes nothing")
        // The sessions the peer holds are renewed and written with at its limit.
        _ = try atB.keepAlive(session: Array("one".utf8), ttlMilliseconds: 30_000)
        _ = try atA.put("limit.k", value(3), session: Array("two".utf8))
        #expect(try atA.stats().quotaExceeded == 1 && atB.stats().quotaExceeded == 1)
        // One ended, another may start.
        _ = try atA.keepAlive(session: Array("one".utf8), ttlMilliseconds: 0)
        _ = try atB.keepAlive(session: Array("three".utf8), ttlMilliseconds: 30_000)
    }
}

/// What each fault of the cluster leaves, under writers through both fronts: a cluster each, one
/// test at a time.
@Suite("etcd fronts under faults", .serialized, .timeLimit(.minutes(4)), .offThePool)
struct EtcdFrontFaultTests {
    @Test func withoutAQuorumWritesAreRefusedAtOnceAndReadsGoOnMarkedStale() async throws {
        let cluster = try await FrontedCluster(ownCluster: true)
        defer { cluster.shutDown() }
        try cluster.start("a")
        try cluster.waitUntilReachable("a")
        let client = try cluster.client("a")
        _ = try client.put("q.before", value(1))

        cluster.etcd.kill(1)
        cluster.etcd.kill(2)
        try cluster.waitUntilReachable("a", false)
        let started = ContinuousClock.now
        #expect {
            _ = try client.call(.put(.with { $0.key = "q.during"; $0.value = value(2); $0.writeID = Data("q-during".utf8) }))
        } throws: { error in
            (error as? WireError)?.reply?.code == .upstreamUnavailable
        }
        #expect(ContinuousClock.now - started < .seconds(2), "refused at once")
        #expect(try client.get("q.before").value.intValue == 1, "reads go on")

        try cluster.etcd.restart(1)
        try cluster.etcd.restart(2)
        try cluster.waitUntilReachable("a")
        // An election may still be under way: a client retries UPSTREAM_UNAVAILABLE, with its write id.
        var written: UInt64 = 0
        let after = Beacon_V1_Request.OneOf_Op.put(.with { $0.key = "q.after"; $0.value = value(3); $0.writeID = Data("q-after".utf8) })
        #expect(waitUntil(seconds: 30) {
            guard case .write(let write) = (try? client.call(after))?.result else { return false }
            written = write.revision
            return true
        })
        #expect(try client.get("q.after").modRevision == written)
    }

    /// The etcd leader killed again and again under a writer through both fronts (3 times;
    /// `BEACON_ETCD_LEADER_KILLS` sets how many: `make soak-etcd`).
    @Test func killingTheEtcdLeaderLosesNoAcknowledgedWriteAndAppliesNoneTwice() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let writer = AcknowledgingWriter(cluster, through: ["a", "b"])
        try writer.write(20)
        let kills = ProcessInfo.processInfo.environment["BEACON_ETCD_LEADER_KILLS"].flatMap(Int.init) ?? 3
        for _ in 0..<kills {
            cluster.etcd.kill(try await cluster.etcd.leader())
            try writer.write(20)
            for member in 0..<cluster.etcd.size where cluster.etcd.pid(of: member) == nil { try cluster.etcd.restart(member) }
            try await cluster.etcd.waitUntilEveryMemberHasALeader()
        }
        try await writer.check()
    }

    @Test func aFrozenLeaderHoldsWritesUpOnlyUntilTheNextElection() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let writer = AcknowledgingWriter(cluster, through: ["a", "b"])
        try writer.write(10)
        let leader = try await cluster.etcd.leader()
        cluster.etcd.freeze(leader)
        try writer.write(30)
        cluster.etcd.thaw(leader)
        try await cluster.etcd.waitUntilEveryMemberHasALeader()
        try writer.write(10)
        try await writer.check()
    }

    @Test func aFrontKilledAndRestartedPastEtcdsCompactionTakesTheClustersStateAnew() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let atA = try cluster.client("a")
        for index in 0..<10 { _ = try atA.put("c.\(index)", value(Int64(index))) }
        try cluster.waitUntilEveryFrontHolds(try atA.ping().headRevision)

        #expect(cluster.front("b").stop(signal: SIGKILL) == SIGKILL)
        for index in 0..<10 { _ = try atA.put("c.\(index)", value(Int64(100 + index))) }
        _ = try atA.delete("c.0")
        let head = try atA.ping().headRevision
        let etcd = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.etcd.endpointList))
        defer { etcd.close() }
        try await etcd.compact(through: Int64(head))

        try cluster.start("b")
        try cluster.waitUntilEveryFrontHolds(head)
        let atB = try cluster.client("b")
        let snapshotA = try atA.snapshot(prefix: "c."), snapshotB = try atB.snapshot(prefix: "c.")
        #expect(snapshotB.kvs.map(\.key) == snapshotA.kvs.map(\.key))
        #expect(snapshotB.kvs.map(\.version) == snapshotA.kvs.map(\.version))
        #expect(snapshotB.kvs.map(\.value.intValue) == (1..<10).map { Int64(100 + $0) })
        #expect(snapshotB.epoch == snapshotA.epoch)
        #expect(cluster.front("b").stderr.contains("the front took the cluster's state"))
    }

    /// A front sends a connection's writes to etcd one at a time: what it sends behind them waits
    /// in the front, bounded by `reply_buffer_bytes`, however long etcd takes.
    @Test func writesPiledUpBehindOneEtcdHasNotAnsweredAreBoundedPerConnection() async throws {
        let cluster = try await FrontedCluster(ownCluster: true)
        defer { cluster.shutDown() }
        try "reply_buffer_bytes = 1048576\n".write(toFile: cluster.directory + "/front.conf", atomically: true, encoding: .utf8)
        try cluster.start("a", extraArguments: ["--config", cluster.directory + "/front.conf"])
        try cluster.waitUntilReachable("a")
        let piler = try cluster.client("a")
        // etcd stops answering: the first write waits for it, and those behind it in the front.
        for member in 0..<cluster.etcd.size { cluster.etcd.freeze(member) }
        defer { for member in 0..<cluster.etcd.size { cluster.etcd.thaw(member) } }
        let text = String(repeating: "x", count: 200)
        for index in 0..<6000 { _ = try piler.send(.put(.with { $0.key = "p.\(index)"; $0.value = .with { $0.stringValue = text } })) }
        #expect(waitUntil(seconds: 30) { cluster.front("a").stderr.contains("it piles requests up behind writes") },
                "the piling connection was not closed")
        let other = try cluster.client("a")
        #expect(try other.ping().epoch != 0, "another client is served")
    }
}

/// A cluster that speaks TLS and asks its clients for a certificate of its authority.
@Suite("etcd fronts of a secured cluster", .timeLimit(.minutes(3)), .offThePool)
struct EtcdSecuredFrontTests {
    @Test func aFrontWithTheClusterAuthoritysCertificateWritesAndOneWithoutIsRefused() async throws {
        let cluster = try await FrontedCluster(secured: true)
        defer { cluster.shutDown() }
        let files = try #require(cluster.etcd.tlsFiles)
        try cluster.start("a", extraArguments: ["--etcd-cert", files.certificatePath!, "--etcd-key", files.keyPath!,
                                                "--etcd-ca", files.authorityPath!])
        try cluster.waitUntilReachable("a")
        let client = try cluster.client("a")
        let written = try client.put("tls.k", value(1))
        #expect(try client.get("tls.k").value.intValue == 1)

        // What the front wrote is in etcd, read by a client with the certificate.
        let etcd = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.etcd.endpointList), tls: files)
        defer { etcd.close() }
        let stored = try await etcd.range(.with { $0.key = Data("beacon/k/tls.k".utf8) })
        #expect(stored.kvs.first?.modRevision == Int64(written.revision))

        // Without a client certificate, or without TLS, no member answers.
        for (endpoints, tls) in [(cluster.etcd.endpointList, EtcdTLSFiles(authorityPath: files.authorityPath)),
                                 (cluster.etcd.endpointList.replacingOccurrences(of: "unixs://", with: "unix://"), EtcdTLSFiles())] {
            let refused = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: endpoints), tls: tls, callTimeout: .seconds(2))
            defer { refused.close() }
            await #expect(throws: EtcdError.self) { try await refused.status() }
        }
        try cluster.start("b", extraArguments: ["--etcd-ca", files.authorityPath!])
        let b = try cluster.client("b")
        #expect(throws: (any Error).self) { try b.put("tls.b", value(2), timeoutMilliseconds: 10_000) }
        #expect(try b.ping().upstream.reachable == false)
    }
}
#endif
