#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconLocking
import BeaconTestSupport
import Foundation
import Testing

@Suite("etcd endpoints")
struct EtcdEndpointTests {
    @Test func tcpAndUnixEndpointsAreParsed() throws {
        let list = try EtcdEndpoint.list(parsing: "http://127.0.0.1:2379, https://[::1]:2380,unix:///run/etcd.sock,unixs://m0.client:1")
        #expect(list.map(\.address) == [.tcp(host: "127.0.0.1", port: 2379), .tcp(host: "::1", port: 2380),
                                         .unixSocket(path: "/run/etcd.sock"), .unixSocket(path: "m0.client:1")])
        #expect(list.map(\.isSecure) == [false, true, false, true])
    }

    @Test(arguments: ["", "127.0.0.1:2379", "http://127.0.0.1", "http://:2379", "http://h:0", "http://h:99999", "unix://", "unixs://", "ftp://h:1"])
    func malformedEndpointsAreRefusedWithTheReason(_ text: String) {
        #expect {
            _ = try EtcdEndpoint.list(parsing: text)
        } throws: { error in
            (error as? EtcdError)?.code == .invalidConfiguration
        }
    }

    @Test func aPrefixsRangeEndIsItsNextPrefix() {
        #expect(EtcdClient.rangeEnd(ofPrefix: Array("beacon/".utf8)) == Array("beacon0".utf8))
        #expect(EtcdClient.rangeEnd(ofPrefix: [0x61, 0xFF]) == [0x62])
        #expect(EtcdClient.rangeEnd(ofPrefix: []) == [0])
    }
}

private func put(_ key: String, _ value: String, lease: Int64 = 0) -> Etcdserverpb_RequestOp {
    .with { $0.requestPut = .with { $0.key = Data(key.utf8); $0.value = Data(value.utf8); $0.lease = lease } }
}

/// A transaction that creates `key` only if it does not exist.
private func create(_ key: String, _ value: String) -> Etcdserverpb_TxnRequest {
    .with {
        $0.compare = [.with { $0.key = Data(key.utf8); $0.target = .create; $0.result = .equal; $0.createRevision = 0 }]
        $0.success = [put(key, value)]
    }
}

/// What `call` threw; nil when it returned.
private func outcome(_ call: () async throws(EtcdError) -> Void) async -> EtcdError? {
    do {
        try await call()
        return nil
    } catch {
        return error
    }
}

/// Calls `call` again while it fails with `.unavailable` (an election, a member restarting),
/// for 30 s at most.
private func untilAnswered<Response>(_ call: () async throws(EtcdError) -> Response) async throws -> Response {
    let deadline = ContinuousClock.now + .seconds(30)
    while true {
        let result: Result<Response, EtcdError>
        do {
            result = .success(try await call())
        } catch {
            result = .failure(error)
        }
        switch result {
        case .success(let response):
            return response
        case .failure(let error) where error.code == .unavailable && ContinuousClock.now < deadline:
            try await Task.sleep(for: .milliseconds(20))
        case .failure(let error):
            throw error
        }
    }
}

/// The client against a real three-member cluster: calls, watches and leases, on the cluster the
/// tests share, each under a prefix of its own.
@Suite("etcd client", .offThePool, .timeLimit(.minutes(3)))
struct EtcdClientTests {
    @Test func aTransactionIsOneRevisionAndItsCompareDecides() async throws {
        let cluster = try await EtcdCluster.shared()
        let p = EtcdCluster.uniquePrefix("client")
        // A loaded machine (the whole suite) can hold one answer up for seconds.
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(20))
        defer { client.close() }

        let first = try await client.txn(.with { $0.success = [put("\(p)t/a", "1"), put("\(p)t/b", "2"), put("\(p)t/c", "3")] }, idempotent: false)
        #expect(first.succeeded)
        let created = try await client.txn(create("\(p)t/new", "x"), idempotent: true)
        #expect(created.succeeded)
        #expect(created.header.revision > first.header.revision)
        let again = try await client.txn(create("\(p)t/new", "y"), idempotent: true)
        #expect(!again.succeeded)

        let kvs = try await client.range(.with { $0.key = Data("\(p)t/".utf8); $0.rangeEnd = Data(EtcdClient.rangeEnd(ofPrefix: Array("\(p)t/".utf8))) }).kvs
        #expect(kvs.map { String(decoding: $0.key, as: UTF8.self) } == ["\(p)t/a", "\(p)t/b", "\(p)t/c", "\(p)t/new"])
        #expect(Set(kvs.prefix(3).map(\.modRevision)) == [first.header.revision])
        #expect(kvs.last.map { String(decoding: $0.value, as: UTF8.self) } == "x", "a failed compare changes nothing")
        #expect(kvs.last?.modRevision == created.header.revision)
    }

    @Test func concurrentCallsOnOneClientAreAllAnswered() async throws {
        let cluster = try await EtcdCluster.shared()
        let p = EtcdCluster.uniquePrefix("client")
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(20))
        defer { client.close() }
        let events = Locked(0)
        let start = try await client.range(.with { $0.key = Data("\(p)c/".utf8) }).header.revision + 1
        // A watch ends when its member answers no progress request for three intervals, which
        // a starved machine can cause: watched again from the revision after the last one seen,
        // as a front does.
        let next = Locked(start)
        let watch = Task {
            while !Task.isCancelled {
                do {
                    try await client.watch(prefix: Array("\(p)c/".utf8), from: next.withLock { $0 }) { update in
                        if case .events(let list, _) = update, let last = list.last {
                            events.withLock { $0 += list.count }
                            next.withLock { $0 = last.kv.modRevision + 1 }
                        }
                        return true
                    }
                } catch {
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
        }
        defer { watch.cancel() }
        let failures = await withTaskGroup(of: [String].self) { group in
            for writer in 0..<8 {
                group.addTask {
                    var failures: [String] = []
                    for index in 0..<100 {
                        do {
                            _ = try await client.txn(.with { $0.success = [put("\(p)c/\(writer).\(index)", "v")] }, idempotent: false)
                        } catch {
                            failures.append("\(error)")
                        }
                    }
                    return failures
                }
            }
            return await group.reduce(into: []) { $0 += $1 }
        }
        #expect(failures.isEmpty, "\(failures.count) failed: \(failures.prefix(3))")
        let deadline = ContinuousClock.now + .seconds(30)
        while events.withLock({ $0 }) < 800 && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(events.withLock { $0 } == 800, "the watch beside them saw every change")
    }

    /// etcd's gRPC server pings once per burst of requests it receives (to size its window), and
    /// swift-nio-http2 closes a connection whose peer sends more than 200 control frames in 30 s:
    /// one call at a time, each its own burst, must still never lose a call's answer.
    @Test func manyCallsOneAfterAnotherNeverLoseAnAnswer() async throws {
        let cluster = try await EtcdCluster.shared()
        let p = EtcdCluster.uniquePrefix("client")
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(20))
        defer { client.close() }
        var failures: [String] = []
        for index in 0..<300 {
            do {
                _ = try await client.txn(.with { $0.success = [put("\(p)s/\(index)", "v")] }, idempotent: false)
            } catch {
                failures.append("\(index): \(error)")
            }
        }
        #expect(failures.isEmpty, "\(failures.count) failed: \(failures.prefix(3))")
        let stored = try await client.range(.with {
            $0.key = Data("\(p)s/".utf8); $0.rangeEnd = Data(EtcdClient.rangeEnd(ofPrefix: Array("\(p)s/".utf8))); $0.countOnly = true
        })
        #expect(stored.count == 300)
    }

    @Test func aWatchDeliversWholeRevisionsInOrderFromItsStart() async throws {
        let cluster = try await EtcdCluster.shared()
        let p = EtcdCluster.uniquePrefix("client")
        // A loaded machine (the whole suite) can hold one answer up for seconds.
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(20))
        defer { client.close() }
        let before = try await client.txn(.with { $0.success = [put("\(p)w/0", "0")] }, idempotent: false).header.revision
        for round in 1...5 {
            _ = try await client.txn(.with { $0.success = [put("\(p)w/\(round)a", "a"), put("\(p)w/\(round)b", "b")] }, idempotent: false)
            _ = try await client.txn(.with { $0.success = [put("\(p)elsewhere/\(round)", "x")] }, idempotent: false)
        }
        // A response may carry several revisions (a watch from history does), never part of one.
        let seen = Locked<[[Etcdserverpb_Event]]>([])
        try await client.watch(prefix: Array("\(p)w/".utf8), from: before) { update in
            guard case .events(let events, _) = update else { return true }
            return seen.withLock { seen in
                seen.append(events)
                return seen.joined().count < 11
            }
        }
        let responses = seen.withLock { $0 }
        for events in responses {
            let revisions = Dictionary(grouping: events, by: \.kv.modRevision)
            #expect(revisions.allSatisfy { $0.key == before ? $0.value.count == 1 : $0.value.count == 2 }, "whole revisions: \(revisions)")
        }
        let revisions = responses.joined().map(\.kv.modRevision)
        #expect(revisions == revisions.sorted())
        #expect(revisions.count == 11)
        #expect(revisions.first == before)
    }

    @Test func aRevokedLeaseDeletesItsKeysInOneRevision() async throws {
        let cluster = try await EtcdCluster.shared()
        let p = EtcdCluster.uniquePrefix("client")
        // A loaded machine (the whole suite) can hold one answer up for seconds.
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(20))
        defer { client.close() }
        let lease = try await client.grantLease(seconds: 30)
        #expect(lease.seconds == 30)
        let written = try await client.txn(.with { $0.success = [put("\(p)l/a", "1", lease: lease.id), put("\(p)l/b", "2", lease: lease.id)] },
                                           idempotent: false).header.revision
        #expect(try await client.renewLease(lease.id) == 30)
        try await client.revokeLease(lease.id)
        try await client.revokeLease(lease.id)  // gone already: not an error
        #expect(try await client.renewLease(lease.id) == 0)

        let deletes = Locked<[Etcdserverpb_Event]>([])
        try await client.watch(prefix: Array("\(p)l/".utf8), from: written + 1) { update in
            guard case .events(let events, _) = update else { return true }
            deletes.withLock { $0 += events }
            return false
        }
        let events = deletes.withLock { $0 }
        #expect(events.map(\.type) == [.delete, .delete])
        #expect(Set(events.map(\.kv.modRevision)).count == 1)
        #expect(events.map(\.prevKv.lease) == [lease.id, lease.id])
    }
}

/// What the client does when members die, freeze or lose their quorum, and when etcd compacts:
/// a cluster each, one test at a time.
@Suite("etcd client under faults", .serialized, .offThePool, .timeLimit(.minutes(3)))
struct EtcdClientFaultTests {
    @Test func aWatchFromACompactedRevisionSaysWhereHistoryBegins() async throws {
        let cluster = try await EtcdCluster()
        defer { cluster.shutDown() }
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList))
        defer { client.close() }
        var last: Int64 = 0
        for index in 0..<5 { last = try await client.txn(.with { $0.success = [put("c/\(index)", "x")] }, idempotent: false).header.revision }
        try await client.compact(through: last - 1)
        await #expect {
            try await client.watch(prefix: Array("c/".utf8), from: 2) { _ in true }
        } throws: { error in
            let error = error as? EtcdError
            return error?.code == .compacted && error?.compactedRevision == last - 1
        }
    }

    @Test func writesGoOnAfterTheLeaderIsKilledAndNoneAcknowledgedIsLost() async throws {
        let cluster = try await EtcdCluster()
        defer { cluster.shutDown() }
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList))
        defer { client.close() }
        var acknowledged: [String] = []
        for round in 0..<3 {
            cluster.kill(try await cluster.leader())
            // Writes are retried (each creates its key at most once) until one goes through.
            for index in 0..<20 {
                let key = "k/\(round)/\(index)"
                _ = try await untilAnswered { () async throws(EtcdError) in try await client.txn(create(key, "v"), idempotent: true) }
                acknowledged.append(key)
            }
            for member in 0..<cluster.size where cluster.pid(of: member) == nil { try cluster.restart(member) }
            try await cluster.waitUntilEveryMemberHasALeader()
        }
        for member in 0..<cluster.size {
            let one = try EtcdClient(endpoints: [try EtcdEndpoint(parsing: cluster.endpoint(of: member))])
            defer { one.close() }
            let kvs = try await one.range(.with { $0.key = Data("k/".utf8); $0.rangeEnd = Data(EtcdClient.rangeEnd(ofPrefix: Array("k/".utf8))) }).kvs
            #expect(Set(kvs.map { String(decoding: $0.key, as: UTF8.self) }) == Set(acknowledged), "member \(member)")
        }
    }

    @Test func withoutAQuorumACallIsRefusedAtOnceAndGoesThroughWhenItReturns() async throws {
        let cluster = try await EtcdCluster()
        defer { cluster.shutDown() }
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList), callTimeout: .seconds(10))
        defer { client.close() }
        _ = try await client.txn(create("q/before", "v"), idempotent: true)
        cluster.kill(1)
        cluster.kill(2)
        // The member left loses its leader within an election timeout; from then on it refuses.
        let deadline = ContinuousClock.now + .seconds(30)
        var refusal: EtcdError?
        while refusal == nil && ContinuousClock.now < deadline {
            do {
                _ = try await client.range(.with { $0.key = Data("q/before".utf8) })
                try await Task.sleep(for: .milliseconds(50))
            } catch let error as EtcdError {
                refusal = error
            }
        }
        #expect(refusal?.code == .unavailable)
        let started = ContinuousClock.now
        await #expect {
            _ = try await client.txn(create("q/during", "v"), idempotent: true)
        } throws: { error in
            (error as? EtcdError)?.code == .unavailable
        }
        #expect(ContinuousClock.now - started < .seconds(5), "refused at once, not after the 10 s call timeout")

        try cluster.restart(1)
        try cluster.restart(2)
        try await cluster.waitUntilEveryMemberHasALeader()
        let after = try await client.txn(create("q/after", "v"), idempotent: true)
        #expect(after.succeeded)
    }

    @Test func aFrozenMembersWatchEndsAndTheNextGoesElsewhere() async throws {
        let cluster = try await EtcdCluster()
        defer { cluster.shutDown() }
        let client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.endpointList))
        defer { client.close() }
        let start = try await client.txn(create("f/0", "v"), idempotent: true).header.revision
        cluster.freeze(0)
        defer { cluster.thaw(0) }
        // The first watch may go to the frozen member: it ends within three progress intervals.
        var outcomes: [EtcdError?] = []
        for _ in 0..<cluster.size {
            outcomes.append(await outcome { () async throws(EtcdError) in
                try await client.watch(prefix: Array("f/".utf8), from: start, progressInterval: .milliseconds(200)) { update in
                    if case .events = update { return false }
                    return true
                }
            })
            if outcomes.last! == nil { break }
        }
        #expect(outcomes.last! == nil, "a watch on a member that is not frozen: \(outcomes)")
        #expect(outcomes.dropLast().allSatisfy { $0?.code == .unavailable })
    }
}
#endif
