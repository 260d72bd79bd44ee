#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// A three-member etcd cluster and `beacond`s fronting it, each on its own directories.
final class FrontedCluster {
    let etcd: EtcdCluster
    /// The fronts' `etcd_prefix`.
    let prefix: String
    /// Whether the etcd cluster is the one the tests share (and outlives this).
    let isShared: Bool
    let directory: String
    private var fronts: [String: DaemonProcess] = [:]

    /// On the cluster the tests share, under a prefix of its own; or (`ownCluster`) on a cluster of
    /// its own, for a test that stops members or compacts, or (`secured`) needs TLS.
    init(ownCluster: Bool = false, secured: Bool = false) async throws {
        isShared = !ownCluster && !secured
        etcd = isShared ? try await EtcdCluster.shared() : try await EtcdCluster(secured: secured)
        prefix = isShared ? EtcdCluster.uniquePrefix("front") : "beacon/"
        directory = try temporaryDirectory()
    }

    /// Starts (or starts again, on its journal) front `name`.
    @discardableResult
    func start(_ name: String, extraArguments: [String] = []) throws -> DaemonProcess {
        try FileManager.default.createDirectory(atPath: "\(directory)/\(name)", withIntermediateDirectories: true)
        let front = try DaemonProcess(runtimeDirectory: "\(directory)/\(name)/run", stateDirectory: "\(directory)/\(name)/state",
                                      extraArguments: ["--etcd-endpoints", etcd.endpointList, "--etcd-prefix", prefix] + extraArguments)
        fronts[name] = front
        return front
    }

    func front(_ name: String) -> DaemonProcess { fronts[name]! }

    func client(_ name: String) throws -> WireClient {
        try WireClient.patient(runtimeDirectory: fronts[name]!.runtimeDirectory)
    }

    /// Waits until front `name` says a member with a leader answers it.
    func waitUntilReachable(_ name: String, _ reachable: Bool = true) throws {
        let client = try self.client(name)
        let reached = waitUntil(seconds: 30) { (try? client.ping(timeoutMilliseconds: 500))?.upstream.reachable == reachable }
        #expect(reached, "front \(name) did not become \(reachable ? "reachable" : "unreachable")")
    }

    /// Waits until every front shows etcd revision `revision`.
    func waitUntilEveryFrontHolds(_ revision: UInt64) throws {
        for (name, front) in fronts where front.process.isRunning {
            let client = try WireClient.patient(runtimeDirectory: front.runtimeDirectory)
            let caught = waitUntil(seconds: 30) { ((try? client.ping(timeoutMilliseconds: 500))?.headRevision ?? 0) >= revision }
            #expect(caught, "front \(name) did not reach revision \(revision)")
        }
    }

    /// The fronts running now.
    var running: [String] { fronts.filter { $0.value.process.isRunning }.map(\.key).sorted() }

    func shutDown() {
        for front in fronts.values where front.process.isRunning { front.stop() }
        if !isShared { etcd.shutDown() }
    }
}

func value(_ number: Int64) -> Beacon_V1_Value { .with { $0.intValue = number } }

/// The events of a whole history, as comparable text: revision, part, kind, key, version, value.
func historyText(_ client: WireClient, _ prefix: String) throws -> [String] {
    try client.wholeHistory(prefix).map {
        "\($0.revision).\($0.part)/\($0.parts) \($0.change.kind) \($0.change.key) v\($0.change.version) \($0.change.value.intValue)"
    }
}

/// Writes keys `w.N` through the fronts in turn, each retried with its write id until an
/// answer says it was applied (only "not now" answers are expected before that), and checks
/// at the end that every acknowledged write is in etcd and at every front, once.
final class AcknowledgingWriter {
    let cluster: FrontedCluster
    var fronts: [String]
    private(set) var acknowledged: [String: UInt64] = [:]
    private var index = 0

    init(_ cluster: FrontedCluster, through fronts: [String]) {
        self.cluster = cluster
        self.fronts = fronts
    }

    func write(_ count: Int) throws {
        for _ in 0..<count {
            let key = "w.\(index)"
            let writer = try cluster.client(fronts[index % fronts.count])
            let request = Beacon_V1_Request.OneOf_Op.put(.with {
                $0.key = key
                $0.value = .with { $0.intValue = Int64(index) }
                $0.writeID = Data(key.utf8)
            })
            let answered = waitUntil(seconds: 60) {
                do {
                    acknowledged[key] = try writer.call(request, timeoutMilliseconds: 5000).write.revision
                    return true
                } catch let error as WireError {
                    #expect(error.kind == .timeout || error.reply?.code == .upstreamUnavailable, "\(error)")
                    return false
                } catch {
                    Issue.record("\(error)")
                    return false
                }
            }
            #expect(answered, "write \(key) never acknowledged")
            index += 1
        }
    }

    /// Every acknowledged write is in etcd and at every running front at its revision, applied
    /// once (version 1); the fronts' histories are the same, revision by revision.
    func check() async throws {
        let head = acknowledged.values.max() ?? 0
        try cluster.waitUntilEveryFrontHolds(head)
        var histories: [[String]] = []
        for front in cluster.running {
            let client = try cluster.client(front)
            for (key, revision) in acknowledged {
                let kv = try client.get(key)
                #expect(kv.modRevision == revision && kv.version == 1,
                        "front \(front): \(key) at \(kv.modRevision) v\(kv.version), acknowledged at \(revision)")
            }
            histories.append(try client.wholeHistory("w.").map { "\($0.revision) \($0.change.kind) \($0.change.key) v\($0.change.version)" })
        }
        #expect(Set(histories).count == 1, "the fronts' histories differ")
        let etcd = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: cluster.etcd.endpointList))
        defer { etcd.close() }
        let stored = try await etcd.range(.with {
            $0.key = Data((cluster.prefix + "k/w.").utf8)
            $0.rangeEnd = Data(EtcdClient.rangeEnd(ofPrefix: Array((cluster.prefix + "k/w.").utf8)))
        }).kvs
        let skipped = cluster.prefix.utf8.count + 2
        #expect(Dictionary(uniqueKeysWithValues: stored.map { (String(decoding: $0.key.dropFirst(skipped), as: UTF8.self), UInt64($0.modRevision)) })
            == acknowledged)
    }
}

/// Two fronts, a and b, both reaching their cluster.
func startTwoFronts(ownCluster: Bool = false) async throws -> FrontedCluster {
    let cluster = try await FrontedCluster(ownCluster: ownCluster)
    try cluster.start("a")
    try cluster.start("b")
    try cluster.waitUntilReachable("a")
    try cluster.waitUntilReachable("b")
    return cluster
}
#endif
