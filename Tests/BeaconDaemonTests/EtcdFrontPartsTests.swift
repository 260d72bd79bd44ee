#if Etcd  // the Etcd trait (Package.swift)
@testable import BeaconDaemon
import BeaconEtcd
import BeaconJournal
import BeaconProtocol
import Foundation
import Testing

/// The rules of an etcd front without etcd: how a write becomes a transaction and its answer a
/// reply, and how watched events become Beacon revisions.
@Suite("etcd front parts")
struct EtcdFrontPartsTests {
    let layout = EtcdLayout(prefix: "beacon/")

    private func put(_ key: String, _ number: Int64, ifVersion: UInt64? = nil, createOnly: Bool = false) -> WriteOp {
        var op = WriteOp(Beacon_V1_Put.with {
            $0.key = key
            $0.value = .with { $0.intValue = number }
            $0.createOnly = createOnly
        })
        op.ifVersion = ifVersion
        return op
    }

    private func kv(_ key: String, version: Int64, revision: Int64, lease: Int64 = 0, value: Data = Data()) -> Etcdserverpb_KeyValue {
        .with {
            $0.key = Data(key.utf8)
            $0.version = version
            $0.modRevision = revision
            $0.createRevision = version > 0 ? revision - version + 1 : 0
            $0.lease = lease
            $0.value = value
        }
    }

    // MARK: Writes

    @Test func aWriteComparesWhatItsRulesAskAndWritesTheClockAndItsWriteID() throws {
        let plan = try EtcdWritePlan(ops: [put("a", 1, ifVersion: 3), put("b", 2, createOnly: true), WriteOp(Beacon_V1_Delete.with { $0.key = "c" })],
                                     writeID: Array("id".utf8), layout: layout)
        let txn = plan.request(nowMilliseconds: 1_000, writeIDLease: 77)
        #expect(txn.compare.map { String(decoding: $0.key, as: UTF8.self) } == ["beacon/w/6964", "beacon/k/a", "beacon/k/b", "beacon/k/c"])
        #expect(txn.compare.map(\.target) == [.create, .version, .version, .version])
        #expect(txn.compare.map(\.result) == [.equal, .equal, .equal, .greater])
        #expect(txn.compare.map(\.version) == [0, 3, 0, 0])
        #expect(txn.success.map { String(decoding: $0.requestPut.key.isEmpty ? $0.requestDeleteRange.key : $0.requestPut.key, as: UTF8.self) }
            == ["beacon/k/a", "beacon/k/b", "beacon/k/c", "beacon/t", "beacon/w/6964"])
        #expect(txn.success.last?.requestPut.lease == 77)
        #expect(EtcdLayout.parseClockValue(txn.success[3].requestPut.value)! == (1_000, false))
        let stored = try #require(EtcdLayout.parseStoredValue(txn.success[0].requestPut.value))
        #expect(try Beacon_V1_Value(serializedBytes: stored.encodedValue).intValue == 1)
        #expect(stored.modTimeMilliseconds == 1_000)
        #expect(txn.failure.count == 4, "the write id and each key are read when a compare fails")
    }

    @Test func theBenchmarksTransactionIsTheOneAFrontSendsForThePut() throws {
        let put = Beacon_V1_Put.with {
            $0.key = "a"
            $0.value = .with { $0.intValue = 1 }
            $0.writeID = Data("id".utf8)
        }
        let sent = try EtcdFrontTransaction.put(put, peer: "p", prefix: "beacon/", nowMilliseconds: 1_000, writeIDLease: 77)
        let front = try EtcdWritePlan(ops: [WriteOp(put)], writeID: Array("p".utf8) + [0] + Array("id".utf8), layout: layout)
            .request(nowMilliseconds: 1_000, writeIDLease: 77)
        #expect(sent == front)
        #expect(String(decoding: sent.compare[0].key, as: UTF8.self) == "beacon/w/70006964", "the write id in its peer's namespace")
    }

    @Test func aKeyTwiceInOneTransactionIsRefusedBeforeEtcdIsAsked() {
        #expect(throws: Refusal.self) { try EtcdWritePlan(ops: [put("a", 1), put("a", 2)], writeID: [], layout: layout) }
    }

    @Test func aKeysExpiryIsStoredWithItAndASessionsKeyGoesOnTheSessionsLease() throws {
        let expiring = WriteOp(Beacon_V1_Put.with { $0.key = "a"; $0.value = .with { $0.intValue = 1 }; $0.ttlMs = 5_000 })
        let bound = WriteOp(Beacon_V1_Put.with { $0.key = "b"; $0.value = .with { $0.intValue = 2 }; $0.session = Data("s1".utf8) })
        let plan = try EtcdWritePlan(ops: [expiring, bound], writeID: [], layout: layout)
        #expect(plan.sessions == [Array("s1".utf8)])
        let txn = plan.request(nowMilliseconds: 1_000, writeIDLease: 0, sessionLeases: [Array("s1".utf8): 55])
        #expect(EtcdLayout.parseStoredValue(txn.success[0].requestPut.value)?.expiresAtMilliseconds == 6_000)
        #expect(txn.success.map(\.requestPut.lease) == [0, 55, 0, 0])
        #expect(!plan.isClientsWriteID && plan.writeID.first == 0, "a write without a write id gets one of the front's")

        let expiry = EtcdWritePlan.expiry(of: "a", modRevision: 9, nowMilliseconds: 6_001, layout: layout)
        #expect(expiry.compare.map(\.target) == [.mod] && expiry.compare.map(\.modRevision) == [9])
        #expect(EtcdLayout.parseClockValue(expiry.success[1].requestPut.value)! == (6_001, true))
    }

    @Test func anAppliedWritesVersionsComeFromTheKeysBeforeIt() throws {
        let plan = try EtcdWritePlan(ops: [put("a", 1), put("b", 2), WriteOp(Beacon_V1_Delete.with { $0.key = "c" })], writeID: [], layout: layout)
        let response = Etcdserverpb_TxnResponse.with {
            $0.header.revision = 42
            $0.succeeded = true
            $0.responses = [
                .with { $0.responsePut = .with { $0.prevKv = kv("beacon/k/a", version: 4, revision: 40) } },
                .with { $0.responsePut = .init() },
                .with { $0.responseDeleteRange = .with { $0.deleted = 1 } },
                .with { $0.responsePut = .init() },
            ]
        }
        guard case .applied(let revision, let versions) = plan.outcome(of: response) else { Issue.record("not applied"); return }
        #expect(revision == 42)
        #expect(versions == [5, 1, 0])
    }

    @Test func aFailedCompareIsAnsweredAsThePrimaryAnswersItWithTheOperationsIndex() throws {
        let plan = try EtcdWritePlan(ops: [put("a", 1, ifVersion: 2), put("b", 2, createOnly: true), WriteOp(Beacon_V1_Delete.with { $0.key = "c" })],
                                     writeID: Array("id".utf8), layout: layout)
        func failed(_ a: Int64, _ b: Int64, _ c: Int64, writeID: Bool = false) -> Etcdserverpb_TxnResponse {
            .with {
                $0.header.revision = 50
                $0.responses = [
                    .with { $0.responseRange = .with { $0.kvs = writeID ? [kv("beacon/w/6964", version: 1, revision: 30)] : [] } },
                    .with { $0.responseRange = .with { $0.kvs = a > 0 ? [kv("beacon/k/a", version: a, revision: 45)] : [] } },
                    .with { $0.responseRange = .with { $0.kvs = b > 0 ? [kv("beacon/k/b", version: b, revision: 46)] : [] } },
                    .with { $0.responseRange = .with { $0.kvs = c > 0 ? [kv("beacon/k/c", version: c, revision: 47)] : [] } },
                ]
            }
        }
        func refusal(_ outcome: EtcdWritePlan.Outcome) -> Refusal? {
            if case .refused(let refusal) = outcome { return refusal }
            return nil
        }
        let conflict = try #require(refusal(plan.outcome(of: failed(3, 0, 1))))
        #expect(conflict.code == .versionConflict && conflict.operationIndex == 0 && conflict.currentVersion == 3)
        let exists = try #require(refusal(plan.outcome(of: failed(2, 1, 1))))
        #expect(exists.code == .alreadyExists && exists.operationIndex == 1 && exists.currentVersion == 1)
        let missing = try #require(refusal(plan.outcome(of: failed(2, 0, 0))))
        #expect(missing.code == .notFound && missing.operationIndex == 2)
        guard case .replayed(let revision) = plan.outcome(of: failed(3, 1, 0, writeID: true)) else {
            Issue.record("a write id found is a retry")
            return
        }
        #expect(revision == 30)
    }

    // MARK: The watch

    private func event(_ type: Etcdserverpb_Event.EventType, _ key: String, revision: Int64, version: Int64 = 1, lease: Int64 = 0,
                       value: Data = Data(), previousLease: Int64 = 0) -> Etcdserverpb_Event {
        .with {
            $0.type = type
            $0.kv = kv(key, version: type == .put ? version : 0, revision: revision, lease: lease, value: value)
            $0.prevKv = kv(key, version: 1, revision: revision - 1, lease: previousLease)
        }
    }

    @Test func eachEtcdRevisionThatChangesBeaconKeysIsOneBeaconRevisionWithItsCommitTimeAndKind() throws {
        var reader = EtcdChangeReader(layout: layout, lastCommitMilliseconds: 5)
        let stored = EtcdLayout.storedValue(encodedValue: try Beacon_V1_Value.with { $0.intValue = 9 }.serializedBytes(),
                                            modTimeMilliseconds: 100, expiresAtMilliseconds: 0)
        let revisions = reader.revisions(from: [
            event(.put, "beacon/k/a", revision: 10, value: stored),
            event(.put, "beacon/k/b", revision: 10, version: 3, value: stored),
            event(.put, "beacon/t", revision: 10, value: EtcdLayout.clockValue(milliseconds: 100, isExpiry: false)),
            event(.put, "beacon/t", revision: 11, value: EtcdLayout.clockValue(milliseconds: 110, isExpiry: false)),  // bookkeeping only
            event(.delete, "beacon/k/a", revision: 12),
            event(.put, "beacon/t", revision: 12, value: EtcdLayout.clockValue(milliseconds: 120, isExpiry: true)),
            event(.delete, "beacon/k/b", revision: 13, previousLease: 7),  // a lease ran out
            event(.delete, "beacon/k/c", revision: 14),
            event(.put, "beacon/t", revision: 14, value: EtcdLayout.clockValue(milliseconds: 140, isExpiry: false)),
        ])
        #expect(revisions.map { $0.map(\.revision) } == [[10, 10], [12], [13], [14]])
        #expect(revisions.map { $0.map(\.kind) } == [[.put, .put], [.expire], [.expire], [.delete]])
        #expect(revisions.map { $0.map(\.timestampMilliseconds) } == [[100, 100], [120], [120], [140]])
        #expect(revisions[0].map(\.part) == [0, 1] && revisions[0].map(\.parts) == [2, 2])
        #expect(revisions[0].map(\.version) == [1, 3])
        #expect(try Beacon_V1_Value(serializedBytes: revisions[0][0].value).intValue == 9)
        #expect(reader.lastCommitMilliseconds == 140)
    }

    @Test func everyClusterAndGenerationHasItsOwnEpoch() {
        let epochs = Set([EtcdLayout.epoch(clusterID: 1, generation: 1), EtcdLayout.epoch(clusterID: 2, generation: 1),
                          EtcdLayout.epoch(clusterID: 1, generation: 2)])
        #expect(epochs.count == 3 && !epochs.contains(0))
        #expect(EtcdLayout(prefix: "beacon/").scope != EtcdLayout(prefix: "other/").scope)
    }

    // MARK: Configuration

    private func configuration(_ text: String) throws -> DaemonConfiguration {
        var configuration = DaemonConfiguration(runtimeDirectory: "/run/beacon", stateDirectory: "/var/lib/beacon")
        try configuration.apply(fileContents: text, path: "beacond.conf")
        try configuration.validate()
        return configuration
    }

    @Test func aFrontsSettingsAreReadAndWrongOnesAreRefusedWithTheReason() throws {
        let front = try configuration("etcd_endpoints = unix:///run/etcd.sock, http://10.0.0.2:2379\netcd_prefix = plant/\n")
        #expect(front.etcd?.endpoints == ["unix:///run/etcd.sock", "http://10.0.0.2:2379"])
        #expect(front.etcd?.prefix == "plant/")
        #expect(try configuration("etcd_endpoints = http://h:1").etcd?.prefix == "beacon/")

        #expect { try configuration("etcd_prefix = x/") } throws: { "\($0)".contains("needs an 'etcd_endpoints") }
        #expect { try configuration("etcd_endpoints = h:2379") } throws: { "\($0)".contains("etcd_endpoints: etcd endpoint 'h:2379'") }
        #expect { try configuration("etcd_endpoints = http://h:1\netcd_cert = /c.pem") } throws: { "\($0)".contains("etcd_cert and etcd_key go together") }
        #expect { try configuration("upstream = ipc:///run/beacon/beacon.req\netcd_endpoints = http://h:1") } throws: {
            "\($0)".contains("either a relay (upstream) or an etcd front")
        }
    }
}
#endif
