import Foundation

/// Validation of keys and prefixes (proto/PROTOCOL.md, "Keys").
///
/// A key is 1 to 256 bytes of segments joined by `.`; a segment is one or more of
/// `A–Z a–z 0–9 _ - : @ /`. A prefix is any leading part of a key, including the empty prefix.
public enum KeyPath {
    /// Why a key or prefix was refused.
    public enum Problem: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case tooLong(bytes: Int)
        case invalidCharacter(UInt8, offset: Int)
        case emptySegment(offset: Int)

        public var description: String {
            switch self {
            case .empty: "key is empty"
            case .tooLong(let bytes): "key is \(bytes) bytes; the limit is \(WireLimits.maxKeyBytes)"
            case .invalidCharacter(let byte, let offset):
                "character \(byte < 0x20 || byte > 0x7E ? "0x" + String(byte, radix: 16) : "'\(Character(UnicodeScalar(byte)))'") at offset \(offset) is not allowed in a key (allowed: A-Z a-z 0-9 _ - : @ / and . between segments)"
            case .emptySegment(let offset): "empty segment at offset \(offset) (keys may not start or end with '.', nor contain '..')"
            }
        }
    }

    /// Whether `byte` may appear in a segment: `A–Z a–z 0–9 _ - : @ /`, as one bit per byte
    /// value (bytes 0–63 in the first word, 64–127 in the second; none above 127). A bit test
    /// costs a quarter of the range comparisons it replaces, on every byte of every key.
    @inline(__always)
    static func isSegmentByte(_ byte: UInt8) -> Bool {
        let low: UInt64 = 0x07FF_A000_0000_0000  // - / 0-9 :
        let high: UInt64 = 0x07FF_FFFE_87FF_FFFF  // @ A-Z _ a-z
        let word = byte < 64 ? low : byte < 128 ? high : 0
        return (word >> UInt64(byte & 63)) & 1 != 0
    }

    /// Returns why `key` is not a valid key, or `nil` when it is.
    public static func problem(key: String) -> Problem? {
        check(key, asPrefix: false)
    }

    /// Returns why `prefix` is not a valid prefix, or `nil` when it is.
    public static func problem(prefix: String) -> Problem? {
        check(prefix, asPrefix: true)
    }

    private static func check(_ text: String, asPrefix: Bool) -> Problem? {
        var utf8 = text.utf8
        if let problem = utf8.withContiguousStorageIfAvailable({ scan($0, asPrefix: asPrefix) }) {
            return problem
        }
        var copy = text
        copy.makeContiguousUTF8()
        utf8 = copy.utf8
        return utf8.withContiguousStorageIfAvailable { scan($0, asPrefix: asPrefix) } ?? nil
    }

    private static func scan(_ bytes: UnsafeBufferPointer<UInt8>, asPrefix: Bool) -> Problem? {
        if bytes.isEmpty { return asPrefix ? nil : .empty }
        if bytes.count > WireLimits.maxKeyBytes { return .tooLong(bytes: bytes.count) }
        // Where the current segment starts; a dot there ends an empty segment.
        var segmentStart = 0
        var offset = 0
        while offset < bytes.count {
            let byte = bytes[offset]
            if byte == UInt8(ascii: ".") {
                if offset == segmentStart { return .emptySegment(offset: offset) }
                segmentStart = offset + 1
            } else if !isSegmentByte(byte) {
                return .invalidCharacter(byte, offset: offset)
            }
            offset += 1
        }
        if segmentStart == bytes.count && !asPrefix { return .emptySegment(offset: bytes.count) }
        return nil
    }
}

extension String {
    /// Whether the string's UTF-8 bytes start with `prefix`'s (Beacon's prefixes are byte
    /// prefixes). One `memcmp` for native strings, where `utf8.starts(with:)` steps byte by byte.
    @inlinable
    public func isUnder(_ prefix: String) -> Bool {
        let count = prefix.utf8.count
        guard count <= utf8.count else { return false }
        if count == 0 { return true }
        return utf8.withContiguousStorageIfAvailable { bytes in
            prefix.utf8.withContiguousStorageIfAvailable { prefixBytes in
                memcmp(bytes.baseAddress!, prefixBytes.baseAddress!, count) == 0
            } ?? utf8.starts(with: prefix.utf8)
        } ?? utf8.starts(with: prefix.utf8)
    }
}
