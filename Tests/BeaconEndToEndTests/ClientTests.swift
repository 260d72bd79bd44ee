import Beacon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(4)), .offThePool)
struct ClientTests {
    @Test func remoteSignalsComposeWithComputedAndEffect() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let sums = Recorder<Int>()
        let (a, b, effectHandle) = try test.onQueue {
            let a = try test.client.signal("demo.a", as: Int.self, default: 0)
            let b = try test.client.signal("demo.b", as: Int.self, default: 0)
            let sum = computed { a.value + b.value }
            let handle = effect { sums.append(sum.value) }
            return (a, b, handle)
        }
        await test.wait("for the first sync") { a.status == .live && b.status == .live }

        // Read-your-writes: once set returns, the mirror shows the revision.
        let first = try await test.client.set("demo.a", 2)
        test.onQueue {
            #expect(a.value == 2)
            #expect(a.metadata.modRevision == first.revision)
            // The write's commit time, by the daemon's clock (this machine's).
            #expect(abs(a.metadata.modifiedAt?.timeIntervalSinceNow ?? 1_000) < 60)
            #expect(a.version == 1)
        }
        // A transaction lands as one batch: the effect runs once and never sees half of it.
        try await test.client.transaction([.set("demo.a", 10), .set("demo.b", 20)])
        test.onQueue { #expect(a.value == 10 && b.value == 20) }
        #expect(sums.all == [0, 2, 30])

        // Another process's write (a plain wire client) arrives too.
        let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try writer.put("demo.b", .with { $0.intValue = 5 })
        await test.wait("for the remote write") { b.value == 5 }
        #expect(sums.all == [0, 2, 30, 15])

        try await test.client.delete("demo.a")
        test.onQueue {
            #expect(a.isDeleted)
            #expect(a.value == 0)
            #expect(!a.metadata.exists)
            #expect(a.metadata.modifiedAt == nil)
        }
        test.onQueue { effectHandle.dispose() }
        test.client.close()
        // A closed client refuses at once instead of leaving the caller waiting.
        await #expect { try await test.client.set("demo.a", 1) } throws: { ($0 as? BeaconError)?.code == .closed }
    }

    struct Link: Codable, Equatable, Sendable {
        var name: String
        var up: Bool
        var speeds: [Int]
        var note: String?
        var raw: Data
        var nested: [String: [Double]]
    }

    @Test func codableValuesRoundTripAndAMismatchIsATypedError() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let fallback = Link(name: "", up: false, speeds: [], note: nil, raw: Data(), nested: [:])
        let (link, count) = try test.onQueue {
            (try test.client.signal("net.link", default: fallback), try test.client.signal("net.count", as: Int.self, default: -1))
        }
        let written = Link(name: "eth0", up: true, speeds: [10, 100, 1000], note: nil, raw: Data([0, 1, 255]), nested: ["a": [1.5, 2]])
        try await test.client.set("net.link", written)
        test.onQueue {
            #expect(link.value == written)
            #expect(link.error == nil)
        }
        // The daemon's copy is typed: a map with a list of ints and bytes.
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let stored = try wire.get("net.link").value
        #expect(stored.mapValue.entries["speeds"]?.listValue.items.map(\.intValue) == [10, 100, 1000])
        #expect(stored.mapValue.entries["raw"]?.bytesValue == Data([0, 1, 255]))

        // Another process writes a value of the wrong type: a typed error, the default, no crash.
        _ = try wire.put("net.count", .with { $0.stringValue = "many" })
        await test.wait("for the bad value") { count.error != nil }
        test.onQueue {
            #expect(count.error?.code == .typeMismatch)
            #expect(count.error?.key == "net.count")
            #expect(count.value == -1)
            #expect(throws: BeaconError.self) { try count.get() }
        }
        _ = try wire.put("net.count", .with { $0.intValue = 3 })
        await test.wait("for the good value") { count.value == 3 && count.error == nil }
        test.client.close()
    }

    @Test func aPrefixMirrorGainsAndLosesKeys() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.put("dev.a", .with { $0.intValue = 1 })
        _ = try wire.put("devx", .with { $0.intValue = 9 })  // not under "dev."
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let keyLists = Recorder<[String]>()
        let (map, watcher) = try test.onQueue {
            let map = try test.client.mirror(prefix: "dev.", as: Int.self)
            return (map, effect { keyLists.append(map.keys) })
        }
        await test.wait("for the snapshot") { map.value == ["dev.a": 1] && map.status == .live }
        try await test.client.set("dev.b", 2)
        try await test.client.set("dev.a", 5)  // a value change: keys unchanged
        test.onQueue {
            #expect(map.value == ["dev.a": 5, "dev.b": 2])
            #expect(map["dev.a"] == 5)
            #expect(map.count == 2)
            #expect(map.metadata(of: "dev.a")?.version == 2)
        }
        try await test.client.delete("dev.a")
        test.onQueue { #expect(map.value == ["dev.b": 2]) }
        #expect(keyLists.all == [[], ["dev.a"], ["dev.a", "dev.b"], ["dev.b"]])
        test.onQueue { watcher.dispose() }
        test.client.close()
    }

    /// The map's storage is specialized for some value types and generic for the rest: each
    /// kind must mirror what the daemon holds.
    @Test func aPrefixMirrorHoldsValuesOfEveryType() async throws {
        struct Point: Codable, Equatable, Sendable {
            var x: Int
            var y: Int
        }
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        try await test.client.set("t.string.a", "one")
        try await test.client.set("t.double.a", 1.5)
        try await test.client.set("t.bool.a", true)
        try await test.client.set("t.int64.a", Int64(1) << 40)
        try await test.client.set("t.point.a", Point(x: 1, y: 2))
        let (strings, doubles, bools, int64s, points) = try test.onQueue {
            (try test.client.mirror(prefix: "t.string.", as: String.self), try test.client.mirror(prefix: "t.double.", as: Double.self),
             try test.client.mirror(prefix: "t.bool.", as: Bool.self), try test.client.mirror(prefix: "t.int64.", as: Int64.self),
             try test.client.mirror(prefix: "t.point.", as: Point.self))
        }
        // An effect that reads only how many keys there are, and the status, runs as they change.
        let counts = Recorder<Int>()
        let watcher = test.onQueue { effect { if strings.status == .live { counts.append(strings.count) } } }
        await test.wait("for the snapshots") {
            [strings.status, doubles.status, bools.status, int64s.status, points.status].allSatisfy { $0 == .live }
        }
        try await test.client.set("t.string.b", "two")
        try await test.client.set("t.point.b", Point(x: 3, y: 4))
        test.onQueue {
            #expect(strings.value == ["t.string.a": "one", "t.string.b": "two"])
            #expect(strings.count == 2)
            #expect(doubles.value == ["t.double.a": 1.5])
            #expect(bools.value == ["t.bool.a": true])
            #expect(int64s.value == ["t.int64.a": Int64(1) << 40])
            #expect(points.value == ["t.point.a": Point(x: 1, y: 2), "t.point.b": Point(x: 3, y: 4)])
        }
        // The effect may also run when the connection's state moves while the count stays.
        var distinctCounts: [Int] = []
        for count in counts.all where distinctCounts.last != count { distinctCounts.append(count) }
        #expect(distinctCounts == [1, 2])
        test.onQueue { watcher.dispose() }
        test.client.close()
    }

    @Test func writesReportTheDaemonsRefusals() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let first = try await test.client.create("w.key", "one")
        #expect(first.versions == [1])
        await #expect { try await test.client.create("w.key", "again") } throws: { error in
            (error as? BeaconError)?.code == .alreadyExists && (error as? BeaconError)?.currentVersion == 1
        }
        let second = try await test.client.set("w.key", "two", ifVersion: 1)
        #expect(second.versions == [2] && second.revision == first.revision + 1)
        await #expect { try await test.client.set("w.key", "three", ifVersion: 1) } throws: { error in
            (error as? BeaconError)?.code == .versionConflict && (error as? BeaconError)?.currentVersion == 2
        }
        await #expect { try await test.client.delete("w.absent") } throws: { ($0 as? BeaconError)?.code == .notFound }
        await #expect { try await test.client.set("bad..key", 1) } throws: { ($0 as? BeaconError)?.code == .invalidKey }
        #expect(throws: BeaconError.self) { try test.onQueue { try test.client.signal("", as: Int.self, default: 0) } }
        // A failing transaction names its operation and applies nothing.
        await #expect { try await test.client.transaction([.set("w.other", 1), .set("w.key", "x", ifVersion: 9)]) } throws: { error in
            (error as? BeaconError)?.code == .versionConflict && (error as? BeaconError)?.operationIndex == 1
        }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        #expect(throws: WireError.self) { try wire.get("w.other") }
        test.client.close()
    }

    @Test func concurrentWritesGoOutInBatchesAndEachGetsItsOwnResult() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        try await test.client.create("c.taken", 0)
        let count = 2_000
        let results = await withTaskGroup(of: (Int, Result<WriteResult, BeaconError>).self) { group in
            for i in 0..<count {
                group.addTask {
                    do throws(BeaconError) {
                        // Every 100th write is refused: the key exists.
                        let result = i % 100 == 0 ? try await test.client.create("c.taken", i)
                                                   : try await test.client.set("c.k\(i % 50)", i)
                        return (i, .success(result))
                    } catch {
                        return (i, .failure(error))
                    }
                }
            }
            return await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
        }
        var revisions = Set<UInt64>()
        for (i, result) in results {
            switch result {
            case .success(let written):
                #expect(i % 100 != 0)
                revisions.insert(written.revision)
            case .failure(let error):
                #expect(i % 100 == 0 && error.code == .alreadyExists, "\(i): \(error)")
            }
        }
        #expect(revisions.count == count - count / 100, "each accepted write has its own revision")
        let stats = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory).stats()
        #expect(stats.writes == UInt64(count - count / 100 + 1))
        #expect(stats.batches > 0, "writes queued together went out as batches")
        test.client.close()
    }

    @Test func aKeyWithATimeToLiveExpiresInEveryMirror() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        let signal = try test.onQueue { try test.client.signal("ttl.key", as: Int.self, default: 0) }
        let written = try await test.client.set("ttl.key", 1, ttl: .milliseconds(500))
        await test.wait("for the expiry") { signal.isDeleted && signal.value == 0 }
        // The journal says why: the write, then an expiry at the next revision.
        var changes = test.client.history(of: "ttl.key", exact: true, from: 1).makeAsyncIterator()
        guard case .change(let set) = try await changes.next(), case .change(let expiry) = try await changes.next() else {
            Issue.record("expected two changes")
            return
        }
        #expect(set.kind == .set && set.revision == written.revision)
        #expect(expiry.kind == .expire && expiry.revision == written.revision + 1)
        test.client.close()
    }

    @Test func historyReplaysThenGoesLiveAndSaysWhenItWasCompacted() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        for i in 1...5 { try await test.client.set("h.a", i) }  // revisions 1...5
        try await test.client.set("h.b", 0)                      // revision 6

        // One key, from revision 3: replayed 3, 4, 5, then live.
        var exact = test.client.history(of: "h.a", exact: true, from: 3).makeAsyncIterator()
        for expected in 3...5 {
            guard case .change(let change) = try await exact.next() else { Issue.record("expected a change"); return }
            #expect(change.revision == UInt64(expected))
            #expect(try change.value(as: Int.self) == expected)
        }
        try await test.client.set("h.b", 1)  // another key: not in this stream
        try await test.client.delete("h.a")
        guard case .change(let deletion) = try await exact.next() else { Issue.record("expected the deletion"); return }
        #expect(deletion.kind == .delete && deletion.revision == 8)

        // Compact through revision 7, then ask for history from 2: an explicit resync.
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.call(.compact(.with { $0.revision = 7 }))
        var compacted = test.client.history(of: "h.", from: 2).makeAsyncIterator()
        guard case .resynced(let revision, let state) = try await compacted.next() else { Issue.record("expected a resync"); return }
        #expect(revision == 8)
        #expect(state.map(\.key) == ["h.b"])
        try await test.client.set("h.c", 3)
        guard case .change(let live) = try await compacted.next() else { Issue.record("expected a live change"); return }
        #expect(live.key == "h.c" && live.revision == 9)
        test.client.close()
    }

    @Test func manualDeliveryAppliesUpdatesOnlyWhenAsked() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wakes = Recorder<Int>()
        var configuration = BeaconConfiguration(runtimeDirectory: daemon.runtimeDirectory)
        configuration.delivery = .manual(wake: { wakes.append(1) })
        let client = try BeaconClient(configuration: configuration)
        let owner = DispatchQueue(label: "owner")  // the domain that owns the signals
        let signal = try owner.sync { try client.signal("m.key", as: Int.self, default: 0) }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try wire.put("m.key", .with { $0.intValue = 4 })
        try await Task.sleep(for: .milliseconds(300))
        // Updates are waiting (wake was called) but nothing changed in the owner's domain.
        #expect(!wakes.all.isEmpty)
        owner.sync {
            #expect(signal.value == 0)
            #expect(signal.status == .connecting)
        }
        let deadline = ContinuousClock.now + .seconds(30)
        var seen = 0
        while ContinuousClock.now < deadline {
            owner.sync { client.applyPendingUpdates() }
            seen = owner.sync { signal.value }
            if seen == 4 { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(seen == 4)
        #expect(!wakes.all.isEmpty)
        client.close()
    }
}
