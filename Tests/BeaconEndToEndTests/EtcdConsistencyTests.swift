#if Etcd  // the Etcd trait (Package.swift)
import Beacon
import BeaconLocking
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Monotonic nanoseconds.
private func monotonicNow() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

/// What `request` (given its attempt's number) answers, asked again while the answer is "not
/// now" (no reply in time, or `UPSTREAM_UNAVAILABLE`); nil when none came within `seconds`.
/// Any other error is recorded, naming `what`.
private func answered<Answer>(_ what: String, seconds: Double = 60, _ request: (Int) throws -> Answer) -> Answer? {
    var answer: Answer?
    var attempt = 0
    _ = waitUntil(seconds: seconds) {
        defer { attempt += 1 }
        do {
            answer = try request(attempt)
            return true
        } catch let error as WireError where error.kind == .timeout || error.reply?.code == .upstreamUnavailable {
            return false
        } catch {
            Issue.record("\(what): \(error)")
            return true
        }
    }
    return answer
}

/// Puts `number` into `key` through `clients` in turn, sent again with the same write id until
/// an answer says it was applied.
/// - Returns: its revision; nil when none came within `seconds`.
private func acknowledgedPut(_ clients: [WireClient], key: String, number: Int64, writeID: String, seconds: Double = 60) -> UInt64? {
    answered("put \(key)", seconds: seconds) { attempt in
        try clients[attempt % clients.count].call(.put(.with {
            $0.key = key
            $0.value = value(number)
            $0.writeID = Data(writeID.utf8)
        }), timeoutMilliseconds: 3000).write.revision
    }
}

/// A consistent `Get` of `key`; nil when no answer came within `seconds`.
private func consistentGet(_ client: WireClient, _ key: String, seconds: Double = 60) -> Beacon_V1_KeyValue? {
    answered("consistent get \(key)", seconds: seconds) { _ in try client.get(key, consistent: true, timeoutMilliseconds: 3000) }
}

/// One completed operation on one register, for the linearizability check: when it was sent
/// (first sent, for a write sent again), when its answer came, and the revision it wrote or read.
struct RegisterOperation: Sendable {
    var isWrite: Bool
    var invoked: UInt64
    var answered: UInt64
    var revision: UInt64

    /// The ways `history` is not linearizable, with etcd's revisions as the writes' order (each
    /// write has its own): a read sees a write not yet sent, or misses one answered before it was
    /// sent, or sees an older one than a read answered before it was sent; writes ordered in real
    /// time are ordered so by revision.
    static func violations(in history: [RegisterOperation]) -> [String] {
        let writes = history.filter(\.isWrite)
        let reads = history.filter { !$0.isWrite }
        var problems: [String] = []
        let writeByRevision = Dictionary(writes.map { ($0.revision, $0) }, uniquingKeysWith: { first, _ in first })
        // The highest revision among `operations` answered before `time`.
        func highestAnswered(before time: UInt64, among sorted: [(answered: UInt64, highest: UInt64)]) -> UInt64 {
            var low = 0, high = sorted.count
            while low < high {
                let middle = (low + high) / 2
                if sorted[middle].answered < time { low = middle + 1 } else { high = middle }
            }
            return low == 0 ? 0 : sorted[low - 1].highest
        }
        func runningHighest(_ operations: [RegisterOperation]) -> [(answered: UInt64, highest: UInt64)] {
            var highest: UInt64 = 0
            return operations.sorted { $0.answered < $1.answered }.map { operation in
                highest = max(highest, operation.revision)
                return (operation.answered, highest)
            }
        }
        let writesAnswered = runningHighest(writes)
        let readsAnswered = runningHighest(reads)
        for read in reads {
            if let write = writeByRevision[read.revision], write.invoked > read.answered {
                problems.append("a read answered at \(read.answered) saw revision \(read.revision), written only from \(write.invoked)")
            }
            let mustSee = highestAnswered(before: read.invoked, among: writesAnswered)
            if read.revision < mustSee {
                problems.append("a read sent at \(read.invoked) saw revision \(read.revision); a write at \(mustSee) was answered before it")
            }
            let seenBefore = highestAnswered(before: read.invoked, among: readsAnswered)
            if read.revision < seenBefore {
                problems.append("a read sent at \(read.invoked) saw revision \(read.revision); a read answered before it saw \(seenBefore)")
            }
        }
        for write in writes {
            let before = highestAnswered(before: write.invoked, among: writesAnswered)
            if write.revision <= before {
                problems.append("a write sent at \(write.invoked) got revision \(write.revision), below \(before) of a write answered before it")
            }
        }
        return problems
    }
}

/// Writers and readers of one register through both fronts, on threads of their own, until
/// stopped; the operations that completed, with their times.
private final class RegisterWorkload: @unchecked Sendable {
    private let history = Locked<[RegisterOperation]>([])
    private let stopping = Locked(false)
    private let group = DispatchGroup()
    let key: String

    init(_ cluster: FrontedCluster, key: String, workers: Int) throws {
        self.key = key
        let runtimes = ["a", "b"].map { cluster.front($0).runtimeDirectory }
        for worker in 0..<workers {
            group.enter()
            Thread.detachNewThread { [self] in
                defer { group.leave() }
                do {
                    run(worker: worker, clients: try runtimes.map { try WireClient.patient(runtimeDirectory: $0) })
                } catch {
                    Issue.record("worker \(worker): \(error)")
                }
            }
        }
    }

    private func run(worker: Int, clients: [WireClient]) {
        var generator = SystemRandomNumberGenerator()
        var number = 0
        while !stopping.withLock({ $0 }) {
            let through = Int.random(in: 0...1, using: &generator)
            let invoked = monotonicNow()
            if Bool.random(using: &generator) {
                number += 1
                // Sent again with its write id until applied; a front that is down is skipped.
                let order = [clients[through], clients[1 - through]]
                guard let revision = acknowledgedPut(order, key: key, number: Int64(worker * 1_000_000 + number),
                                                     writeID: "reg-\(worker)-\(number)") else { continue }
                history.withLock { $0.append(RegisterOperation(isWrite: true, invoked: invoked, answered: monotonicNow(), revision: revision)) }
            } else {
                // One attempt: a read refused or unanswered is no operation of the history.
                guard let kv = try? clients[through].get(key, consistent: true, timeoutMilliseconds: 3000) else { continue }
                history.withLock { $0.append(RegisterOperation(isWrite: false, invoked: invoked, answered: monotonicNow(), revision: kv.modRevision)) }
            }
        }
    }

    var count: Int { history.withLock(\.count) }

    /// Waits until `more` operations have completed since the call.
    func waitForProgress(_ more: Int) {
        let start = count
        #expect(waitUntil(seconds: 120) { count >= start + more }, "the workload stopped making progress at \(count) operations")
    }

    func stop() -> [RegisterOperation] {
        stopping.withLock { $0 = true }
        group.wait()
        return history.withLock { $0 }
    }
}

/// What PROTOCOL.md §4.8 promises of consistent reads at etcd fronts, and how long a leader's
/// loss holds writes up, against real etcd members and fronts.
@Suite("etcd fronts: consistent reads and fail-over", .timeLimit(.minutes(6)), .offThePool)
struct EtcdConsistencyTests {
    @Test func aPutAcknowledgedAtOneFrontIsSeenByAConsistentGetAtTheOtherEveryTime() async throws {
        let cluster = try await startTwoFronts()
        defer { cluster.shutDown() }
        let a = try cluster.client("a"), b = try cluster.client("b")
        var stale = 0, plainStale = 0
        for round in 1...2000 {
            let written = try #require(acknowledgedPut([a], key: "r", number: Int64(round), writeID: "r-\(round)"))
            if round <= 1000 {
                let read = try #require(consistentGet(b, "r"))
                if read.modRevision < written { stale += 1 }
            } else if try b.get("r").modRevision < written {
                plainStale += 1
            }
        }
        print("consistent reads at b after a put acknowledged at a: \(stale) stale of 1000; plain reads: \(plainStale) stale of 1000")
        #expect(stale == 0)

        // The Swift client's and the CLI's consistent reads at a front.
        let written = try #require(acknowledgedPut([a], key: "r", number: 9999, writeID: "r-last"))
        let client = try TestClient(runtimeDirectory: cluster.front("b").runtimeDirectory).client
        defer { client.close() }
        let read = try #require(try await client.read("r", consistency: .linearizable))
        #expect(read.modRevision >= written)
        #expect(try read.value(as: Int.self) == 9999)
        #expect(try await client.list(prefix: "r", consistency: .linearizable).count == 1)
        let cli = try await beacon(["get", "--consistent", "r"], runtimeDirectory: cluster.front("b").runtimeDirectory)
        #expect(cli.status == 0 && cli.stdout == "9999\n", "\(cli.stderr)")
    }

    @Test func consistentGetsStayFreshAcrossLeaderKills() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let a = try cluster.client("a"), b = try cluster.client("b")
        var stale = 0
        for round in 1...400 {
            if round % 100 == 0 { cluster.etcd.kill(try await cluster.etcd.leader()) }
            if round % 100 == 50 {
                for member in 0..<cluster.etcd.size where cluster.etcd.pid(of: member) == nil { try cluster.etcd.restart(member) }
            }
            let written = try #require(acknowledgedPut([a], key: "r", number: Int64(round), writeID: "r-\(round)"))
            let read = try #require(consistentGet(b, "r"))
            if read.modRevision < written { stale += 1 }
        }
        #expect(stale == 0)
    }

    @Test func aRegisterWrittenAndReadThroughBothFrontsIsLinearizableAcrossLeaderAndFrontKills() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let seed = try #require(acknowledgedPut([try cluster.client("a")], key: "reg", number: 0, writeID: "reg-seed"))
        let workload = try RegisterWorkload(cluster, key: "reg", workers: 4)
        workload.waitForProgress(200)
        cluster.etcd.kill(try await cluster.etcd.leader())
        workload.waitForProgress(200)
        for member in 0..<cluster.etcd.size where cluster.etcd.pid(of: member) == nil { try cluster.etcd.restart(member) }
        try await cluster.etcd.waitUntilEveryMemberHasALeader()
        #expect(cluster.front("a").stop(signal: SIGKILL) == SIGKILL)
        workload.waitForProgress(100)
        try cluster.start("a")
        try cluster.waitUntilReachable("a")
        workload.waitForProgress(200)
        cluster.etcd.kill(try await cluster.etcd.leader())
        workload.waitForProgress(200)
        let history = workload.stop() + [RegisterOperation(isWrite: true, invoked: 0, answered: 0, revision: seed)]
        let problems = RegisterOperation.violations(in: history)
        print("register history through both fronts: \(history.filter(\.isWrite).count) writes, "
            + "\(history.filter { !$0.isWrite }.count) consistent reads, \(problems.count) violations")
        #expect(problems.isEmpty, "\(problems.prefix(10))")
    }

    @Test func theCheckerFindsAStaleRead() {
        // A write answered at 20, then a read sent at 30 that sees the revision before it.
        let history = [RegisterOperation(isWrite: true, invoked: 0, answered: 5, revision: 1),
                       RegisterOperation(isWrite: true, invoked: 10, answered: 20, revision: 2),
                       RegisterOperation(isWrite: false, invoked: 30, answered: 40, revision: 1)]
        #expect(RegisterOperation.violations(in: history).count == 1)
        #expect(RegisterOperation.violations(in: Array(history.prefix(2))).isEmpty)
        // Two reads in sequence going back in time.
        let inverted = [RegisterOperation(isWrite: true, invoked: 0, answered: 5, revision: 1),
                        RegisterOperation(isWrite: true, invoked: 6, answered: 100, revision: 2),
                        RegisterOperation(isWrite: false, invoked: 10, answered: 20, revision: 2),
                        RegisterOperation(isWrite: false, invoked: 30, answered: 40, revision: 1)]
        #expect(RegisterOperation.violations(in: inverted).count == 1)
    }

    @Test func aLeadersLossHoldsNoWriteLongerThanTheElectionAndASecond() async throws {
        let cluster = try await startTwoFronts(ownCluster: true)
        defer { cluster.shutDown() }
        let kills = ProcessInfo.processInfo.environment["BEACON_ETCD_LEADER_KILLS"].flatMap(Int.init) ?? 5
        let writes = Locked<[(key: String, started: UInt64, waited: UInt64, revision: UInt64)]>([])
        let stopping = Locked(false)
        let group = DispatchGroup()
        let runtimes = ["a", "b"].map { cluster.front($0).runtimeDirectory }
        for writer in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                guard let clients = try? runtimes.map({ try WireClient.patient(runtimeDirectory: $0) }) else {
                    Issue.record("writer \(writer) could not connect")
                    return
                }
                var number = 0
                while !stopping.withLock({ $0 }) {
                    number += 1
                    let key = "s.\(writer).\(number)"
                    let started = monotonicNow()
                    guard let revision = acknowledgedPut(number % 2 == 0 ? clients : clients.reversed(), key: key, number: Int64(number),
                                                         writeID: key) else {
                        Issue.record("write \(key) never acknowledged")
                        return
                    }
                    writes.withLock { $0.append((key, started, monotonicNow() - started, revision)) }
                }
            }
        }
        func waitForWrites(_ more: Int) {
            let start = writes.withLock(\.count)
            #expect(waitUntil(seconds: 120) { writes.withLock(\.count) >= start + more }, "writes stopped")
        }
        var elections: [(at: UInt64, election: UInt64)] = []
        for _ in 0..<kills {
            waitForWrites(40)
            let leader = try await cluster.etcd.leader()
            let killed = monotonicNow()
            cluster.etcd.kill(leader)
            _ = try await cluster.etcd.leader()
            elections.append((killed, monotonicNow() - killed))
            try cluster.etcd.restart(leader)
            try await cluster.etcd.waitUntilEveryMemberHasALeader()
            waitForWrites(40)
        }
        stopping.withLock { $0 = true }
        group.wait()
        let done = writes.withLock { $0 }
        // Each write is held up by the last kill before its answer.
        var stalls = Array(repeating: UInt64(0), count: elections.count)
        for write in done {
            guard let index = elections.lastIndex(where: { $0.at <= write.started + write.waited }) else { continue }
            stalls[index] = max(stalls[index], write.waited)
        }
        for (index, kill) in elections.enumerated() {
            let bound = kill.election + 1_000_000_000
            print("leader kill \(index + 1): etcd elected a new leader in \(kill.election / 1_000_000) ms; "
                + "the longest write waited \(stalls[index] / 1_000_000) ms (bound \(bound / 1_000_000) ms)")
            #expect(stalls[index] <= bound,
                    "kill \(index + 1): a write waited \(stalls[index] / 1_000_000) ms, the election took \(kill.election / 1_000_000) ms")
        }
        // Nothing lost, nothing applied twice: every acknowledged write at both fronts, at its revision, version 1.
        try cluster.waitUntilEveryFrontHolds(done.map(\.revision).max() ?? 0)
        for front in ["a", "b"] {
            let listed = try cluster.client(front).call(.list(.with { $0.prefix = "s." })).list.kvs
            let byKey = Dictionary(uniqueKeysWithValues: listed.map { ($0.key, $0) })
            for write in done {
                #expect(byKey[write.key]?.modRevision == write.revision && byKey[write.key]?.version == 1,
                        "front \(front): \(write.key) is \(String(describing: byKey[write.key])), acknowledged at \(write.revision)")
            }
        }
    }
}
#endif
