import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// Renews a session every 200 ms from its own thread and connection (not the test's
/// cooperative threads, which blocking tests can hold up for seconds) until stopped.
final class SessionRenewer: @unchecked Sendable {
    private let stopped = NSLock()
    private var stopFlag = false
    private let done = DispatchSemaphore(value: 0)

    init(runtimeDirectory: String, session: [UInt8], ttlMilliseconds: UInt32) {
        Thread.detachNewThread { [self] in
            defer { done.signal() }
            guard let client = try? WireClient.patient(runtimeDirectory: runtimeDirectory) else { return }
            while !stopped.withLock({ stopFlag }) {
                _ = try? client.keepAlive(session: session, ttlMilliseconds: ttlMilliseconds)
                usleep(200_000)
            }
        }
    }

    func stop() {
        stopped.withLock { stopFlag = true }
        done.wait()
    }
}

@Suite(.timeLimit(.minutes(1)), .offThePool)
struct SessionTests {
    private let session: [UInt8] = Array("writer-1".utf8)

    /// Every change of `prefix` in the journal, as (revision, key, kind).
    private func history(_ client: WireClient, _ prefix: String) throws -> [(UInt64, String, Beacon_V1_Change.Kind)] {
        try client.history(prefix).events.map { ($0.revision, $0.change.key, $0.change.kind) }
    }

    /// Polls until `key` is gone (or `timeout` passes).
    private func waitUntilGone(_ client: WireClient, _ key: String, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while (try? client.get(key)) != nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
    }

    @Test func aSessionsKeysVanishInOneRevisionWhenItIsNotRenewed() async throws {
        let daemon = try TestDaemon { $0.sessionTTLMilliseconds = 2000 }
        let client = try daemon.client()
        _ = try client.put("presence.a", .int(1), session: session)
        _ = try client.put("presence.b", .int(2), session: session)
        _ = try client.put("presence.c", .int(3))  // not bound
        let alive = try client.keepAlive(session: session, ttlMilliseconds: 2000)
        #expect(alive.keys == 2)
        // Renewed for longer than its time to live: the keys stay.
        let renewer = SessionRenewer(runtimeDirectory: daemon.configuration.runtimeDirectory, session: session, ttlMilliseconds: 2000)
        try await Task.sleep(for: .seconds(3))
        #expect(try client.get("presence.a").value.intValue == 1)
        renewer.stop()
        // No more renewals: both go at one revision, as expirations; the unbound key stays.
        try await waitUntilGone(client, "presence.a")
        expectRejection(.notFound) { _ = try client.get("presence.a") }
        expectRejection(.notFound) { _ = try client.get("presence.b") }
        #expect(try client.get("presence.c").value.intValue == 3)
        let events = try client.history("presence.").events
        let expiries = events.filter { $0.change.kind == .expire }
        #expect(expiries.map(\.change.key) == ["presence.a", "presence.b"])
        #expect(Set(expiries.map(\.revision)).count == 1)
        #expect(expiries.allSatisfy { $0.parts == 2 })
        await daemon.stop()
    }

    @Test func endingASessionDeletesItsKeysAtOnceAndRewritesUnbindThem() async throws {
        let daemon = try TestDaemon { $0.sessionTTLMilliseconds = 60_000 }
        let client = try daemon.client()
        _ = try client.put("s.bound", .int(1), session: session)
        _ = try client.put("s.rebound", .int(1), session: session)
        _ = try client.put("s.rebound", .int(2))  // rewritten without the session: no longer bound
        let ended = try client.keepAlive(session: session, ttlMilliseconds: 0)
        #expect(ended.keys == 0 && ended.expiresAtMs == 0)
        try await waitUntilGone(client, "s.bound")
        expectRejection(.notFound) { _ = try client.get("s.bound") }
        #expect(try client.get("s.rebound").value.intValue == 2)
        // Bad sessions are refused.
        expectRejection(.invalidArgument) { _ = try client.keepAlive(session: [], ttlMilliseconds: 100) }
        expectRejection(.invalidArgument) { _ = try client.keepAlive(session: [UInt8](repeating: 1, count: 65), ttlMilliseconds: 100) }
        expectRejection(.invalidArgument) { _ = try client.put("s.x", .int(1), session: [UInt8](repeating: 1, count: 65)) }
        await daemon.stop()
    }

    @Test func sessionsSurviveARestartAndWaitForTheirWriters() async throws {
        let daemon = try TestDaemon { $0.sessionTTLMilliseconds = 2000 }
        _ = try daemon.client().put("r.kept", .int(1), session: session)
        _ = try daemon.client().put("r.lost", .int(1), session: Array("writer-2".utf8))
        await daemon.stop()

        // After the restart both sessions get a full time to live; only writer-1 renews.
        let restarted = try TestDaemon {
            $0.stateDirectory = daemon.configuration.stateDirectory
            $0.sessionTTLMilliseconds = 2000
        }
        let client = try restarted.client()
        let renewer = SessionRenewer(runtimeDirectory: restarted.configuration.runtimeDirectory, session: session, ttlMilliseconds: 2000)
        #expect(try client.get("r.kept").value.intValue == 1)
        try await waitUntilGone(client, "r.lost")
        expectRejection(.notFound) { _ = try client.get("r.lost") }
        #expect(try client.get("r.kept").value.intValue == 1)
        renewer.stop()
        await restarted.stop()
    }
}
