/// A minimal protobuf encoder for the daemon's hot path: `Diff` and write replies built from
/// values that are already encoded, without constructing the message objects.
///
/// The output is byte-for-byte what SwiftProtobuf produces for the same message (fields in
/// number order, proto3 defaults omitted); the tests decode it with SwiftProtobuf to prove it.
public struct WireEncoder {
    /// The encoded bytes so far.
    public private(set) var bytes: [UInt8] = []

    /// An empty encoder with room for `capacity` bytes.
    public init(capacity: Int = 128) {
        bytes.reserveCapacity(capacity)
    }

    @inline(__always)
    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        bytes.append(UInt8(value))
    }

    /// Appends a varint field (omitted when 0).
    @inline(__always)
    public mutating func field(_ number: UInt64, _ value: UInt64) {
        guard value != 0 else { return }
        varint(number << 3)
        varint(value)
    }

    /// Appends a length-delimited field (omitted when empty).
    @inline(__always)
    public mutating func field(_ number: UInt64, bytes value: some Collection<UInt8>) {
        guard !value.isEmpty else { return }
        varint(number << 3 | 2)
        varint(UInt64(value.count))
        bytes.append(contentsOf: value)
    }

    /// Appends a string field (omitted when empty).
    @inline(__always)
    public mutating func field(_ number: UInt64, string value: String) {
        field(number, bytes: value.utf8)
    }

    /// Appends a nested message field, written by `body` (always present, even when empty).
    @inline(__always)
    public mutating func message(_ number: UInt64, _ body: (inout WireEncoder) -> Void) {
        varint(number << 3 | 2)
        // Encode in place behind a one-byte length, widening it afterwards if the body is long.
        let lengthAt = bytes.count
        bytes.append(0)
        body(&self)
        let length = bytes.count - lengthAt - 1
        if length < 0x80 {
            bytes[lengthAt] = UInt8(length)
            return
        }
        var prefix: [UInt8] = []
        var value = UInt64(length)
        while value >= 0x80 {
            prefix.append(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        prefix.append(UInt8(value))
        bytes.replaceSubrange(lengthAt..<(lengthAt + 1), with: prefix)
    }

    // MARK: Beacon messages

    /// Encodes a `beacon.v1.Diff` whose change carries `encodedValue`, an encoded `Value`.
    public static func diff(epoch: UInt64, revision: UInt64, part: UInt32, parts: UInt32, kind: Beacon_V1_Change.Kind,
                            key: String, encodedValue: [UInt8], version: UInt64, createRevision: UInt64,
                            expiresAtMilliseconds: UInt64, timestampMilliseconds: UInt64,
                            marks: [Beacon_V1_PrefixMark]) -> [UInt8] {
        var encoder = WireEncoder(capacity: 96 + key.utf8.count + encodedValue.count)
        encoder.field(1, epoch)
        encoder.message(2) { event in
            event.field(1, revision)
            event.field(2, UInt64(part))
            event.field(3, UInt64(parts))
            event.message(4) { change in
                change.field(1, UInt64(kind.rawValue))
                change.field(2, string: key)
                if kind == .put { change.message(3) { $0.bytes.append(contentsOf: encodedValue) } }
                change.field(4, version)
                change.field(5, createRevision)
                change.field(6, expiresAtMilliseconds)
            }
            event.field(5, timestampMilliseconds)
        }
        for mark in marks {
            encoder.message(3) { m in
                m.field(1, string: mark.prefix)
                m.field(2, mark.previousRevision)
                m.field(3, UInt64(mark.parts))
            }
        }
        return encoder.bytes
    }

    /// Encodes a `beacon.v1.Request` carrying a plain `Put` of an already encoded value.
    public static func putRequest(id: UInt64, key: String, encodedValue: [UInt8]) -> [UInt8] {
        var encoder = WireEncoder(capacity: 32 + key.utf8.count + encodedValue.count)
        encoder.field(1, id)
        encoder.message(13) { put in
            put.field(1, string: key)
            put.message(2) { $0.bytes.append(contentsOf: encodedValue) }
        }
        return encoder.bytes
    }

    /// Encodes a `beacon.v1.Request` carrying a `Batch` of already encoded requests.
    public static func batchRequest(id: UInt64, requests: [[UInt8]]) -> [UInt8] {
        batch(id: id, requests)
    }

    /// Encodes a `beacon.v1.Reply` carrying a `BatchReply` of already encoded replies.
    public static func batchReply(id: UInt64, replies: [[UInt8]]) -> [UInt8] {
        batch(id: id, replies)
    }

    /// A message with `id` (field 1) and field 22 (`Batch` in a request, `BatchReply` in a reply)
    /// holding `items` as its repeated field 1.
    private static func batch(id: UInt64, _ items: [[UInt8]]) -> [UInt8] {
        var encoder = WireEncoder(capacity: 16 + items.reduce(0) { $0 + $1.count + 3 })
        encoder.field(1, id)
        encoder.message(22) { batch in
            for item in items { batch.message(1) { $0.bytes.append(contentsOf: item) } }
        }
        return encoder.bytes
    }

    /// Encodes a `beacon.v1.Reply` carrying a `WriteReply`.
    public static func writeReply(id: UInt64, revision: UInt64, versions: [UInt64], replayed: Bool = false) -> [UInt8] {
        writeReply(id: id, revision: revision, versionCount: versions.count, replayed: replayed) { packed in
            for version in versions { packed.varint(version) }
        }
    }

    /// Encodes a `beacon.v1.Reply` carrying the `WriteReply` of a write that changed one key.
    public static func writeReply(id: UInt64, revision: UInt64, version: UInt64) -> [UInt8] {
        writeReply(id: id, revision: revision, versionCount: 1, replayed: false) { $0.varint(version) }
    }

    private static func writeReply(id: UInt64, revision: UInt64, versionCount: Int, replayed: Bool,
                                   versions: (inout WireEncoder) -> Void) -> [UInt8] {
        var encoder = WireEncoder(capacity: 32 + versionCount * 2)
        encoder.field(1, id)
        encoder.message(14) { write in
            write.field(1, revision)
            // Packed: the varints behind one length, written in place.
            if versionCount > 0 { write.message(2, versions) }
            write.field(3, replayed ? 1 : 0)
        }
        return encoder.bytes
    }
}
