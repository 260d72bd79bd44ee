import BeaconProtocol
import Foundation
import SwiftProtobuf
import Testing

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
}
