import BeaconProtocol
import BeaconTestSupport
import Foundation
import SwiftProtobuf
import Testing

/// The subscriber's hand-written `Diff` reader must agree with SwiftProtobuf on every diff the
/// daemon publishes, and step aside (return nil) on anything it does not know.
@Suite(.timeLimit(.minutes(3)))
struct FastDiffTests {
    static func randomValue(_ random: inout SplitMix64, depth: Int = 0) -> Beacon_V1_Value {
        switch random.next(depth > 1 ? 6 : 8) {
        case 0: return .with { $0.nullValue = .nullValue }
        case 1: return .with { $0.boolValue = random.next(2) == 1 }
        case 2: return .with { $0.intValue = Int64(bitPattern: random.next()) >> UInt64(random.next(64)) }
        case 3: return .with { $0.doubleValue = Double(bitPattern: random.next()) }
        case 4: return .with { $0.stringValue = ["", "wlan0", "é ✓ 🚀", String(repeating: "x", count: 300)][random.next(4)] }
        case 5: return .with { $0.bytesValue = Data((0..<random.next(40)).map { _ in UInt8(random.next(256)) }) }
        case 6: return .with { $0.listValue.items = (0..<random.next(4)).map { _ in randomValue(&random, depth: depth + 1) } }
        default: return .with { $0.mapValue.entries = ["a": randomValue(&random, depth: depth + 1), "b": .with { $0.intValue = 1 }] }
        }
    }

    @Test func agreesWithSwiftProtobufOnWhatTheDaemonPublishes() throws {
        var random = SplitMix64(seed: 42)
        for _ in 0..<5_000 {
            let value = Self.randomValue(&random)
            let kind = Beacon_V1_Change.Kind(rawValue: random.next(3))!
            let marks: [Beacon_V1_PrefixMark] = (0..<random.next(3)).map { i in
                .with { $0.prefix = ["", "net.", "n"][i]; $0.previousRevision = random.next(); $0.parts = UInt32(random.next(5)) }
            }
            let bytes = WireEncoder.diff(
                epoch: random.next(), revision: random.next() >> 1, part: UInt32(random.next(10)), parts: UInt32(random.next(10)),
                kind: kind, key: "net.k\(random.next(100))", encodedValue: kind == .put ? try value.serializedBytes() : [],
                version: random.next(), createRevision: random.next(), expiresAtMilliseconds: UInt64(random.next(2)) * random.next(),
                timestampMilliseconds: random.next(), marks: marks)
            let expected = try Beacon_V1_Diff(serializedBytes: bytes)
            let fast = try #require(bytes.withUnsafeBytes { FastDiff.decode($0) })
            #expect(fast == expected)
        }
    }

    @Test func stepsAsideForWhatItDoesNotKnow() throws {
        let diff = Beacon_V1_Diff.with {
            $0.epoch = 1
            $0.event = .with { $0.revision = 2; $0.change = .with { $0.key = "k"; $0.value = .with { $0.intValue = 3 } } }
        }
        var bytes: [UInt8] = try diff.serializedBytes()
        #expect(bytes.withUnsafeBytes { FastDiff.decode($0) } == diff)
        // A field from a newer protocol: SwiftProtobuf keeps it, the fast reader declines.
        bytes += [0xA0, 0x06, 0x01]  // field 100, varint 1
        #expect(bytes.withUnsafeBytes { FastDiff.decode($0) } == nil)
        // Truncated, and a key that is not UTF-8.
        let whole: [UInt8] = try diff.serializedBytes()
        #expect(Array(whole.dropLast()).withUnsafeBytes { FastDiff.decode($0) } == nil)
        let badKey: [UInt8] = [0x12, 0x06, 0x22, 0x04, 0x12, 0x02, 0xC3, 0x28]  // event { change { key: C3 28 } }
        #expect(badKey.withUnsafeBytes { FastDiff.decode($0) } == nil)
    }
}

/// The hand-written reader of `Delta` and `History` pages must agree with SwiftProtobuf on every
/// page the daemon writes, and step aside for any other reply.
@Suite(.timeLimit(.minutes(3)))
struct FastReplyTests {
    @Test func agreesWithSwiftProtobufOnWhatTheDaemonAnswers() throws {
        var random = SplitMix64(seed: 7)
        for _ in 0..<1_000 {
            let events = try (0..<random.next(20)).map { _ in
                let kind = Beacon_V1_Change.Kind(rawValue: random.next(3))!
                return WireEncoder.Event(
                    revision: random.next() >> 1, part: UInt32(random.next(10)), parts: UInt32(random.next(10)), kind: kind,
                    key: "net.k\(random.next(100))", encodedValue: kind == .put ? try FastDiffTests.randomValue(&random).serializedBytes() : [],
                    version: random.next(), createRevision: random.next(), expiresAtMilliseconds: UInt64(random.next(2)) * random.next(),
                    timestampMilliseconds: random.next())
            }
            let bytes = WireEncoder.eventsReply(id: random.next(), events: events, revision: random.next(), epoch: random.next(),
                                                prefixRevision: UInt64(random.next(2)) * random.next(),
                                                compactedRevision: UInt64(random.next(2)) * random.next(), more: random.next(2) == 1)
            let expected = try Beacon_V1_Reply(serializedBytes: bytes)
            let fast = try #require(bytes.withUnsafeBytes { FastReply.decodeEvents($0) })
            #expect(fast == expected)
        }
    }

    @Test func stepsAsideForOtherRepliesAndWhatItDoesNotKnow() throws {
        let page = Beacon_V1_Reply.with {
            $0.id = 4
            $0.events = .with { $0.events = [.with { $0.revision = 2; $0.change.key = "k" }]; $0.revision = 2; $0.more = true }
        }
        var bytes: [UInt8] = try page.serializedBytes()
        #expect(bytes.withUnsafeBytes { FastReply.decodeEvents($0) } == page)
        bytes += [0xA0, 0x06, 0x01]  // field 100 of Reply, from a newer protocol
        #expect(bytes.withUnsafeBytes { FastReply.decodeEvents($0) } == nil)
        let write: [UInt8] = try Beacon_V1_Reply.with { $0.id = 1; $0.write.revision = 3 }.serializedBytes()
        #expect(write.withUnsafeBytes { FastReply.decodeEvents($0) } == nil)
        let error: [UInt8] = try Beacon_V1_Reply.with { $0.id = 1; $0.error.code = .compacted }.serializedBytes()
        #expect(error.withUnsafeBytes { FastReply.decodeEvents($0) } == nil)
        let whole: [UInt8] = try page.serializedBytes()
        #expect(Array(whole.dropLast()).withUnsafeBytes { FastReply.decodeEvents($0) } == nil, "truncated")
    }
}

/// The daemon's check of a stored value before it goes into a page as it is: every value it
/// could have stored passes, and nothing passes that SwiftProtobuf would not decode.
@Suite(.timeLimit(.minutes(3)))
struct EncodedValueTests {
    @Test func acceptsEveryValueAndNothingADecoderRefuses() throws {
        var random = SplitMix64(seed: 11)
        for _ in 0..<5_000 {
            let encoded: [UInt8] = try FastDiffTests.randomValue(&random).serializedBytes()
            #expect(EncodedValue.isWellFormed(encoded))
            // Damaged copies: whatever the check passes must decode.
            var damaged = encoded
            if !damaged.isEmpty {
                switch random.next(3) {
                case 0: damaged.removeLast(1 + random.next(damaged.count) % damaged.count)
                case 1: damaged[random.next(damaged.count)] = UInt8(random.next(256))
                default: damaged.insert(UInt8(random.next(256)), at: random.next(damaged.count))
                }
            }
            if EncodedValue.isWellFormed(damaged) {
                #expect((try? Beacon_V1_Value(serializedBytes: damaged)) != nil, "\(damaged) passed but does not decode")
            }
        }
        #expect(!EncodedValue.isWellFormed([0xFF]), "field 31, wire type 7")
        #expect(!EncodedValue.isWellFormed([0x2A, 0x02, 0xC3, 0x28]), "a string that is not UTF-8")
        #expect(!EncodedValue.isWellFormed([0x2A, 0x05, 0x61]), "a string longer than what is left")
    }
}
