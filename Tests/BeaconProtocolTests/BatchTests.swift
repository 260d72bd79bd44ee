import BeaconProtocol
import BeaconTestSupport
import Foundation
import SwiftProtobuf
import Testing

@Suite(.timeLimit(.minutes(3)))
struct BatchTests {
    private let requests: [Beacon_V1_Request] = [
        .with { $0.id = 7; $0.put = .with { $0.key = "a"; $0.value.intValue = 1 } },
        .with { $0.id = 300; $0.get = .with { $0.key = String(repeating: "k", count: 200) } },  // a two-byte length
        .with { $0.id = 9; $0.ping = .init() },
    ]

    @Test func handEncodedBatchesAreByteForByteWhatSwiftProtobufWrites() throws {
        let expectedRequest: [UInt8] = try Beacon_V1_Request.with {
            $0.id = 1_000_000
            $0.batch.requests = requests
        }.serializedBytes()
        let encodedRequests = try requests.map { try $0.serializedBytes() as [UInt8] }
        #expect(WireEncoder.batchRequest(id: 1_000_000, requests: encodedRequests) == expectedRequest)

        let replies: [Beacon_V1_Reply] = [
            .with { $0.id = 7; $0.write = .with { $0.revision = 5; $0.versions = [1] } },
            .with { $0.id = 300; $0.error = .with { $0.code = .notFound; $0.message = "no such key" } },
        ]
        let expectedReply: [UInt8] = try Beacon_V1_Reply.with { $0.id = 4; $0.batch.replies = replies }.serializedBytes()
        #expect(WireEncoder.batchReply(id: 4, replies: try replies.map { try $0.serializedBytes() }) == expectedReply)
    }

    /// One-key write replies written in place inside a batch reply are the bytes SwiftProtobuf
    /// writes for them, beside already encoded replies, at every varint length of each field.
    @Test func oneKeyWriteRepliesWrittenInPlaceMatchSwiftProtobuf() throws {
        var random = SplitMix64(seed: 5)
        for _ in 0..<300 {
            var items: [WireEncoder.BatchReplyItem] = []
            var expected: [Beacon_V1_Reply] = []
            for _ in 0..<Int(random.next() % 70) + 1 {
                // Each value a random number of bits wide, 0 included (proto3 omits it).
                func value() -> UInt64 { random.next() >> (random.next() % 65) }
                let id = value(), revision = value(), version = value()
                if random.next() % 5 == 0 {
                    let error = Beacon_V1_Reply.with { $0.id = id; $0.error = .with { $0.code = .versionConflict; $0.currentVersion = version } }
                    items.append(.encoded(try error.serializedBytes()))
                    expected.append(error)
                } else {
                    items.append(.oneKeyWrite(id: id, revision: revision, version: version))
                    expected.append(.with { $0.id = id; $0.write = .with { $0.revision = revision; $0.versions = [version] } })
                }
            }
            let batchID = random.next() >> (random.next() % 65)
            let encoded = WireEncoder.batchReply(id: batchID, items: items)
            #expect(encoded == (try Beacon_V1_Reply.with { $0.id = batchID; $0.batch.replies = expected }.serializedBytes() as [UInt8]))
        }
    }

    @Test func theFastPathFindsEachRequestsBytes() throws {
        let encoded: [UInt8] = try Beacon_V1_Request.with { $0.id = 12; $0.batch.requests = requests }.serializedBytes()
        let batch = try #require(encoded.withUnsafeBytes { FastBatch.parse($0) })
        #expect(batch.id == 12)
        let decoded = try batch.requests.map { try Beacon_V1_Request(serializedBytes: Array(encoded[$0])) }
        #expect(decoded == requests)
    }

    @Test func theFastPathLeavesAnythingUnusualToSwiftProtobuf() throws {
        let batch = WireEncoder.batchRequest(id: 1, requests: [[0x08, 0x01]])
        for bytes in [
            WireEncoder.putRequest(id: 1, key: "k", encodedValue: [0x18, 0x01]),  // not a batch
            batch + [0xFA, 0x3E, 0x00],  // an unknown field
            batch + Array(batch.dropFirst(2)),  // the batch field twice
            Array(batch.dropLast()),  // truncated
            [0x08, 0x01, 0xB2, 0x01, 0x02, 0x10, 0x01],  // a batch holding a varint field
        ] {
            #expect(bytes.withUnsafeBytes { FastBatch.parse($0) } == nil, "\(bytes)")
        }
    }
}

extension FastBatch: Equatable {
    public static func == (a: FastBatch, b: FastBatch) -> Bool { a.id == b.id && a.requests == b.requests }
}
