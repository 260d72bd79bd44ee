import Beacon
import BeaconLocking
import BeaconProtocol
import BeaconWire
import Foundation
import Synchronization
import Testing
import BeaconTestSupport

/// The design brief's client guarantees under faults, with real daemon and client processes.
@Suite(.timeLimit(.minutes(3)), .serialized, .offThePool)
struct ClientFaultTests {
    @Test func subscriberOverflowIsDetectedAndRepairedForAPrefixSubscriber() async throws {
        let dir = try temporaryDirectory()
        let config = dir + "/beacond.conf"
        try "publish_hwm = 50\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--config", config])
        defer { daemon.stop() }
        let probe = try ProbeProcess(runtimeDirectory: daemon.runtimeDirectory, prefix: "flood.", highWaterMark: 10)
        defer { probe.stop() }
        #expect(try await probe.waitForState { _, connection in connection == "live" })

        // Freeze the subscriber while 20,000 writes go by: its queues overflow and the daemon drops.
        kill(probe.process.processIdentifier, SIGSTOP)
        let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        try pipelinedWrites(writer, count: 20_000, keys: 300, followedPrefix: "flood.")
        kill(probe.process.processIdentifier, SIGCONT)

        let expected = try daemonState(writer, prefix: "flood.")
        #expect(expected.count == 266)  // 264 single keys (not every tenth, not the transaction slots) + t1, t2
        #expect(try await probe.waitForState { state, _ in state == expected })
        let dump = try await probe.dump()
        #expect(dump.repairs > 0, "the overflow should have been detected and repaired")

        // The history the probe delivered is exactly the journal's for the prefix: ordered, unique, gapless.
        let journal = try daemonHistory(writer, prefix: "flood.")
        let deadline = ContinuousClock.now + .seconds(20)
        while probe.history.count < journal.count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let delivered = probe.history
        #expect(delivered.count == journal.count)
        #expect(delivered.map(\.revision) == journal.map(\.revision))
        #expect(zip(delivered, journal).allSatisfy { $0.key == $1.key && $0.value == $1.value })
    }

    @Test func aTransactionIsAppliedAtomicallyInEveryOtherProcess() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        // Three client processes mirror two keys separately: a transaction writing both must be
        // seen whole by each.
        let probes = try (0..<3).map { _ in
            try ProbeProcess(runtimeDirectory: daemon.runtimeDirectory, prefix: "pair.", pair: ("pair.a", "pair.b"))
        }
        defer { probes.forEach { $0.stop() } }
        for probe in probes { #expect(try await probe.waitForState { _, connection in connection == "live" }) }
        let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for i in 1...300 {
            _ = try writer.transaction(["pair.a", "pair.b"].map { key in
                .with { $0.op = .put(.with { $0.key = key; $0.value = .with { $0.intValue = Int64(i) } }) }
            })
        }
        for probe in probes {
            #expect(try await probe.waitForState { state, _ in state["pair.a"] == 300 && state["pair.b"] == 300 })
        }
        try await Task.sleep(for: .milliseconds(200))
        for probe in probes {
            let runs = probe.lines.filter { $0.hasPrefix("E ") }.map { $0.split(separator: " ").dropFirst().map { Int($0)! } }
            #expect(runs.first == [0, 0])
            #expect(runs.last == [300, 300])
            #expect(runs.allSatisfy { $0[0] == $0[1] }, "an effect saw half a transaction: \(runs.filter { $0[0] != $0[1] }.prefix(5))")
            // Values only go forward.
            #expect(zip(runs, runs.dropFirst()).allSatisfy { $0[0] < $1[0] })
        }
    }

    @Test("Dropped publications and repairs never show half a transaction, with diffs taken one by one or in bundles",
          arguments: [false, true])
    func dropsAndRepairsNeverShowHalfATransaction(bundles: Bool) async throws {
        let dir = try temporaryDirectory()
        let config = dir + "/beacond.conf"
        try "publish_hwm = 20\n".write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--config", config])
        defer { daemon.stop() }
        // Two keys mirrored as two signals (each its own followed prefix), an effect over both;
        // the process is frozen while transactions writing both go by, so both the daemon and the
        // client drop publications and the mirrors repair, each from its own position.
        let probe = try ProbeProcess(runtimeDirectory: daemon.runtimeDirectory, prefix: "unrelated.", highWaterMark: 20,
                                     pair: ("a.x", "a.y"), bundles: bundles)
        defer { probe.stop() }
        #expect(try await probe.waitForState { _, connection in connection == "live" })
        if bundles {
            // The client moves to bundles on the daemon's first heartbeat that offers them.
            let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            let deadline = ContinuousClock.now + .seconds(30)
            while try await probe.dump().bundles == 0 && ContinuousClock.now < deadline {
                _ = try writer.put("a.x", .with { $0.intValue = 0 })
                _ = try writer.put("a.y", .with { $0.intValue = 0 })
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        let total = 6000
        let runtimeDirectory = daemon.runtimeDirectory
        let written = Locked(0)
        let writer = Thread {
            guard let client = try? WireClient.patient(runtimeDirectory: runtimeDirectory) else { return }
            for i in 1...total {
                _ = try? client.transaction(["a.x", "a.y"].map { key in
                    .with { $0.op = .put(.with { $0.key = key; $0.value = .with { $0.intValue = Int64(i) } }) }
                })
                written.withLock { $0 = i }
            }
        }
        writer.start()
        // Three freezes, each while 1,500 transactions go by: more than the kernel's socket buffer
        // and the high-water mark hold, so publications are dropped whatever the machine's pace.
        for freeze in 0..<3 {
            _ = waitUntil(seconds: 60) { written.withLock { $0 } >= freeze * 2000 + 100 }
            kill(probe.process.processIdentifier, SIGSTOP)
            _ = waitUntil(seconds: 60) { written.withLock { $0 } >= freeze * 2000 + 1600 }
            kill(probe.process.processIdentifier, SIGCONT)
        }
        let deadline = ContinuousClock.now + .seconds(60)
        func last() -> [Int]? {
            probe.lines.last { $0.hasPrefix("E ") }.map { $0.split(separator: " ").dropFirst().map { Int($0)! } }
        }
        while last() != [total, total] && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        let runs = probe.lines.filter { $0.hasPrefix("E ") }.map { $0.split(separator: " ").dropFirst().map { Int($0)! } }
        #expect(runs.last == [total, total])
        #expect(runs.allSatisfy { $0[0] == $0[1] }, "an effect saw half a transaction: \(runs.filter { $0[0] != $0[1] }.prefix(5))")
        #expect(zip(runs, runs.dropFirst()).allSatisfy { $0[0] < $1[0] }, "values went backwards or repeated")
        let dump = try await probe.dump()
        #expect(dump.repairs > 0, "the freeze should have made the mirrors repair")
        #expect(bundles ? dump.bundles > 0 : dump.bundles == 0)
    }

    @Test func killNineAndRestartWhileWritesFlowLosesNothingAndMirrorsConverge() async throws {
        let dir = try temporaryDirectory()
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let backwards = Recorder<String>()
        let (map, watcher) = try test.onQueue {
            let map = try test.client.mirror(prefix: "k", as: Int.self)
            var versions: [String: UInt64] = [:]
            let watcher = effect {
                _ = map.value
                for key in map.keys {
                    let version = map.metadata(of: key)?.version ?? 0
                    if version < versions[key, default: 0] { backwards.append("\(key): \(versions[key]!) -> \(version)") }
                    versions[key] = version
                }
            }
            return (map, watcher)
        }
        let history = Recorder<UInt64>()
        let historyTask = Task(executorPreference: ThreadPerJobExecutor.shared) {
            for try await event in test.client.history(of: "k", from: 1) {
                if case .change(let change) = event { history.append(change.revision) }
            }
        }
        await test.wait("for the first sync") { test.client.connection.value == .live }

        // A writer that keeps writing through the crash, recording what was acknowledged.
        let acknowledged = Locked<[String: (revision: UInt64, value: Int)]>([:])
        let stopWriting = Atomic<Bool>(false)
        let writerDone = DispatchSemaphore(value: 0)
        let client = test.client
        Thread.detachNewThread {
            defer { writerDone.signal() }
            let semaphore = DispatchSemaphore(value: 0)
            var i = 0
            while !stopWriting.load(ordering: .relaxed) {
                let key = "k\(i % 50)"
                let value = i
                let result = Locked<WriteResult?>(nil)
                Task(executorPreference: ThreadPerJobExecutor.shared) {
                    let written = try? await client.set(key, value)
                    result.withLock { $0 = written }
                    semaphore.signal()
                }
                semaphore.wait()
                if let written = result.withLock({ $0 }) {
                    acknowledged.withLock { $0[key] = (written.revision, value) }
                }
                i += 1
            }
        }
        try await Task.sleep(for: .milliseconds(500))
        #expect(daemon.stop(signal: SIGKILL) == SIGKILL)
        await test.wait("for the client to notice") { test.client.connection.value == .stale }
        try await Task.sleep(for: .milliseconds(300))
        daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        try await Task.sleep(for: .milliseconds(700))
        stopWriting.store(true, ordering: .relaxed)
        writerDone.wait()

        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let expected = try daemonState(wire, prefix: "k")
        for (key, ack) in acknowledged.withLock({ $0 }) {
            #expect(expected[key] == ack.value, "acknowledged write of \(key) lost")
        }
        await test.wait("for the mirror to converge") { test.client.connection.value == .live && map.value == expected }
        #expect(backwards.all.isEmpty, "versions went backwards: \(backwards.all.prefix(5))")
        let journal = try daemonHistory(wire, prefix: "k").map(\.revision)
        let deadline = ContinuousClock.now + .seconds(30)
        while history.all.count < journal.count && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(history.all == journal, "the history stream must be ordered, unique and gapless across the restart")
        historyTask.cancel()
        test.onQueue { watcher.dispose() }
        test.client.close()
    }

    @Test func aNewJournalMakesEveryMirrorResync() async throws {
        let dir = try temporaryDirectory()
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let (map, single) = try test.onQueue {
            (try test.client.mirror(prefix: "e.", as: Int.self), try test.client.signal("e.one", as: Int.self, default: -1))
        }
        for i in 1...20 { try await test.client.set("e.k\(i)", i) }
        try await test.client.set("e.one", 1)
        test.onQueue { #expect(map.count == 21 && single.value == 1) }

        daemon.stop()
        try FileManager.default.removeItem(atPath: dir + "/state")
        daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.put("e.fresh", .with { $0.intValue = 7 })
        await test.wait("for the resync to the new journal") { map.value == ["e.fresh": 7] && single.isDeleted }
        #expect(test.client.statistics.resyncs > 0)
        // The mirror follows the new journal's revisions from here on.
        let result = try await test.client.set("e.one", 2)
        #expect(result.revision == 2)
        test.onQueue { #expect(single.value == 2 && single.metadata.modRevision == 2) }
        test.client.close()
    }

    @Test func aClientStartedBeforeTheDaemonConnectsWhenItAppears() async throws {
        let dir = try temporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir + "/run", withIntermediateDirectories: true)
        let test = try TestClient(runtimeDirectory: dir + "/run")
        let signal = try test.onQueue { try test.client.signal("late.key", as: String.self, default: "none") }
        try await Task.sleep(for: .milliseconds(400))
        test.onQueue {
            #expect(signal.status == .connecting)
            #expect(signal.value == "none")
        }
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.put("late.key", .with { $0.stringValue = "here" })
        await test.wait("for the late daemon") { signal.value == "here" && signal.status == .live }
        test.client.close()
    }

    @Test func aFrozenDaemonMakesMirrorsStaleUntilItResumes() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let signal = try test.onQueue { try test.client.signal("s.key", as: Int.self, default: 0) }
        try await test.client.set("s.key", 1)
        kill(daemon.process.processIdentifier, SIGSTOP)
        await test.wait("for stale") { signal.status == .stale && signal.value == 1 }
        // A write made while the daemon is frozen is retried (same write id) and lands once.
        let pending = Task(executorPreference: ThreadPerJobExecutor.shared) { try await test.client.set("s.key", 2) }
        try await Task.sleep(for: .milliseconds(700))
        kill(daemon.process.processIdentifier, SIGCONT)
        let result = try await pending.value
        test.onQueue { #expect(signal.value == 2) }  // read-your-writes: the value is there when set returns
        // Live again once the client has heard the daemon's stream (a moment after the reply).
        await test.wait("for live") { signal.value == 2 && signal.status == .live }
        let history = try daemonHistory(try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory), prefix: "s.key")
        #expect(history.map(\.value) == [1, 2], "the retried write must apply once")
        #expect(result.revision == history.last?.revision)
        test.client.close()
    }
}

/// The optional local journal: offline start and delta resume.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct LocalJournalTests {
    @Test func aClientStartedWhileTheDaemonIsDownShowsItsLastValuesThenResumesWithADelta() async throws {
        let dir = try temporaryDirectory()
        let cachePath = dir + "/client/mirror.sqlite"
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let first = try TestClient(runtimeDirectory: daemon.runtimeDirectory) { $0.localJournalPath = cachePath }
        let (firstMap, firstOne) = try first.onQueue {
            (try first.client.mirror(prefix: "c.", as: Int.self), try first.client.signal("c.one", as: Int.self, default: 0))
        }
        try await first.client.set("c.one", 1)
        try await first.client.set("c.two", 2)
        await first.wait("for the first client's mirror") { firstMap.value == ["c.one": 1, "c.two": 2] && firstOne.value == 1 }
        first.client.close()
        daemon.stop()

        // The daemon is down: a new client shows what the local journal kept, as stale.
        let second = try TestClient(runtimeDirectory: daemon.runtimeDirectory) { $0.localJournalPath = cachePath }
        let (map, one) = try second.onQueue {
            (try second.client.mirror(prefix: "c.", as: Int.self), try second.client.signal("c.one", as: Int.self, default: 0))
        }
        second.onQueue {
            #expect(map.value == ["c.one": 1, "c.two": 2])
            #expect(map.status == .stale)
            #expect(one.value == 1)
            #expect(one.status == .stale)
        }

        // The daemon returns and changes happened meanwhile: only the delta is fetched.
        daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.put("c.three", .with { $0.intValue = 3 })
        _ = try wire.delete("c.two")
        await second.wait("for the resumed mirror") {
            map.value == ["c.one": 1, "c.three": 3] && map.status == .live && one.status == .live
        }
        let statistics = second.client.statistics
        #expect(statistics.snapshots == 0, "resuming must not take a snapshot")
        #expect(statistics.resumes == 2)
        second.client.close()
    }
}

extension LocalJournalTests {
    @Test func aLocalJournalFromAnotherEpochIsReplacedByASnapshot() async throws {
        let dir = try temporaryDirectory()
        let cachePath = dir + "/client/mirror.sqlite"
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let first = try TestClient(runtimeDirectory: daemon.runtimeDirectory) { $0.localJournalPath = cachePath }
        let firstMap = try first.onQueue { try first.client.mirror(prefix: "e.", as: Int.self) }
        try await first.client.set("e.old", 1)
        await first.wait("for the mirror") { firstMap.value == ["e.old": 1] }
        first.client.close()
        daemon.stop()
        try FileManager.default.removeItem(atPath: dir + "/state")  // a new journal: a new epoch

        daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        _ = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory).put("e.new", .with { $0.intValue = 2 })
        let second = try TestClient(runtimeDirectory: daemon.runtimeDirectory) { $0.localJournalPath = cachePath }
        let map = try second.onQueue { try second.client.mirror(prefix: "e.", as: Int.self) }
        await second.wait("for the resync") { map.value == ["e.new": 2] && map.status == .live }
        #expect(second.client.statistics.snapshots >= 1)
        #expect(second.client.statistics.resumes == 0)
        second.client.close()
    }
}

/// Keys bound to a client's session: they live while the client does.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct ClientSessionTests {
    @Test func aSessionKeyOutlivesItsTimeoutWhileTheClientLivesAndGoesAfterKillNine() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let probe = try ProbeProcess(runtimeDirectory: daemon.runtimeDirectory, prefix: "presence.", sessionKey: "presence.probe")
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let deadline = ContinuousClock.now + .seconds(30)
        while !probe.lines.contains(where: { $0.hasPrefix("BOUND") }) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        // Alive for three session timeouts (1 s each): the client renews, the key stays.
        try await Task.sleep(for: .seconds(3))
        #expect(try wire.get("presence.probe").value.intValue == 1)

        let killedAt = UInt64(Date().timeIntervalSince1970 * 1000)
        kill(probe.process.processIdentifier, SIGKILL)
        probe.process.waitUntilExit()
        let goneBy = ContinuousClock.now + .seconds(30)
        while (try? wire.get("presence.probe")) != nil && ContinuousClock.now < goneBy {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(throws: WireError.self) { try wire.get("presence.probe") }
        // The daemon's own commit time of the expiry says how long the key outlived its writer.
        let events = try wire.history("presence.probe", exact: true).events
        #expect(events.map(\.change.kind) == [.put, .expire])
        let outlived = Int64(events.last?.timestampMs ?? 0) - Int64(killedAt)
        // About one session timeout (1 s); the bound leaves room for a loaded machine.
        #expect(outlived < 5000, "the key should go within about one session timeout (1 s), took \(outlived) ms")
    }

    @Test func closingTheClientEndsItsSessionAtOnce() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory) { $0.sessionTimeout = .seconds(60) }
        let watcher = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let seen = try watcher.onQueue { try watcher.client.signal("ui.owner", as: String.self, default: "") }
        try await test.client.set("ui.owner", "ada", boundToSession: true)
        try await test.client.transaction([.set("ui.lock", 1, boundToSession: true), .set("ui.note", "kept")])
        await watcher.wait("for the bound value") { seen.value == "ada" }
        test.client.close()
        // Well before the 60 s session timeout: the close ended the session.
        await watcher.wait(timeout: .seconds(15), "for the session's keys to go") { seen.isDeleted }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        #expect(throws: WireError.self) { try wire.get("ui.lock") }
        #expect(try wire.get("ui.note").value.stringValue == "kept")
        watcher.client.close()
    }
}

extension WireClient {
    /// Sends a request without waiting for its reply.
    func sendIgnoringErrors(_ op: Beacon_V1_Request.OneOf_Op) {
        _ = try? send(op)
    }
}

/// Pipelines `count` writes (every 50th a transaction touching the followed prefix and another
/// one) and waits for every reply.
func pipelinedWrites(_ writer: WireClient, count: Int, keys: Int, followedPrefix: String) throws {
    var outstanding = 0
    for i in 0..<count {
        if i % 50 == 49 {
            writer.sendIgnoringErrors(.txn(.with {
                $0.ops = [followedPrefix + "t1", followedPrefix + "t2", "other.t3"].map { key in
                    .with { $0.op = .put(.with { $0.key = key; $0.value = .with { $0.intValue = Int64(i) } }) }
                }
            }))
        } else {
            let key = i % 10 == 0 ? "other.k\(i % keys)" : "\(followedPrefix)k\(i % keys)"
            writer.sendIgnoringErrors(.put(.with { $0.key = key; $0.value = .with { $0.intValue = Int64(i) } }))
        }
        outstanding += 1
        while outstanding > 500 {
            guard try writer.receiveReply(timeoutMilliseconds: expectedReplyWait) != nil else { throw WireError(kind: .timeout, message: "no reply") }
            outstanding -= 1
        }
    }
    while outstanding > 0 {
        guard try writer.receiveReply(timeoutMilliseconds: expectedReplyWait) != nil else { throw WireError(kind: .timeout, message: "no reply") }
        outstanding -= 1
    }
}
