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
        var result = FastBatch()
        let id = ProtoReader.request(bytes, operation: 22) { start, end in
            var batch = ProtoReader(bytes: bytes, index: start, end: end)
            while !batch.atEnd {
                guard let (field, wire) = batch.tag(), field == 1, wire == 2,
                      let (requestStart, requestEnd) = batch.lengthDelimited() else { return false }
                result.requests.append(requestStart..<requestEnd)
            }
            return true
        }
        guard let id else { return nil }
        result.id = id
        return result
    }
}
