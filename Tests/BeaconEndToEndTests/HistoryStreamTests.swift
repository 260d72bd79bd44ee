@testable import Beacon
import BeaconProtocol
import BeaconWire
import Foundation
import Synchronization
import Testing
import BeaconTestSupport

/// ``HistoryStream``'s hand-off between the client's I/O thread and the task iterating it: pages
/// in order, an error after what came before it, and an end — told to the producer once — when
/// the task is cancelled or the stream is dropped.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct HistoryStreamTests {
    static func change(_ revision: UInt64) -> HistoryEvent {
        .change(KeyChange(.with { $0.revision = revision; $0.change.key = "k"; $0.change.value.intValue = Int64(revision) }))
    }

    /// Polls `condition` every 5 ms, for 20 s at most.
    static func waitUntil(_ condition: () -> Bool) async throws {
        let held = await pollUntil(within: .seconds(20)) { condition() }
        #expect(held, "not within 20 s")
    }

    static func revision(_ event: HistoryEvent?) -> UInt64? {
        guard case .change(let change) = event else { return nil }
        return change.revision
    }

    @Test func pagesArriveInOrderAndAnErrorFollowsWhatCameBeforeIt() async throws {
        let feed = HistoryFeed()
        let stream = HistoryStream(feed)
        feed.yield((1...3).map(Self.change))
        feed.yield([])
        feed.yield((4...5).map(Self.change))
        feed.finish(throwing: BeaconError(.closed, "gone"))
        feed.yield([Self.change(6)])  // after the end: dropped
        var iterator = stream.makeAsyncIterator()
        var seen: [UInt64] = []
        do {
            while let event = try await iterator.next() { seen.append(Self.revision(event) ?? 0) }
            Issue.record("the error was not thrown")
        } catch let error as BeaconError {
            #expect(error.code == .closed)
        }
        #expect(seen == [1, 2, 3, 4, 5])
        #expect(try await iterator.next() == nil, "after its error the stream just ends")
    }

    @Test func aWaitingTaskIsWokenByTheNextPage() async throws {
        let feed = HistoryFeed()
        let stream = HistoryStream(feed)
        let reader = Task(executorPreference: ThreadPerJobExecutor.shared) { () -> [UInt64] in
            var seen: [UInt64] = []
            for try await event in stream { seen.append(Self.revision(event) ?? 0) }
            return seen
        }
        try await Task.sleep(for: .milliseconds(50))  // the reader waits for a page
        feed.yield([Self.change(1)])
        try await Task.sleep(for: .milliseconds(20))
        feed.yield([Self.change(2), Self.change(3)])
        feed.finish()
        #expect(try await reader.value == [1, 2, 3])
    }

    @Test func cancellingTheTaskEndsTheStreamAndTellsTheProducerOnce() async throws {
        let feed = HistoryFeed()
        let told = Atomic<Int>(0)
        feed.setOnCancel { told.add(1, ordering: .relaxed) }
        let stream = HistoryStream(feed)
        let seen = Atomic<Int>(0)
        let reader = Task(executorPreference: ThreadPerJobExecutor.shared) { () -> Int in
            for try await _ in stream { seen.add(1, ordering: .relaxed) }
            return seen.load(ordering: .relaxed)
        }
        feed.yield([Self.change(1)])
        try await Self.waitUntil { seen.load(ordering: .relaxed) == 1 }  // then it waits for more
        reader.cancel()
        #expect(try await reader.value == 1)
        feed.cancel()
        #expect(told.load(ordering: .relaxed) == 1)
        feed.finish()  // the producer's own end afterwards changes nothing
        #expect(told.load(ordering: .relaxed) == 1)
    }

    @Test func droppingTheStreamTellsTheProducer() async throws {
        let feed = HistoryFeed()
        let told = Atomic<Int>(0)
        feed.setOnCancel { told.add(1, ordering: .relaxed) }
        do {
            var iterator = HistoryStream(feed).makeAsyncIterator()
            feed.yield([Self.change(1), Self.change(2)])
            #expect(Self.revision(try await iterator.next()) == 1)
        }  // the stream and its iterator are gone
        #expect(told.load(ordering: .relaxed) == 1)
        let late = Atomic<Int>(0)
        feed.setOnCancel { late.add(1, ordering: .relaxed) }  // set after the end: runs at once
        #expect(late.load(ordering: .relaxed) == 1)
        // A stream the producer finished is not cancelled when dropped.
        let finished = HistoryFeed()
        finished.setOnCancel { told.add(1, ordering: .relaxed) }
        let kept = HistoryStream(finished)
        withExtendedLifetime(kept) { finished.finish() }
        #expect(told.load(ordering: .relaxed) == 1)
    }

    @Test("A client's history stream of many pages (each asked for while the one before is taken in) has every change once, in order, then goes live")
    func aLongHistoryStreamsEveryChangeInOrder() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let wire = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let total = 25_000  // beyond two of the daemon's 10,000-change pages
        for start in stride(from: 0, to: total, by: 500) {
            let puts: [Beacon_V1_Request.OneOf_Op] = (start..<start + 500).map { i in
                .put(.with { $0.key = "long.k\(i % 100)"; $0.value = .with { $0.intValue = Int64(i) } })
            }
            _ = try wire.batch(puts)
        }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        var stream = test.client.history(of: "long.", from: 1).makeAsyncIterator()
        var expected: UInt64 = 1
        while expected <= UInt64(total) {
            guard case .change(let change) = try await stream.next() else { Issue.record("expected a change"); return }
            guard change.revision == expected, try change.value(as: Int.self) == Int(expected) - 1 else {
                Issue.record("change \(change.revision) where \(expected) was due")
                return
            }
            expected += 1
        }
        try await test.client.set("long.live", -1)
        #expect(Self.revision(try await stream.next()) == UInt64(total) + 1)
        test.client.close()
    }

    @Test("A client's history stream ends when its task is cancelled, and the client goes on streaming")
    func aClientsHistoryStreamEndsWhenCancelled() async throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let test = try TestClient(runtimeDirectory: daemon.runtimeDirectory)
        for i in 1...3 { try await test.client.set("hs.a", i) }
        let stream = test.client.history(of: "hs.", from: 1)
        let seen = Atomic<Int>(0)
        let reader = Task(executorPreference: ThreadPerJobExecutor.shared) { () -> Int in
            for try await _ in stream { seen.add(1, ordering: .relaxed) }
            return seen.load(ordering: .relaxed)
        }
        try await Self.waitUntil { seen.load(ordering: .relaxed) == 3 }  // replayed; then it waits for live changes
        reader.cancel()
        #expect(try await reader.value == 3, "the replayed changes, then the end")
        // Another stream of the same prefix still gets everything, live included.
        var again = test.client.history(of: "hs.", from: 3).makeAsyncIterator()
        #expect(Self.revision(try await again.next()) == 3)
        try await test.client.set("hs.b", 4)
        #expect(Self.revision(try await again.next()) == 4)
        test.client.close()
        #expect(try await again.next() == nil, "closing the client ends its streams")
    }
}
