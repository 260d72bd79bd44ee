/// What a read's reply weighs as it is built, against what the reply may take: a read whose
/// reply would pass its allowance is refused (`QUOTA_EXCEEDED`) as soon as it does, before the
/// rest is computed, so that a request of a few bytes never makes the daemon build megabytes
/// for a connection that does not read.
struct ReadCost {
    /// Bytes the reply may take.
    let allowance: Int
    /// Bytes counted so far (an estimate of the encoded reply).
    private(set) var bytes = 0
    /// Whether the allowance was passed.
    private(set) var refused = false

    /// What a request costs beyond its reply (decoding, dispatch), in reply bytes.
    static let perRequestBytes = 64

    /// About what one key-value or change weighs encoded: its key, its value and their fields.
    @inline(__always)
    static func estimate(key: String, value: Int) -> Int { key.utf8.count + value + 40 }

    /// Counts `more` bytes of the reply.
    /// - Throws: `QUOTA_EXCEEDED` once the reply passes its allowance.
    mutating func add(_ more: Int) throws(Refusal) {
        bytes += more
        guard bytes > allowance else { return }
        refused = true
        throw Refusal(.quotaExceeded, "the reply would pass the \(allowance) bytes this connection may still have unread "
            + "(reply_buffer_bytes, reply_buffer_peer_bytes, reply_buffer_total_bytes): read the replies already sent, or page "
            + "with limit and start_after")
    }
}
