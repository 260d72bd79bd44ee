import BeaconProtocol
import BeaconTestSupport
import Foundation
import SwiftProtobuf
import Testing

@Suite(.timeLimit(.minutes(3)))
struct WireEncoderTests {
    @Test func aHandEncodedDiffIsByteForByteWhatSwiftProtobufWrites() throws {
        let value = Beacon_V1_Value.with { $0.mapValue.entries = ["a": .with { $0.intValue = -3 }] }
        let marks: [Beacon_V1_PrefixMark] = [
            .with { $0.prefix = ""; $0.previousRevision = 299; $0.parts = 2 },
            .with { $0.prefix = "net."; $0.previousRevision = 0; $0.parts = 1 },
        ]
        let expected = Beacon_V1_Diff.with {
            $0.epoch = 0xDEAD_BEEF_CAFE
            $0.event.revision = 300
            $0.event.part = 1
            $0.event.parts = 2
            $0.event.timestampMs = 1_700_000_000_123
            $0.event.change.kind = .put
            $0.event.change.key = "net.wifi.ssid"
            $0.event.change.value = value
            $0.event.change.version = 7
            $0.event.change.createRevision = 12
            $0.event.change.expiresAtMs = 1_700_000_005_000
            $0.marks = marks
        }
        let encoded = WireEncoder.diff(
            epoch: 0xDEAD_BEEF_CAFE, revision: 300, part: 1, parts: 2, kind: .put, key: "net.wifi.ssid",
            encodedValue: try value.serializedBytes(), version: 7, createRevision: 12,
            expiresAtMilliseconds: 1_700_000_005_000, timestampMilliseconds: 1_700_000_000_123, marks: marks)
        #expect(try Beacon_V1_Diff(serializedBytes: encoded) == expected)
        #expect(encoded == (try expected.serializedBytes() as [UInt8]))
    }

    @Test func longNestedMessagesGetMultiByteLengths() throws {
        let value = Beacon_V1_Value.with { $0.stringValue = String(repeating: "x", count: 20_000) }
        let encoded = WireEncoder.diff(epoch: 1, revision: 2, part: 0, parts: 1, kind: .put, key: "k",
                                       encodedValue: try value.serializedBytes(), version: 1, createRevision: 2,
                                       expiresAtMilliseconds: 0, timestampMilliseconds: 3,
                                       marks: [.with { $0.prefix = String(repeating: "p", count: 200); $0.previousRevision = 1; $0.parts = 1 }])
        let expected = Beacon_V1_Diff.with {
            $0.epoch = 1
            $0.event = .with {
                $0.revision = 2; $0.parts = 1; $0.timestampMs = 3
                $0.change = .with { $0.key = "k"; $0.value = value; $0.version = 1; $0.createRevision = 2 }
            }
            $0.marks = [.with { $0.prefix = String(repeating: "p", count: 200); $0.previousRevision = 1; $0.parts = 1 }]
        }
        #expect(encoded == (try expected.serializedBytes() as [UInt8]))
    }

    @Test func aDeleteDiffCarriesNoValue() throws {
        let encoded = WireEncoder.diff(epoch: 1, revision: 2, part: 0, parts: 1, kind: .delete, key: "k",
                                       encodedValue: [], version: 0, createRevision: 0, expiresAtMilliseconds: 0,
                                       timestampMilliseconds: 5, marks: [])
        let diff = try Beacon_V1_Diff(serializedBytes: encoded)
        #expect(diff.event.change.kind == .delete)
        #expect(!diff.event.change.hasValue)
        #expect(diff.event.revision == 2 && diff.event.change.key == "k")
    }

    @Test func aHandEncodedWriteReplyDecodes() throws {
        let encoded = WireEncoder.writeReply(id: 41, revision: 1 << 40, versions: [1, 0, 300], replayed: true)
        let expected = Beacon_V1_Reply.with {
            $0.id = 41
            $0.write = .with { $0.revision = 1 << 40; $0.versions = [1, 0, 300]; $0.replayed = true }
        }
        #expect(try Beacon_V1_Reply(serializedBytes: encoded) == expected)
        #expect(encoded == (try expected.serializedBytes() as [UInt8]))

        // One key, and a transaction whose packed versions outgrow a one-byte length.
        let single = Beacon_V1_Reply.with { $0.id = 7; $0.write = .with { $0.revision = 9; $0.versions = [12] } }
        #expect(WireEncoder.writeReply(id: 7, revision: 9, version: 12) == (try single.serializedBytes() as [UInt8]))
        let versions = (0..<100).map { UInt64($0) << 20 }
        let many = Beacon_V1_Reply.with { $0.id = 8; $0.write = .with { $0.revision = 10; $0.versions = versions } }
        #expect(WireEncoder.writeReply(id: 8, revision: 10, versions: versions) == (try many.serializedBytes() as [UInt8]))
    }

    /// Seeded random messages of every encoder, with field values at each varint length
    /// boundary and bodies on both sides of one-byte lengths: each exactly SwiftProtobuf's bytes.
    @Test func everyEncoderMatchesSwiftProtobufOnSeededRandomMessages() throws {
        var random = SplitMix64(seed: 0xBEAC0)
        let boundaries: [UInt64] = [0, 1, 127, 128, 16_383, 16_384, 1 << 35, UInt64(UInt32.max), .max]
        func number() -> UInt64 {
            random.next() % 3 == 0 ? boundaries[Int(random.next() % UInt64(boundaries.count))] : random.next() >> (random.next() % 64)
        }
        func text(_ limit: Int) -> String {
            String((0..<Int(random.next() % UInt64(limit + 1))).map { _ in Character(Unicode.Scalar(UInt8(97 + random.next() % 26))) })
        }
        for _ in 0..<500 {
            let value = Beacon_V1_Value.with { $0.bytesValue = Data(count: Int(random.next() % 300)) }
            let kind: Beacon_V1_Change.Kind = [.put, .delete, .expire][Int(random.next() % 3)]
            let marks = (0..<Int(random.next() % 4)).map { _ in
                Beacon_V1_PrefixMark.with { $0.prefix = text(150); $0.previousRevision = number(); $0.parts = UInt32(truncatingIfNeeded: number()) }
            }
            let expected = Beacon_V1_Diff.with {
                $0.epoch = number()
                $0.event.revision = number()
                $0.event.part = UInt32(truncatingIfNeeded: number())
                $0.event.parts = UInt32(truncatingIfNeeded: number())
                $0.event.timestampMs = number()
                $0.event.change.kind = kind
                $0.event.change.key = text(200)
                if kind == .put { $0.event.change.value = value }
                $0.event.change.version = number()
                $0.event.change.createRevision = number()
                $0.event.change.expiresAtMs = number()
                $0.marks = marks
            }
            let event = expected.event
            let diff = WireEncoder.diff(
                epoch: expected.epoch, revision: event.revision, part: event.part, parts: event.parts, kind: kind,
                key: event.change.key, encodedValue: kind == .put ? try value.serializedBytes() : [],
                version: event.change.version, createRevision: event.change.createRevision,
                expiresAtMilliseconds: event.change.expiresAtMs, timestampMilliseconds: event.timestampMs, marks: marks)
            #expect(diff == (try expected.serializedBytes() as [UInt8]))

            let versions = (0..<Int(random.next() % 40)).map { _ in number() }
            let reply = Beacon_V1_Reply.with {
                $0.id = number()
                $0.write = .with { $0.revision = number(); $0.versions = versions; $0.replayed = random.next() % 2 == 0 }
            }
            #expect(WireEncoder.writeReply(id: reply.id, revision: reply.write.revision, versions: versions,
                                           replayed: reply.write.replayed) == (try reply.serializedBytes() as [UInt8]))

            let put = Beacon_V1_Request.with { $0.id = number(); $0.put.key = text(200); $0.put.value = value }
            let encodedPut = WireEncoder.putRequest(id: put.id, key: put.put.key, encodedValue: try value.serializedBytes())
            #expect(encodedPut == (try put.serializedBytes() as [UInt8]))

            let events = (0..<Int(random.next() % 6)).map { _ in
                WireEncoder.Event(revision: number(), part: UInt32(truncatingIfNeeded: number()), parts: UInt32(truncatingIfNeeded: number()),
                                  kind: [.put, .delete, .expire][Int(random.next() % 3)], key: text(200), encodedValue: try! value.serializedBytes(),
                                  version: number(), createRevision: number(), expiresAtMilliseconds: number(), timestampMilliseconds: number())
            }
            let page = Beacon_V1_Reply.with {
                $0.id = number()
                $0.events = .with {
                    $0.events = events.map { event in .with {
                        $0.revision = event.revision; $0.part = event.part; $0.parts = event.parts; $0.timestampMs = event.timestampMilliseconds
                        $0.change.kind = event.kind; $0.change.key = event.key
                        if event.kind == .put { $0.change.value = value }
                        $0.change.version = event.version; $0.change.createRevision = event.createRevision
                        $0.change.expiresAtMs = event.expiresAtMilliseconds
                    } }
                    $0.revision = number(); $0.epoch = number(); $0.prefixRevision = number(); $0.compactedRevision = number()
                    $0.more = random.next() % 2 == 0
                }
            }
            let encodedPage = WireEncoder.eventsReply(id: page.id, events: events, revision: page.events.revision, epoch: page.events.epoch,
                                                      prefixRevision: page.events.prefixRevision,
                                                      compactedRevision: page.events.compactedRevision, more: page.events.more)
            #expect(encodedPage == (try page.serializedBytes() as [UInt8]))

            let batch = Beacon_V1_Request.with { $0.id = number(); $0.batch.requests = Array(repeating: put, count: Int(random.next() % 5)) }
            let encodedBatch = WireEncoder.batchRequest(id: batch.id, requests: Array(repeating: encodedPut, count: batch.batch.requests.count))
            #expect(encodedBatch == (try batch.serializedBytes() as [UInt8]))
        }
    }
}
