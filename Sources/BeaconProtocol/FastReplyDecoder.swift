/// Reads a `Reply` that carries an `EventsReply` (a `Delta` or `History` page) straight from its
/// bytes, for clients that stream history: its events are read as ``FastDiff`` reads a diff's.
///
/// Any other reply, and anything unusual (an unknown or repeated singular field, an unexpected
/// wire type, invalid UTF-8), returns `nil`: the caller decodes with SwiftProtobuf as usual.
public enum FastReply {
    /// Decodes `bytes` as a `Reply` with an `EventsReply`, or returns `nil`.
    public static func decodeEvents(_ bytes: UnsafeRawBufferPointer) -> Beacon_V1_Reply? {
        var reply = Beacon_V1_Reply()
        var reader = ProtoReader(bytes: bytes, index: 0, end: bytes.count)
        var seenID = false, seenEvents = false
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return nil }
            switch (field, wire) {
            case (1, 0):
                guard !seenID, let id = reader.varint() else { return nil }
                seenID = true
                reply.id = id
            case (17, 2):
                guard !seenEvents, let (start, end) = reader.lengthDelimited(), let events = events(bytes, start, end) else { return nil }
                seenEvents = true
                reply.events = events
            default:
                return nil
            }
        }
        return seenEvents ? reply : nil
    }

    private static func events(_ bytes: UnsafeRawBufferPointer, _ start: Int, _ end: Int) -> Beacon_V1_EventsReply? {
        var page = Beacon_V1_EventsReply()
        var reader = ProtoReader(bytes: bytes, index: start, end: end)
        var seen: UInt64 = 0
        while !reader.atEnd {
            guard let (field, wire) = reader.tag() else { return nil }
            if field == 1 && wire == 2 {
                guard let (s, e) = reader.lengthDelimited(), let event = FastDiff.event(bytes, s, e) else { return nil }
                page.events.append(event)
                continue
            }
            guard field < 7, wire == 0, seen & (1 << field) == 0, let number = reader.varint() else { return nil }
            seen |= 1 << field
            switch field {
            case 2: page.revision = number
            case 3: page.epoch = number
            case 4: page.prefixRevision = number
            case 5: page.compactedRevision = number
            case 6:
                guard number <= 1 else { return nil }
                page.more = number == 1
            default: return nil
            }
        }
        return page
    }
}
