/// Reads protobuf wire format from a byte buffer: varints, tags and length-delimited fields.
/// Every method returns `nil` (or `false`) instead of reading past `end`.
struct ProtoReader {
    let bytes: UnsafeRawBufferPointer
    var index: Int
    let end: Int

    var atEnd: Bool { index >= end }

    mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while index < end && shift < 64 {
            let byte = bytes[index]
            index += 1
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
        return nil
    }

    mutating func tag() -> (UInt64, UInt8)? {
        guard let tag = varint(), tag >> 3 != 0 else { return nil }
        return (tag >> 3, UInt8(tag & 7))
    }

    /// The next tag of a message read field by field whose fields are all singular and numbered
    /// below `limit` (at most 64); `nil` for a malformed tag, a field at or above the limit, or
    /// one already in `seen` (then SwiftProtobuf, which merges repeats, should decide).
    mutating func singularTag(below limit: UInt64, seen: inout UInt64) -> (UInt64, UInt8)? {
        guard let (field, wire) = tag(), field < limit else { return nil }
        let bit = UInt64(1) << field
        guard seen & bit == 0 else { return nil }
        seen |= bit
        return (field, wire)
    }

    mutating func lengthDelimited() -> (Int, Int)? {
        guard let length = varint(), length <= UInt64(end - index) else { return nil }
        let start = index
        index += Int(length)
        return (start, index)
    }

    /// `bytes` as a string if they are valid UTF-8 (checked quickly when they are ASCII).
    static func utf8String(_ bytes: UnsafeRawBufferPointer) -> String? {
        var ascii = true
        for byte in bytes where byte >= 0x80 {
            ascii = false
            break
        }
        return ascii ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
    }

    /// Whether `bytes` are valid UTF-8, without making a string of them when they are ASCII.
    static func isUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        for byte in bytes where byte >= 0x80 {
            return String(validating: bytes, as: UTF8.self) != nil
        }
        return true
    }

    mutating func skip(_ count: Int) -> Bool {
        guard end - index >= count else { return false }
        index += count
        return true
    }
}

extension ProtoReader {
    /// Reads a `Request` that holds only its id (field 1) and one operation, field `operation`,
    /// present once; `readOperation` reads the operation from its byte range.
    /// - Returns: the id, or `nil` if the request holds anything else or `readOperation` refuses.
    static func request(_ bytes: UnsafeRawBufferPointer, operation: UInt64,
                        _ readOperation: (_ start: Int, _ end: Int) -> Bool) -> UInt64? {
        var reader = ProtoReader(bytes: bytes, index: 0, end: bytes.count)
        var id: UInt64 = 0
        var sawOperation = false
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard let value = reader.varint() else { return nil }
                id = value
            case (operation, 2):
                guard !sawOperation, let (start, end) = reader.lengthDelimited(), readOperation(start, end) else { return nil }
                sawOperation = true
            default:
                return nil
            }
        }
        return sawOperation ? id : nil
    }
}
