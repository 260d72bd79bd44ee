import BeaconDaemon
import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import BeaconZMQ
import Foundation
import Testing

@Suite(.timeLimit(.minutes(4)), .offThePool)
struct GarbageTests {
    @Test func randomAndMutatedFramesNeverCrashTheDaemonNorChangeWhatTheyShouldNot() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let honest = try daemon.client()
        _ = try honest.put("guarded", .string("original"))
        // Valid requests of every kind to mutate: reads, and writes only to keys under "fuzz.".
        let seeds: [Beacon_V1_Request] = [
            .with { $0.id = 1; $0.get.key = "guarded" },
            .with { $0.id = 2; $0.list.prefix = "g" },
            .with { $0.id = 3; $0.snapshot.prefix = "" },
            .with { $0.id = 4; $0.delta.sinceRevision = 0 },
            .with { $0.id = 5; $0.history = .with { $0.prefix = "guarded"; $0.exact = true } },
            .with { $0.id = 6; $0.put = .with { $0.key = "fuzz.a"; $0.value.mapValue.entries = ["x": .with { $0.listValue.items = [.with { $0.doubleValue = 1 }] }] } },
            .with { $0.id = 7; $0.txn.ops = [.with { $0.put = .with { $0.key = "fuzz.b"; $0.value.intValue = 1 } }] },
            .with { $0.id = 8; $0.stats = .init() },
        ]
        let encodedSeeds = try seeds.map { try $0.serializedBytes() as [UInt8] }
        var random = SplitMix64(seed: 0xBEAC_0001)
        let context = try ZMQContext()
        let socket = try ZMQSocket(context, type: .dealer)
        try socket.setSendHighWaterMark(0)
        try socket.connect(daemon.configuration.requestEndpoint)
        let messages = 60_000
        var replies = 0
        for _ in 0..<messages {
            var frames: [[UInt8]] = []
            switch random.next() % 4 {
            case 0:  // pure noise
                frames = [(0..<Int(random.next() % 64)).map { _ in UInt8(truncatingIfNeeded: random.next()) }]
            case 1, 2:  // a valid request with bytes flipped, cut or appended
                var bytes = encodedSeeds[Int(random.next() % UInt64(encodedSeeds.count))]
                for _ in 0...(random.next() % 3) {
                    let index = Int(random.next() % UInt64(max(bytes.count, 1)))
                    switch random.next() % 3 {
                    case 0 where !bytes.isEmpty: bytes[index] ^= UInt8(truncatingIfNeeded: random.next() | 1)
                    case 1: bytes = Array(bytes.prefix(index))
                    default: bytes.append(UInt8(truncatingIfNeeded: random.next()))
                    }
                }
                frames = [bytes]
            default:  // several frames: an envelope the daemon must echo, then a body
                frames = (0..<(1 + Int(random.next() % 3))).map { _ in
                    (0..<Int(random.next() % 16)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                }
            }
            try socket.send(frames: frames.map { ZMQMessage(bytes: $0) })
            while try socket.receiveMessage(flags: .dontWait) != nil { replies += 1 }
        }
        // Every message, however broken, gets exactly one reply.
        let poller = ZMQPoller()
        poller.add(socket)
        while replies < messages, try poller.poll(timeoutMilliseconds: expectedReplyWait) > 0 {
            while try socket.receiveMessage(flags: .dontWait) != nil { replies += 1 }
        }
        #expect(replies == messages)
        #expect(try honest.get("guarded").value.stringValue == "original")
        let stats = try honest.stats()
        #expect(stats.requests >= UInt64(messages))
        // Every key that exists is one the honest client wrote or a mutated write could name:
        // a fuzzed write may only have touched keys of its seed's shape.
        for kv in try honest.list("") where kv.key != "guarded" {
            #expect(kv.key.hasPrefix("fuzz") || kv.key.count <= 8, "unexpected key \(kv.key)")
        }
        // And it still takes honest writes and serves history.
        let write = try honest.put("after", .int(1))
        #expect(write.revision == stats.headRevision + 1)
        #expect(try honest.history("after", exact: true).events.count == 1)
        await daemon.stop()
    }
}
