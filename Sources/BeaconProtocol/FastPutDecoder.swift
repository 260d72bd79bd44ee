/// Parses the most common request — one `Put` of a scalar value — straight from its bytes,
/// keeping the value's encoding as it came (it is already the canonical `Value` bytes).
///
/// Anything unusual (another operation, a list or map value, unknown or repeated fields,
/// invalid UTF-8) returns `nil`, and the caller decodes with SwiftProtobuf as usual.
public struct FastPut {
    public var id: UInt64 = 0
    public var key: String = ""
    /// The encoded `beacon.v1.Value`: exactly one scalar field.
    public var encodedValue: [UInt8] = []
    public var ifVersion: UInt64?
    public var createOnly = false
    public var ttlMilliseconds: UInt64 = 0
    public var writeID: [UInt8] = []

    /// Parses `bytes` as a `Request` holding a scalar `Put`, or returns `nil`.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> FastPut? {
        var result = FastPut()
        guard let id = ProtoReader.request(bytes, operation: 13, { parsePut(bytes, $0, $1, into: &result) }) else { return nil }
        result.id = id
        return result
    }

    private static func parsePut(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int, into result: inout FastPut) -> Bool {
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var sawValue = false
        var seen: UInt64 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.singularTag(below: 8, seen: &seen) else { return false }
            switch (field, wire) {
            case (1, 2):
                guard let (s, e) = reader.lengthDelimited(), let key = ProtoReader.utf8String(UnsafeRawBufferPointer(rebasing: bytes[s..<e])) else {
                    return false
                }
                result.key = key
            case (2, 2):
                guard let (s, e) = reader.lengthDelimited(), isScalarValue(bytes, s, e) else { return false }
                result.encodedValue = Array(UnsafeRawBufferPointer(rebasing: bytes[s..<e]))
                sawValue = true
            case (3, 0):
                guard let version = reader.varint() else { return false }
                result.ifVersion = version
            case (4, 0):
                guard let flag = reader.varint() else { return false }
                result.createOnly = flag != 0
            case (5, 0):
                guard let ttl = reader.varint() else { return false }
                result.ttlMilliseconds = ttl
            case (6, 2):
                guard let (s, e) = reader.lengthDelimited() else { return false }
                result.writeID = Array(UnsafeRawBufferPointer(rebasing: bytes[s..<e]))
            default:
                return false
            }
        }
        return sawValue
    }

    /// Whether `bytes[start..<end]` is a `Value` with exactly one scalar field set.
    private static func isScalarValue(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Bool {
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        guard let (field, wire) = reader.tag(), EncodedValue.skipScalar(field, wire, &reader) == true else { return false }
        return reader.atEnd
    }
}
