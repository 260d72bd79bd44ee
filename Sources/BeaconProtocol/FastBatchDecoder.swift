/// Finds the requests of a `Request` carrying a `Batch` straight from its bytes, without
/// decoding them: each is handed on as the range of its encoded bytes.
///
/// Anything unusual (another operation, unknown fields, a repeated `batch` field) returns `nil`,
/// and the caller decodes with SwiftProtobuf as usual.
public struct FastBatch {
    /// The batch request's own id, echoed in the `BatchReply`.
    public var id: UInt64 = 0
    /// Where each request's encoded bytes are, in order.
    public var requests: [Range<Int>] = []

    /// Parses `bytes` as a `Request` holding a `Batch`, or returns `nil`.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> FastBatch? {
        var reader = ProtoReader(bytes: bytes, index: 0, end: bytes.count)
        var result = FastBatch()
        var sawBatch = false
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard let id = reader.varint() else { return nil }
                result.id = id
            case (22, 2):
                guard !sawBatch, let (start, end) = reader.lengthDelimited() else { return nil }
                var batch = ProtoReader(bytes: bytes, index: start, end: end)
                while !batch.atEnd {
                    guard let (field, wire) = batch.tag(), field == 1, wire == 2,
                          let (requestStart, requestEnd) = batch.lengthDelimited() else { return nil }
                    result.requests.append(requestStart..<requestEnd)
                }
                sawBatch = true
            default:
                return nil
            }
        }
        return sawBatch ? result : nil
    }
}
