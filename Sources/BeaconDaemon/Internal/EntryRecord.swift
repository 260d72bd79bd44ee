import Foundation

/// One key's current state in a single allocation: the metadata in the header, then the key's
/// UTF-8 bytes, the encoded value and the session bytes.
///
/// A record is immutable once made: a write makes a new record, so an undo can keep the old one
/// and put it back.
final class EntryRecord: ManagedBuffer<EntryRecord.Header, UInt8> {
    struct Header {
        var version: UInt64
        var createRevision: UInt64
        var modRevision: UInt64
        var expiresAtMilliseconds: UInt64
        /// Commit time (Unix ms) of `modRevision`.
        var modTimeMilliseconds: UInt64
        /// The key's hash, as the key index uses it.
        var keyHash: UInt32
        var valueCount: UInt32
        var keyCount: UInt16
        var sessionCount: UInt8
        var isDeleted: Bool
    }

    /// The metadata, read through the header's address. A record never changes once made, so
    /// the dynamic exclusivity check on each read of ManagedBuffer's stored `header` (several
    /// per write on the daemon's loop) would guard nothing.
    @inline(__always)
    var fields: Header { withUnsafeMutablePointerToHeader { $0.pointee } }

    /// Makes a record; `key` is at most `UInt16.max` bytes and `session` at most 255.
    static func make(key: UnsafeRawBufferPointer, keyHash: UInt32, value: [UInt8], session: [UInt8], version: UInt64,
                     createRevision: UInt64, modRevision: UInt64, expiresAtMilliseconds: UInt64,
                     modTimeMilliseconds: UInt64, isDeleted: Bool) -> EntryRecord {
        precondition(key.count <= Int(UInt16.max) && session.count <= Int(UInt8.max) && value.count <= Int(UInt32.max))
        let size = key.count + value.count + session.count
        let buffer = create(minimumCapacity: size) { _ in
            Header(version: version, createRevision: createRevision, modRevision: modRevision,
                   expiresAtMilliseconds: expiresAtMilliseconds, modTimeMilliseconds: modTimeMilliseconds, keyHash: keyHash, valueCount: UInt32(value.count),
                   keyCount: UInt16(key.count), sessionCount: UInt8(session.count), isDeleted: isDeleted)
        }
        let record = unsafeDowncast(buffer, to: EntryRecord.self)
        record.withUnsafeMutablePointerToElements { bytes in
            let keyEnd = UnsafeMutableRawPointer(bytes).copyBytes(from: key)
            let valueEnd = value.withUnsafeBytes { keyEnd.copyBytes(from: $0) }
            _ = session.withUnsafeBytes { valueEnd.copyBytes(from: $0) }
        }
        return record
    }

    /// Calls `body` with the key's UTF-8 bytes.
    @inline(__always)
    func withKey<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        let count = Int(fields.keyCount)
        return try withUnsafeMutablePointerToElements { try body(UnsafeRawBufferPointer(start: $0, count: count)) }
    }

    var key: String {
        withKey { String(decoding: $0, as: UTF8.self) }
    }

    var value: [UInt8] {
        let offset = Int(fields.keyCount), count = Int(fields.valueCount)
        return withUnsafeMutablePointerToElements { Array(UnsafeBufferPointer(start: $0 + offset, count: count)) }
    }

    var session: [UInt8] {
        let offset = Int(fields.keyCount) + Int(fields.valueCount), count = Int(fields.sessionCount)
        return withUnsafeMutablePointerToElements { Array(UnsafeBufferPointer(start: $0 + offset, count: count)) }
    }

    /// Whether the record's key is `key`.
    @inline(__always)
    func hasKey(_ key: UnsafeRawBufferPointer) -> Bool {
        withKey { $0.count == key.count && (key.isEmpty || memcmp($0.baseAddress!, key.baseAddress!, key.count) == 0) }
    }

    /// Whether the record's key starts with `prefix`.
    func keyHasPrefix(_ prefix: UnsafeRawBufferPointer) -> Bool {
        withKey { $0.count >= prefix.count && (prefix.isEmpty || memcmp($0.baseAddress!, prefix.baseAddress!, prefix.count) == 0) }
    }
}

/// Byte-wise order of two keys, the order SQLite's `BINARY` collation gives the journal.
@inline(__always)
func keyOrder(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Int {
    let common = min(left.count, right.count)
    if common > 0 {
        let order = memcmp(left.baseAddress!, right.baseAddress!, common)
        if order != 0 { return Int(order) }
    }
    return left.count - right.count
}

extension UnsafeMutableRawPointer {
    /// Copies `bytes` here and returns the address just after them.
    @inline(__always)
    fileprivate func copyBytes(from bytes: UnsafeRawBufferPointer) -> UnsafeMutableRawPointer {
        if let source = bytes.baseAddress, !bytes.isEmpty { copyMemory(from: source, byteCount: bytes.count) }
        return self + bytes.count
    }
}

/// Calls `body` with the UTF-8 bytes of `text` (no copy for a native string).
@inline(__always)
func withUTF8Bytes<Result>(_ text: String, _ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
    var text = text
    return try text.withUTF8 { try body(UnsafeRawBufferPointer($0)) }
}
