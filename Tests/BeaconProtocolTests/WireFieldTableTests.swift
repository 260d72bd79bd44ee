import BeaconProtocol
import SwiftProtobuf
import Testing

/// The hand-written encoder's field numbers (``WireField``) against the code SwiftProtobuf
/// generated from proto/beacon.proto: each message below sets exactly the named field, and its
/// encoding must start with that field's number.
@Suite(.timeLimit(.minutes(3)))
struct WireFieldTableTests {
    /// The field number of the first tag in `bytes`.
    static func firstFieldNumber(_ bytes: [UInt8]) -> UInt64 {
        var tag: UInt64 = 0, shift: UInt64 = 0
        for byte in bytes {
            tag |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 { break }
            shift += 7
        }
        return tag >> 3
    }

    static func number<M: SwiftProtobuf.Message>(_ message: M) throws -> UInt64 {
        firstFieldNumber(try message.serializedBytes())
    }

    @Test("Every field number the encoder writes is the schema's")
    func tableMatchesTheGeneratedCode() throws {
        let kv = Beacon_V1_Value.with { $0.intValue = 1 }
        let checks: [(String, UInt64, UInt64)] = [
            ("Diff.epoch", WireField.Diff.epoch, try Self.number(Beacon_V1_Diff.with { $0.epoch = 1 })),
            ("Diff.event", WireField.Diff.event, try Self.number(Beacon_V1_Diff.with { $0.event.revision = 1 })),
            ("Diff.marks", WireField.Diff.marks, try Self.number(Beacon_V1_Diff.with { $0.marks = [.with { $0.parts = 1 }] })),
            ("Bundle.diffs", WireField.Bundle.diffs, try Self.number(Beacon_V1_Bundle.with { $0.diffs = [.with { $0.epoch = 1 }] })),
            ("Event.revision", WireField.Event.revision, try Self.number(Beacon_V1_Event.with { $0.revision = 1 })),
            ("Event.part", WireField.Event.part, try Self.number(Beacon_V1_Event.with { $0.part = 1 })),
            ("Event.parts", WireField.Event.parts, try Self.number(Beacon_V1_Event.with { $0.parts = 1 })),
            ("Event.change", WireField.Event.change, try Self.number(Beacon_V1_Event.with { $0.change.version = 1 })),
            ("Event.timestamp_ms", WireField.Event.timestampMs, try Self.number(Beacon_V1_Event.with { $0.timestampMs = 1 })),
            ("Change.kind", WireField.Change.kind, try Self.number(Beacon_V1_Change.with { $0.kind = .delete })),
            ("Change.key", WireField.Change.key, try Self.number(Beacon_V1_Change.with { $0.key = "k" })),
            ("Change.value", WireField.Change.value, try Self.number(Beacon_V1_Change.with { $0.value = kv })),
            ("Change.version", WireField.Change.version, try Self.number(Beacon_V1_Change.with { $0.version = 1 })),
            ("Change.create_revision", WireField.Change.createRevision, try Self.number(Beacon_V1_Change.with { $0.createRevision = 1 })),
            ("Change.expires_at_ms", WireField.Change.expiresAtMs, try Self.number(Beacon_V1_Change.with { $0.expiresAtMs = 1 })),
            ("PrefixMark.prefix", WireField.PrefixMark.prefix, try Self.number(Beacon_V1_PrefixMark.with { $0.prefix = "p" })),
            ("PrefixMark.previous_revision", WireField.PrefixMark.previousRevision,
             try Self.number(Beacon_V1_PrefixMark.with { $0.previousRevision = 1 })),
            ("PrefixMark.parts", WireField.PrefixMark.parts, try Self.number(Beacon_V1_PrefixMark.with { $0.parts = 1 })),
            ("Request.id", WireField.Request.id, try Self.number(Beacon_V1_Request.with { $0.id = 1 })),
            ("Request.put", WireField.Request.put, try Self.number(Beacon_V1_Request.with { $0.put = .with { $0.key = "k" } })),
            ("Request.batch", WireField.Request.batch, try Self.number(Beacon_V1_Request.with { $0.batch = .with { $0.requests = [.init()] } })),
            ("Put.key", WireField.Put.key, try Self.number(Beacon_V1_Put.with { $0.key = "k" })),
            ("Put.value", WireField.Put.value, try Self.number(Beacon_V1_Put.with { $0.value = kv })),
            ("Batch.requests", WireField.Batch.requests, try Self.number(Beacon_V1_Batch.with { $0.requests = [.init()] })),
            ("Reply.id", WireField.Reply.id, try Self.number(Beacon_V1_Reply.with { $0.id = 1 })),
            ("Reply.write", WireField.Reply.write, try Self.number(Beacon_V1_Reply.with { $0.write = .with { $0.revision = 1 } })),
            ("Reply.batch", WireField.Reply.batch, try Self.number(Beacon_V1_Reply.with { $0.batch = .with { $0.replies = [.init()] } })),
            ("BatchReply.replies", WireField.BatchReply.replies, try Self.number(Beacon_V1_BatchReply.with { $0.replies = [.init()] })),
            ("WriteReply.revision", WireField.WriteReply.revision, try Self.number(Beacon_V1_WriteReply.with { $0.revision = 1 })),
            ("WriteReply.versions", WireField.WriteReply.versions, try Self.number(Beacon_V1_WriteReply.with { $0.versions = [1] })),
            ("WriteReply.replayed", WireField.WriteReply.replayed, try Self.number(Beacon_V1_WriteReply.with { $0.replayed = true })),
            ("Reply.events", WireField.Reply.events, try Self.number(Beacon_V1_Reply.with { $0.events = .with { $0.more = true } })),
            ("EventsReply.events", WireField.EventsReply.events, try Self.number(Beacon_V1_EventsReply.with { $0.events = [.init()] })),
            ("EventsReply.revision", WireField.EventsReply.revision, try Self.number(Beacon_V1_EventsReply.with { $0.revision = 1 })),
            ("EventsReply.epoch", WireField.EventsReply.epoch, try Self.number(Beacon_V1_EventsReply.with { $0.epoch = 1 })),
            ("EventsReply.prefix_revision", WireField.EventsReply.prefixRevision,
             try Self.number(Beacon_V1_EventsReply.with { $0.prefixRevision = 1 })),
            ("EventsReply.compacted_revision", WireField.EventsReply.compactedRevision,
             try Self.number(Beacon_V1_EventsReply.with { $0.compactedRevision = 1 })),
            ("EventsReply.more", WireField.EventsReply.more, try Self.number(Beacon_V1_EventsReply.with { $0.more = true })),
        ]
        for (name, table, generated) in checks {
            #expect(table == generated, "\(name): the table says \(table), the schema \(generated)")
        }
    }
}
