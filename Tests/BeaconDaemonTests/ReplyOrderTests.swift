import BeaconDaemon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// PROTOCOL.md §4.1: replies on one connection leave in request order, whatever their kind, and
/// none reveals a write that is not durable yet.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct ReplyOrderTests {
    /// The requests of one round behind 200 pipelined puts: one of each reply kind, the refusals
    /// decided against the puts still being journaled.
    private func sendRound(_ client: WireClient, round: Int) throws -> [UInt64] {
        var sent: [UInt64] = []
        for i in 0..<200 {
            sent.append(try client.send(.put(.with { $0.key = "r\(round).k\(i)"; $0.value = .int(Int64(i)) })))
        }
        sent.append(try client.send(.put(.with { $0.key = "r\(round).k0"; $0.value = .int(-1); $0.createOnly = true })))  // ALREADY_EXISTS
        sent.append(try client.send(.delete(.with { $0.key = "r\(round).missing" })))                                     // NOT_FOUND
        sent.append(try client.send(.put(.with { $0.key = "r\(round)..bad"; $0.value = .int(0) })))                        // INVALID_KEY
        sent.append(try client.send(.put(.with { $0.key = "r\(round).k1"; $0.value = .int(0); $0.ifVersion = 9 })))        // VERSION_CONFLICT
        sent.append(try client.send(.txn(.with { $0.ops = [putOp("r\(round).t", .int(1)), deleteOp("r\(round).nope")] })))  // NOT_FOUND, op 1
        sent.append(try client.send(.get(.with { $0.key = "r\(round).k199" })))
        sent.append(try client.send(.list(.with { $0.prefix = "r\(round)." })))
        sent.append(try client.send(.ping(.init())))
        sent.append(try client.send(.put(.with { $0.key = "r\(round).last"; $0.value = .int(1) })))
        return sent
    }

    @Test func everyReplyKindLeavesInRequestOrderBehindPipelinedWrites() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        for round in 0..<5 {
            let sent = try sendRound(client, round: round)
            var replies: [Beacon_V1_Reply] = []
            while replies.count < sent.count, let reply = try client.receiveReply(timeoutMilliseconds: expectedReplyWait) {
                replies.append(reply)
            }
            #expect(replies.map(\.id) == sent, "round \(round): replies must leave in request order")
            guard replies.count == sent.count else { break }
            let writes = replies.prefix(200).map(\.write.revision)
            let refusal = replies[200].error
            #expect(refusal.code == .alreadyExists && refusal.currentVersion == 1)
            // The refusal names no revision above what was acknowledged before it.
            #expect(refusal.headRevision <= writes.max() ?? 0)
            #expect(replies[201].error.code == .notFound)
            #expect(replies[202].error.code == .invalidKey)
            #expect(replies[203].error.code == .versionConflict && replies[203].error.currentVersion == 1)
            #expect(replies[204].error.code == .notFound && replies[204].error.opIndex == 1)
            #expect(replies[205].get.kv.value.intValue == 199)
            #expect(replies[206].list.kvs.count == 200)
            #expect(replies[207].ping.headRevision == writes.max())
            #expect(replies[208].write.revision == (writes.max() ?? 0) + 1)
        }
        await daemon.stop()
    }
}
