/// Checks an encoded `Value` without decoding it: the daemon embeds stored values in `Delta`
/// and `History` pages as they are, and must not send one a client cannot read.
public enum EncodedValue {
    /// Whether `bytes` is certainly a well-formed `Value`: every field one of the schema's with
    /// its wire type, strings UTF-8, lists and maps well formed in turn. `false` means "not
    /// certain" (an unknown field, say): decode it to find out.
    public static func isWellFormed(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { value($0, 0, $0.count, depth: 0) }
    }

    /// Deeper than any value the daemon accepts (``WireLimits/maxValueDepth``): left to a decoder.
    private static let depthLimit = 64

    private static func value(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int, depth: Int) -> Bool {
        guard depth <= depthLimit else { return false }
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return false }
            if let wellFormed = skipScalar(field, wire, &reader) {
                guard wellFormed else { return false }
                continue
            }
            switch (field, wire) {
            case (7, 2):  // ListValue: repeated Value items = 1
                guard let (s, e) = reader.lengthDelimited(), repeated(bytes, s, e, depth: depth + 1, entry: { bytes, s, e, depth in
                    value(bytes, s, e, depth: depth)
                }) else { return false }
            case (8, 2):  // MapValue: map<string, Value> entries = 1
                guard let (s, e) = reader.lengthDelimited(), repeated(bytes, s, e, depth: depth + 1, entry: mapEntry) else { return false }
            default:
                return false
            }
        }
        return true
    }

    /// Reads one scalar field of a `Value` (null, bool, int, double, string, bytes) after its tag.
    /// - Returns: whether it is well formed; `nil` when the tag is not a scalar field's.
    static func skipScalar(_ field: UInt64, _ wire: UInt8, _ reader: inout ProtoReader) -> Bool? {
        switch (field, wire) {
        case (1, 0), (2, 0), (3, 0):
            return reader.varint() != nil
        case (4, 1):
            return reader.skip(8)
        case (5, 2):
            guard let (s, e) = reader.lengthDelimited() else { return false }
            return ProtoReader.isUTF8(UnsafeRawBufferPointer(rebasing: reader.bytes[s..<e]))
        case (6, 2):
            return reader.lengthDelimited() != nil
        default:
            return nil
        }
    }

    /// A message whose only field is a repeated message, field 1, each checked by `entry`.
    private static func repeated(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int, depth: Int,
                                 entry: (UnsafeRawBufferPointer, Int, Int, Int) -> Bool) -> Bool {
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        while !reader.atEnd {
            guard let (field, wire) = reader.tag(), field == 1, wire == 2,
                  let (s, e) = reader.lengthDelimited(), entry(bytes, s, e, depth) else { return false }
        }
        return true
    }

    /// A map entry: string key = 1, Value value = 2.
    private static func mapEntry(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int, depth: Int) -> Bool {
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        while !reader.atEnd {
            guard let (field, wire) = reader.tag(), wire == 2, let (s, e) = reader.lengthDelimited() else { return false }
            switch field {
            case 1: guard ProtoReader.isUTF8(UnsafeRawBufferPointer(rebasing: bytes[s..<e])) else { return false }
            case 2: guard value(bytes, s, e, depth: depth) else { return false }
            default: return false
            }
        }
        return true
    }

}
