import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct SessionTests {
    private let session: [UInt8] = Array("writer-1".utf8)

    /// Every change of `prefix` in the journal, as (revision, key, kind).
    private func history(_ client: WireClient, _ prefix: String) throws -> [(UInt64, String, Beacon_V1_Change.Kind)] {
        try client.history(prefix).events.map { ($0.revision, $0.change.key, $0.change.kind) }
    }

    /// Moves the daemon's clock on; the request that follows wakes it to fire what came due.
    private func advance(_ clock: ManualClock, milliseconds: UInt64, _ client: WireClient) throws {
        clock.advance(milliseconds: milliseconds)
        _ = try client.ping()
    }

    /// Waits until `key` is gone (10 s at most). The daemon fires what came due after the pass
    /// that read the waking request, and a request sent on its answer may be read in that pass.
    private func waitUntilGone(_ key: String, _ client: WireClient) throws -> Bool {
        try waitUntil(seconds: 10) {
            do {
                _ = try client.get(key)
                return false
            } catch let error as WireError where error.reply?.code == .notFound {
                return true
            }
        }
    }

    @Test func aSessionsKeysVanishInOneRevisionWhenItIsNotRenewed() async throws {
        let clock = ManualClock()
        let daemon = try TestDaemon(clock: clock) { $0.sessionTTLMilliseconds = 2000 }
        defer { daemon.stopNow() }
        let client = try daemon.client()
        _ = try client.put("presence.a", .int(1), session: session)
        _ = try client.put("presence.b", .int(2), session: session)
        _ = try client.put("presence.c", .int(3))  // not bound
        let alive = try client.keepAlive(session: session, ttlMilliseconds: 2000)
        #expect(alive.keys == 2)
        // Renewed: alive past its first time to live.
        try advance(clock, milliseconds: 1500, client)
        _ = try client.keepAlive(session: session, ttlMilliseconds: 2000)
        try advance(clock, milliseconds: 1999, client)
        #expect(try client.get("presence.a").value.intValue == 1, "renewed at 1.5 s for 2 s: alive at 3.499 s")
        // No more renewals: both go at one revision, as expirations; the unbound key stays.
        try advance(clock, milliseconds: 1, client)
        #expect(try waitUntilGone("presence.a", client))
        expectRejection(.notFound) { _ = try client.get("presence.b") }
        #expect(try client.get("presence.c").value.intValue == 3)
        let events = try client.history("presence.").events
        let expiries = events.filter { $0.change.kind == .expire }
        #expect(expiries.map(\.change.key) == ["presence.a", "presence.b"])
        #expect(Set(expiries.map(\.revision)).count == 1)
        #expect(expiries.allSatisfy { $0.parts == 2 })
    }

    @Test func endingASessionDeletesItsKeysAtOnceAndRewritesUnbindThem() async throws {
        let daemon = try TestDaemon { $0.sessionTTLMilliseconds = 60_000 }
        defer { daemon.stopNow() }
        let client = try daemon.client()
        _ = try client.put("s.bound", .int(1), session: session)
        _ = try client.put("s.rebound", .int(1), session: session)
        _ = try client.put("s.rebound", .int(2))  // rewritten without the session: no longer bound
        let ended = try client.keepAlive(session: session, ttlMilliseconds: 0)
        #expect(ended.keys == 0 && ended.expiresAtMs == 0)
        // The reply waited for the revision that deleted its keys.
        expectRejection(.notFound) { _ = try client.get("s.bound") }
        #expect(try client.get("s.rebound").value.intValue == 2)
        // Bad sessions are refused.
        expectRejection(.invalidArgument) { _ = try client.keepAlive(session: [], ttlMilliseconds: 100) }
        expectRejection(.invalidArgument) { _ = try client.keepAlive(session: [UInt8](repeating: 1, count: 65), ttlMilliseconds: 100) }
        expectRejection(.invalidArgument) { _ = try client.put("s.x", .int(1), session: [UInt8](repeating: 1, count: 65)) }
        await daemon.stop()
    }

    @Test func sessionsSurviveARestartAndWaitForTheirWriters() async throws {
        let clock = ManualClock()
        let daemon = try TestDaemon(clock: clock) { $0.sessionTTLMilliseconds = 2000 }
        defer { daemon.stopNow() }
        _ = try daemon.client().put("r.kept", .int(1), session: session)
        _ = try daemon.client().put("r.lost", .int(1), session: Array("writer-2".utf8))
        await daemon.stop()
        clock.advance(milliseconds: 10_000)  // down for longer than the sessions' time to live

        // After the restart both sessions get a full time to live; only writer-1 renews.
        let restarted = try TestDaemon(clock: clock) {
            $0.stateDirectory = daemon.configuration.stateDirectory
            $0.sessionTTLMilliseconds = 2000
        }
        defer { restarted.stopNow() }
        let client = try restarted.client()
        #expect(try client.get("r.kept").value.intValue == 1)
        try advance(clock, milliseconds: 1500, client)
        _ = try client.keepAlive(session: session, ttlMilliseconds: 2000)
        try advance(clock, milliseconds: 500, client)
        #expect(try waitUntilGone("r.lost", client))
        #expect(try client.get("r.kept").value.intValue == 1)
    }
}
