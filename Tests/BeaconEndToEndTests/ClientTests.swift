import Beacon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing

@Suite(.timeLimit(.minutes(2)))
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
            #expect(a.version == 1)
        }
        // A transaction lands as one batch: the effect runs once and never sees half of it.
        try await test.client.transaction([.set("demo.a", 10), .set("demo.b", 20)])
        test.onQueue { #expect(a.value == 10 && b.value == 20) }
        #expect(sums.all == [0, 2, 30])

        // Another process's write (a plain wire client) arrives too.
        let writer = try WireClient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try writer.put("demo.b", .with { $0.intValue = 5 })
        await test.wait("for the remote write") { b.value == 5 }
        #expect(sums.all == [0, 2, 30, 15])

        try await test.client.delete("demo.a")
        test.onQueue {
            #expect(a.isDeleted)
            #expect(a.value == 0)
            #expect(!a.metadata.exists)
        }
        test.onQueue { effectHandle.dispose() }
        test.client.close()
    }
}
