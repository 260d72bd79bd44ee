/// A minimal protobuf encoder for the daemon's hot path: `Diff` and write replies built from
/// values that are already encoded, without constructing the message objects.
///
/// The output is byte-for-byte what SwiftProtobuf produces for the same message (fields in
/// number order, proto3 defaults omitted); the tests decode it with SwiftProtobuf to prove it.
/// Like SwiftProtobuf, it sizes a message first and then writes it front to back into exactly
/// that many bytes: one allocation, no growth, no length to patch afterwards.
public enum WireEncoder {
    /// Encodes a `beacon.v1.Diff` whose change carries `encodedValue`, an encoded `Value`.
    public static func diff(epoch: UInt64, revision: UInt64, part: UInt32, parts: UInt32, kind: Beacon_V1_Change.Kind,
                            key: String, encodedValue: [UInt8], version: UInt64, createRevision: UInt64,
                            expiresAtMilliseconds: UInt64, timestampMilliseconds: UInt64,
                            marks: [Beacon_V1_PrefixMark]) -> [UInt8] {
        diff(epoch: epoch, revision: revision, part: part, parts: parts, kind: kind, key: key, encodedValue: encodedValue,
             version: version, createRevision: createRevision, expiresAtMilliseconds: expiresAtMilliseconds,
             timestampMilliseconds: timestampMilliseconds, marks: marks) { count, fill in ProtoWriter.encode(count: count, filling: fill) }
    }

    /// Encodes the same `beacon.v1.Diff` into memory that `output` provides: it gets the size and
    /// a function that writes exactly that many bytes into a buffer (a ZeroMQ frame's, say, so
    /// that the diff is written once, in place).
    @inline(__always)
    public static func diff<Output, Failure: Error>(
        epoch: UInt64, revision: UInt64, part: UInt32, parts: UInt32, kind: Beacon_V1_Change.Kind,
        key: String, encodedValue: [UInt8], version: UInt64, createRevision: UInt64,
        expiresAtMilliseconds: UInt64, timestampMilliseconds: UInt64, marks: [Beacon_V1_PrefixMark],
        into output: (_ count: Int, _ fill: (UnsafeMutableRawBufferPointer) -> Void) throws(Failure) -> Output
    ) throws(Failure) -> Output {
        let change = changeSize(kind: kind, keyCount: key.utf8.count, valueCount: encodedValue.count, version: version,
                                createRevision: createRevision, expiresAtMilliseconds: expiresAtMilliseconds)
        let event = eventSize(revision: revision, part: part, parts: parts, changeSize: change, timestampMilliseconds: timestampMilliseconds)
        var total = ProtoSize.field(WireField.Diff.epoch, epoch) + ProtoSize.message(WireField.Diff.event, length: event)
        for index in marks.indices { total += ProtoSize.message(WireField.Diff.marks, length: markSize(marks[index])) }
        return try output(total) { buffer in
            ProtoWriter.write(into: buffer, count: total) { out in
                out.field(WireField.Diff.epoch, epoch)
                out.header(WireField.Diff.event, length: event)
                writeEvent(into: &out, revision: revision, part: part, parts: parts, changeSize: change, kind: kind, key: key,
                           encodedValue: encodedValue, version: version, createRevision: createRevision,
                           expiresAtMilliseconds: expiresAtMilliseconds, timestampMilliseconds: timestampMilliseconds)
                for index in marks.indices {
                    out.header(WireField.Diff.marks, length: markSize(marks[index]))
                    out.field(WireField.PrefixMark.prefix, string: marks[index].prefix)
                    out.field(WireField.PrefixMark.previousRevision, marks[index].previousRevision)
                    out.field(WireField.PrefixMark.parts, UInt64(marks[index].parts))
                }
            }
        }
    }

    /// The bytes an encoded `Diff` of `count` bytes takes in a `Bundle`.
    public static func bundledSize(diffCount count: Int) -> Int {
        ProtoSize.message(WireField.Bundle.diffs, length: count)
    }

    /// Appends an encoded `Diff` to the `Bundle` body `body`.
    public static func appendBundled(diff: UnsafeRawBufferPointer, to body: inout [UInt8]) {
        var length = UInt64(diff.count)
        body.append(UInt8(WireField.Bundle.diffs << 3 | 2))
        while length >= 0x80 {
            body.append(UInt8(truncatingIfNeeded: length) | 0x80)
            length >>= 7
        }
        body.append(UInt8(length))
        body.append(contentsOf: diff)
    }

    /// One change of an `EventsReply`, as ``eventsReply(id:events:revision:epoch:prefixRevision:compactedRevision:more:)``
    /// writes it: the fields of an `Event` with its value already encoded.
    public struct Event: Sendable {
        public var revision: UInt64
        public var part: UInt32
        public var parts: UInt32
        public var kind: Beacon_V1_Change.Kind
        public var key: String
        /// An encoded `Value` for a put; ignored otherwise.
        public var encodedValue: [UInt8]
        public var version: UInt64
        public var createRevision: UInt64
        public var expiresAtMilliseconds: UInt64
        public var timestampMilliseconds: UInt64

        public init(revision: UInt64, part: UInt32, parts: UInt32, kind: Beacon_V1_Change.Kind, key: String, encodedValue: [UInt8],
                    version: UInt64, createRevision: UInt64, expiresAtMilliseconds: UInt64, timestampMilliseconds: UInt64) {
            self.revision = revision
            self.part = part
            self.parts = parts
            self.kind = kind
            self.key = key
            self.encodedValue = encodedValue
            self.version = version
            self.createRevision = createRevision
            self.expiresAtMilliseconds = expiresAtMilliseconds
            self.timestampMilliseconds = timestampMilliseconds
        }

        /// The encoded `Change`'s size.
        var changeSize: Int {
            WireEncoder.changeSize(kind: kind, keyCount: key.utf8.count, valueCount: encodedValue.count, version: version,
                                   createRevision: createRevision, expiresAtMilliseconds: expiresAtMilliseconds)
        }

        /// The encoded `Event`'s size, given its change's.
        func size(changeSize: Int) -> Int {
            WireEncoder.eventSize(revision: revision, part: part, parts: parts, changeSize: changeSize, timestampMilliseconds: timestampMilliseconds)
        }

        /// Writes the `Event`'s fields (not its own header).
        func write(into out: inout ProtoWriter, changeSize: Int) {
            WireEncoder.writeEvent(into: &out, revision: revision, part: part, parts: parts, changeSize: changeSize, kind: kind, key: key,
                                   encodedValue: encodedValue, version: version, createRevision: createRevision,
                                   expiresAtMilliseconds: expiresAtMilliseconds, timestampMilliseconds: timestampMilliseconds)
        }
    }

    // The `Event` of a diff and of a page, written the same way.

    @inline(__always)
    static func changeSize(kind: Beacon_V1_Change.Kind, keyCount: Int, valueCount: Int, version: UInt64, createRevision: UInt64,
                           expiresAtMilliseconds: UInt64) -> Int {
        var size = ProtoSize.field(WireField.Change.kind, UInt64(kind.rawValue)) + ProtoSize.field(WireField.Change.key, byteCount: keyCount)
        if kind == .put { size += ProtoSize.message(WireField.Change.value, length: valueCount) }
        return size + ProtoSize.field(WireField.Change.version, version) + ProtoSize.field(WireField.Change.createRevision, createRevision)
            + ProtoSize.field(WireField.Change.expiresAtMs, expiresAtMilliseconds)
    }

    @inline(__always)
    static func eventSize(revision: UInt64, part: UInt32, parts: UInt32, changeSize: Int, timestampMilliseconds: UInt64) -> Int {
        ProtoSize.field(WireField.Event.revision, revision) + ProtoSize.field(WireField.Event.part, UInt64(part))
            + ProtoSize.field(WireField.Event.parts, UInt64(parts)) + ProtoSize.message(WireField.Event.change, length: changeSize)
            + ProtoSize.field(WireField.Event.timestampMs, timestampMilliseconds)
    }

    /// Writes an `Event`'s fields (not its own header).
    @inline(__always)
    static func writeEvent(into out: inout ProtoWriter, revision: UInt64, part: UInt32, parts: UInt32, changeSize: Int,
                           kind: Beacon_V1_Change.Kind, key: String, encodedValue: [UInt8], version: UInt64, createRevision: UInt64,
                           expiresAtMilliseconds: UInt64, timestampMilliseconds: UInt64) {
        out.field(WireField.Event.revision, revision)
        out.field(WireField.Event.part, UInt64(part))
        out.field(WireField.Event.parts, UInt64(parts))
        out.header(WireField.Event.change, length: changeSize)
        out.field(WireField.Change.kind, UInt64(kind.rawValue))
        out.field(WireField.Change.key, string: key)
        if kind == .put {
            out.header(WireField.Change.value, length: encodedValue.count)
            encodedValue.withUnsafeBytes { out.raw($0) }
        }
        out.field(WireField.Change.version, version)
        out.field(WireField.Change.createRevision, createRevision)
        out.field(WireField.Change.expiresAtMs, expiresAtMilliseconds)
        out.field(WireField.Event.timestampMs, timestampMilliseconds)
    }

    /// Encodes a `beacon.v1.Reply` with request id `id` whose result is an `EventsReply` (a
    /// `Delta` or `History` page): the events' values go in as they are, without being decoded.
    public static func eventsReply(id: UInt64, events: [Event], revision: UInt64, epoch: UInt64, prefixRevision: UInt64,
                                   compactedRevision: UInt64, more: Bool) -> [UInt8] {
        var changeSizes: [Int] = []
        changeSizes.reserveCapacity(events.count)
        var body = 0
        for event in events {
            let change = event.changeSize
            changeSizes.append(change)
            body += ProtoSize.message(WireField.EventsReply.events, length: event.size(changeSize: change))
        }
        body += ProtoSize.field(WireField.EventsReply.revision, revision) + ProtoSize.field(WireField.EventsReply.epoch, epoch)
            + ProtoSize.field(WireField.EventsReply.prefixRevision, prefixRevision)
            + ProtoSize.field(WireField.EventsReply.compactedRevision, compactedRevision)
            + ProtoSize.field(WireField.EventsReply.more, more ? 1 : 0)
        let total = ProtoSize.field(WireField.Reply.id, id) + ProtoSize.message(WireField.Reply.events, length: body)
        return ProtoWriter.encode(count: total) { out in
            out.field(WireField.Reply.id, id)
            out.header(WireField.Reply.events, length: body)
            for index in events.indices {
                out.header(WireField.EventsReply.events, length: events[index].size(changeSize: changeSizes[index]))
                events[index].write(into: &out, changeSize: changeSizes[index])
            }
            out.field(WireField.EventsReply.revision, revision)
            out.field(WireField.EventsReply.epoch, epoch)
            out.field(WireField.EventsReply.prefixRevision, prefixRevision)
            out.field(WireField.EventsReply.compactedRevision, compactedRevision)
            out.field(WireField.EventsReply.more, more ? 1 : 0)
        }
    }

    private static func markSize(_ mark: Beacon_V1_PrefixMark) -> Int {
        ProtoSize.field(WireField.PrefixMark.prefix, byteCount: mark.prefix.utf8.count)
            + ProtoSize.field(WireField.PrefixMark.previousRevision, mark.previousRevision)
            + ProtoSize.field(WireField.PrefixMark.parts, UInt64(mark.parts))
    }

    /// Encodes a `beacon.v1.Request` carrying a plain `Put` of an already encoded value.
    public static func putRequest(id: UInt64, key: String, encodedValue: [UInt8]) -> [UInt8] {
        let put = ProtoSize.field(WireField.Put.key, byteCount: key.utf8.count) + ProtoSize.message(WireField.Put.value, length: encodedValue.count)
        return ProtoWriter.encode(count: ProtoSize.field(WireField.Request.id, id) + ProtoSize.message(WireField.Request.put, length: put)) { out in
            out.field(WireField.Request.id, id)
            out.header(WireField.Request.put, length: put)
            out.field(WireField.Put.key, string: key)
            out.header(WireField.Put.value, length: encodedValue.count)
            encodedValue.withUnsafeBytes { out.raw($0) }
        }
    }

    /// Encodes a `beacon.v1.Request` carrying a `Batch` of already encoded requests.
    public static func batchRequest(id: UInt64, requests: [[UInt8]]) -> [UInt8] {
        batch(id: id, requests)
    }

    /// Encodes a `beacon.v1.Reply` carrying a `BatchReply` of already encoded replies.
    public static func batchReply(id: UInt64, replies: [[UInt8]]) -> [UInt8] {
        batchReply(id: id, items: replies.map(BatchReplyItem.encoded))
    }

    /// One reply inside a `BatchReply`.
    public enum BatchReplyItem: Sendable, Equatable {
        /// A reply already encoded as a `beacon.v1.Reply`.
        case encoded([UInt8])
        /// The `WriteReply` of a write that changed one key, encoded in place by
        /// ``batchReply(id:items:)``: the same bytes as ``writeReply(id:revision:version:)``
        /// without an array of its own.
        case oneKeyWrite(id: UInt64, revision: UInt64, version: UInt64)
    }

    /// Encodes a `beacon.v1.Reply` carrying a `BatchReply` of `items`, in order.
    public static func batchReply(id: UInt64, items: [BatchReplyItem]) -> [UInt8] {
        var body = 0
        for index in items.indices {
            switch items[index] {
            case .encoded(let reply):
                body += ProtoSize.message(WireField.BatchReply.replies, length: reply.count)
            case .oneKeyWrite(let id, let revision, let version):
                body += ProtoSize.message(WireField.BatchReply.replies, length: oneKeyWriteReplySize(id: id, revision: revision, version: version))
            }
        }
        return ProtoWriter.encode(count: ProtoSize.field(WireField.Reply.id, id) + ProtoSize.message(WireField.Reply.batch, length: body)) { out in
            out.field(WireField.Reply.id, id)
            out.header(WireField.Reply.batch, length: body)
            for index in items.indices {
                switch items[index] {
                case .encoded(let reply):
                    out.header(WireField.BatchReply.replies, length: reply.count)
                    reply.withUnsafeBytes { out.raw($0) }
                case .oneKeyWrite(let id, let revision, let version):
                    out.header(WireField.BatchReply.replies, length: oneKeyWriteReplySize(id: id, revision: revision, version: version))
                    writeReply(id: id, revision: revision, packedLength: ProtoSize.varint(version), replayed: false, into: &out) {
                        $0.varint(version)
                    }
                }
            }
        }
    }

    @inline(__always)
    private static func oneKeyWriteReplySize(id: UInt64, revision: UInt64, version: UInt64) -> Int {
        let write = writeReplyBodySize(revision: revision, packedLength: ProtoSize.varint(version), replayed: false)
        return ProtoSize.field(WireField.Reply.id, id) + ProtoSize.message(WireField.Reply.write, length: write)
    }

    /// A `Request` with `id` and a `Batch` holding `items`, encoded requests.
    private static func batch(id: UInt64, _ items: [[UInt8]]) -> [UInt8] {
        var body = 0
        for index in items.indices { body += ProtoSize.message(WireField.Batch.requests, length: items[index].count) }
        return ProtoWriter.encode(count: ProtoSize.field(WireField.Request.id, id) + ProtoSize.message(WireField.Request.batch, length: body)) { out in
            out.field(WireField.Request.id, id)
            out.header(WireField.Request.batch, length: body)
            for index in items.indices {
                out.header(WireField.Batch.requests, length: items[index].count)
                items[index].withUnsafeBytes { out.raw($0) }
            }
        }
    }

    /// Encodes a `beacon.v1.Reply` carrying a `WriteReply`.
    public static func writeReply(id: UInt64, revision: UInt64, versions: [UInt64], replayed: Bool = false) -> [UInt8] {
        var packed = 0
        for version in versions { packed += ProtoSize.varint(version) }
        return writeReply(id: id, revision: revision, packedLength: packed, replayed: replayed) { out in
            for version in versions { out.varint(version) }
        }
    }

    /// Encodes a `beacon.v1.Reply` carrying the `WriteReply` of a write that changed one key.
    public static func writeReply(id: UInt64, revision: UInt64, version: UInt64) -> [UInt8] {
        writeReply(id: id, revision: revision, packedLength: ProtoSize.varint(version), replayed: false) { $0.varint(version) }
    }

    @inline(__always)
    private static func writeReply(id: UInt64, revision: UInt64, packedLength: Int, replayed: Bool,
                                   versions: (inout ProtoWriter) -> Void) -> [UInt8] {
        let write = writeReplyBodySize(revision: revision, packedLength: packedLength, replayed: replayed)
        return ProtoWriter.encode(count: ProtoSize.field(WireField.Reply.id, id) + ProtoSize.message(WireField.Reply.write, length: write)) { out in
            writeReply(id: id, revision: revision, packedLength: packedLength, replayed: replayed, into: &out, versions: versions)
        }
    }

    /// The size of a `WriteReply`'s fields.
    @inline(__always)
    private static func writeReplyBodySize(revision: UInt64, packedLength: Int, replayed: Bool) -> Int {
        // Packed versions: the varints behind one length (omitted when there are none).
        ProtoSize.field(WireField.WriteReply.revision, revision)
            + (packedLength > 0 ? ProtoSize.message(WireField.WriteReply.versions, length: packedLength) : 0)
            + ProtoSize.field(WireField.WriteReply.replayed, replayed ? 1 : 0)
    }

    /// Writes a `beacon.v1.Reply` carrying a `WriteReply`.
    @inline(__always)
    private static func writeReply(id: UInt64, revision: UInt64, packedLength: Int, replayed: Bool,
                                   into out: inout ProtoWriter, versions: (inout ProtoWriter) -> Void) {
        out.field(WireField.Reply.id, id)
        out.header(WireField.Reply.write, length: writeReplyBodySize(revision: revision, packedLength: packedLength, replayed: replayed))
        out.field(WireField.WriteReply.revision, revision)
        if packedLength > 0 {
            out.header(WireField.WriteReply.versions, length: packedLength)
            versions(&out)
        }
        out.field(WireField.WriteReply.replayed, replayed ? 1 : 0)
    }
}

/// Sizes of protobuf fields as ``ProtoWriter`` writes them.
enum ProtoSize {
    @inline(__always)
    static func varint(_ value: UInt64) -> Int {
        // 7 bits per byte; 0 still takes one byte.
        (64 - (value | 1).leadingZeroBitCount + 6) / 7
    }

    /// A varint field; 0 when the value is 0 (proto3 omits defaults).
    @inline(__always)
    static func field(_ number: UInt64, _ value: UInt64) -> Int {
        value == 0 ? 0 : varint(number << 3) + varint(value)
    }

    /// A length-delimited field of `byteCount` bytes; 0 when empty.
    @inline(__always)
    static func field(_ number: UInt64, byteCount: Int) -> Int {
        byteCount == 0 ? 0 : message(number, length: byteCount)
    }

    /// A nested message field of `length` bytes (present even when empty).
    @inline(__always)
    static func message(_ number: UInt64, length: Int) -> Int {
        varint(number << 3 | 2) + varint(UInt64(length)) + length
    }
}

/// Writes protobuf fields front to back into memory sized beforehand by ``ProtoSize``. Every
/// write checks the bound, so a size computed wrongly stops the process rather than corrupting
/// memory (the tests compare every message with SwiftProtobuf's encoding).
struct ProtoWriter {
    private let base: UnsafeMutablePointer<UInt8>
    private let capacity: Int
    private(set) var count = 0

    /// Exactly `count` bytes, written by `body`.
    ///
    /// Written into temporary memory (the stack, for small messages) and copied into the array:
    /// `Array(unsafeUninitializedCapacity:)` allocates through an unspecialised runtime entry
    /// point that looks the storage type up by name on every call, which costs several times
    /// the copy.
    @inline(__always)
    static func encode(count: Int, _ body: (inout ProtoWriter) -> Void) -> [UInt8] {
        encode(count: count, filling: { write(into: $0, count: count, body) })
    }

    /// Exactly `count` bytes, written into a buffer by `fill`.
    @inline(__always)
    static func encode(count: Int, filling fill: (UnsafeMutableRawBufferPointer) -> Void) -> [UInt8] {
        withUnsafeTemporaryAllocation(byteCount: max(count, 1), alignment: 1) { buffer in
            fill(UnsafeMutableRawBufferPointer(rebasing: buffer[..<count]))
            return Array(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// Writes exactly `count` bytes into `buffer` (at least that long) with `body`.
    @inline(__always)
    static func write(into buffer: UnsafeMutableRawBufferPointer, count: Int, _ body: (inout ProtoWriter) -> Void) {
        precondition(buffer.count >= count, "a buffer of \(buffer.count) bytes for a message of \(count)")
        var writer = ProtoWriter(base: buffer.baseAddress?.assumingMemoryBound(to: UInt8.self) ?? UnsafeMutablePointer(bitPattern: 1)!,
                                 capacity: count)
        body(&writer)
        precondition(writer.count == count, "a message was sized at \(count) bytes but \(writer.count) were written")
    }

    private init(base: UnsafeMutablePointer<UInt8>, capacity: Int) {
        self.base = base
        self.capacity = capacity
    }

    @inline(__always)
    mutating func varint(_ value: UInt64) {
        var value = value
        while value >= 0x80 {
            byte(UInt8(truncatingIfNeeded: value) | 0x80)
            value >>= 7
        }
        byte(UInt8(value))
    }

    @inline(__always)
    private mutating func byte(_ value: UInt8) {
        precondition(count < capacity, "a message outgrew its computed size")
        base[count] = value
        count += 1
    }

    /// A varint field (omitted when 0).
    @inline(__always)
    mutating func field(_ number: UInt64, _ value: UInt64) {
        guard value != 0 else { return }
        varint(number << 3)
        varint(value)
    }

    /// A length-delimited field (omitted when empty).
    @inline(__always)
    mutating func field(_ number: UInt64, bytes value: UnsafeRawBufferPointer) {
        guard !value.isEmpty else { return }
        header(number, length: value.count)
        raw(value)
    }

    /// A string field (omitted when empty).
    @inline(__always)
    mutating func field(_ number: UInt64, string value: String) {
        var value = value
        value.withUTF8 { field(number, bytes: UnsafeRawBufferPointer($0)) }
    }

    /// The tag and length of a nested message whose `length` bytes follow.
    @inline(__always)
    mutating func header(_ number: UInt64, length: Int) {
        varint(number << 3 | 2)
        varint(UInt64(length))
    }

    /// Bytes as they are.
    @inline(__always)
    mutating func raw(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, !bytes.isEmpty else { return }
        precondition(bytes.count <= capacity - count, "a message outgrew its computed size")
        UnsafeMutableRawPointer(base + count).copyMemory(from: source, byteCount: bytes.count)
        count += bytes.count
    }
}
