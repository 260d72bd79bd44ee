import Foundation

/// Reads a publication's `Diff` straight from its bytes, for subscribers: the envelope, the
/// event and its change, the marks and scalar values by hand; a list or map value by
/// SwiftProtobuf.
///
/// Anything unusual — an unknown or repeated singular field, an unexpected wire type, invalid
/// UTF-8 — returns `nil`, and the caller decodes with SwiftProtobuf as usual (which also keeps
/// fields a newer daemon adds).
public enum FastDiff {
    /// Decodes `bytes` as a `Diff`, or returns `nil`.
    public static func decode(_ bytes: UnsafeRawBufferPointer) -> Beacon_V1_Diff? {
        var diff = Beacon_V1_Diff()
        var reader = ProtoReader(bytes: bytes, index: 0, end: bytes.count)
        var seen: UInt8 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard seen & 1 == 0, let epoch = reader.varint() else { return nil }
                seen |= 1
                diff.epoch = epoch
            case (2, 2):
                guard seen & 2 == 0, let (start, end) = reader.lengthDelimited(),
                      let event = event(bytes, start, end) else { return nil }
                seen |= 2
                diff.event = event
            case (3, 2):
                guard let (start, end) = reader.lengthDelimited(), let mark = mark(bytes, start, end) else { return nil }
                diff.marks.append(mark)
            default:
                return nil
            }
        }
        return diff
    }

    /// Where each encoded `Diff` of a `Bundle` lies in `bytes`, in order; `nil` for anything
    /// but a bundle of diffs alone (the caller decodes it with SwiftProtobuf then).
    public static func bundledDiffs(_ bytes: UnsafeRawBufferPointer) -> [Range<Int>]? {
        var ranges: [Range<Int>] = []
        var reader = ProtoReader(bytes: bytes, index: 0, end: bytes.count)
        while !reader.atEnd {
            guard let (field, wire) = reader.tag(), field == WireField.Bundle.diffs, wire == 2,
                  let (start, end) = reader.lengthDelimited() else { return nil }
            ranges.append(start..<end)
        }
        return ranges
    }

    static func event(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_Event? {
        var event = Beacon_V1_Event()
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var seen: UInt64 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.singularTag(below: 6, seen: &seen) else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard let revision = reader.varint() else { return nil }
                event.revision = revision
            case (2, 0):
                guard let part = reader.varint(), part <= UInt64(UInt32.max) else { return nil }
                event.part = UInt32(part)
            case (3, 0):
                guard let parts = reader.varint(), parts <= UInt64(UInt32.max) else { return nil }
                event.parts = UInt32(parts)
            case (4, 2):
                guard let (s, e) = reader.lengthDelimited(), let change = change(bytes, s, e) else { return nil }
                event.change = change
            case (5, 0):
                guard let timestamp = reader.varint() else { return nil }
                event.timestampMs = timestamp
            default:
                return nil
            }
        }
        return event
    }

    private static func change(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_Change? {
        var change = Beacon_V1_Change()
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var seen: UInt64 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.singularTag(below: 7, seen: &seen) else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard let raw = reader.varint(), raw <= 2, let kind = Beacon_V1_Change.Kind(rawValue: Int(raw)) else { return nil }
                change.kind = kind
            case (2, 2):
                guard let (s, e) = reader.lengthDelimited(),
                      let key = ProtoReader.utf8String(UnsafeRawBufferPointer(rebasing: bytes[s..<e])) else { return nil }
                change.key = key
            case (3, 2):
                guard let (s, e) = reader.lengthDelimited(), let value = value(bytes, s, e) else { return nil }
                change.value = value
            case (4, 0):
                guard let version = reader.varint() else { return nil }
                change.version = version
            case (5, 0):
                guard let revision = reader.varint() else { return nil }
                change.createRevision = revision
            case (6, 0):
                guard let expiry = reader.varint() else { return nil }
                change.expiresAtMs = expiry
            default:
                return nil
            }
        }
        return change
    }

    /// A scalar value by hand; a list or map (or anything odd) by SwiftProtobuf.
    private static func value(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_Value? {
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var value = Beacon_V1_Value()
        if let (field, wire) = reader.tag() {
            switch (field, wire) {
            case (1, 0):
                guard reader.varint() == 0 else { return generic(bytes, start, end) }
                value.nullValue = .nullValue
            case (2, 0):
                guard let flag = reader.varint() else { return nil }
                value.boolValue = flag != 0
            case (3, 0):
                guard let zigzag = reader.varint() else { return nil }
                value.intValue = Int64(bitPattern: (zigzag >> 1) ^ (0 &- (zigzag & 1)))
            case (4, 1):
                guard reader.index + 8 <= end else { return nil }
                value.doubleValue = Double(bitPattern: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: reader.index, as: UInt64.self)))
                reader.index += 8
            case (5, 2):
                guard let (s, e) = reader.lengthDelimited(),
                      let text = ProtoReader.utf8String(UnsafeRawBufferPointer(rebasing: bytes[s..<e])) else { return nil }
                value.stringValue = text
            case (6, 2):
                guard let (s, e) = reader.lengthDelimited() else { return nil }
                value.bytesValue = Data(UnsafeRawBufferPointer(rebasing: bytes[s..<e]))
            default:
                return generic(bytes, start, end)
            }
        }
        // One field, nothing after it; anything else is SwiftProtobuf's to judge.
        return reader.atEnd ? value : generic(bytes, start, end)
    }

    private static func generic(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_Value? {
        try? Beacon_V1_Value(serializedBytes: Array(UnsafeRawBufferPointer(rebasing: bytes[start..<end])))
    }

    private static func mark(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_PrefixMark? {
        var mark = Beacon_V1_PrefixMark()
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var seen: UInt64 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.singularTag(below: 4, seen: &seen) else { return nil }
            switch (field, wire) {
            case (1, 2):
                guard let (s, e) = reader.lengthDelimited(),
                      let prefix = ProtoReader.utf8String(UnsafeRawBufferPointer(rebasing: bytes[s..<e])) else { return nil }
                mark.prefix = prefix
            case (2, 0):
                guard let revision = reader.varint() else { return nil }
                mark.previousRevision = revision
            case (3, 0):
                guard let parts = reader.varint(), parts <= UInt64(UInt32.max) else { return nil }
                mark.parts = UInt32(parts)
            default:
                return nil
            }
        }
        return mark
    }
}
