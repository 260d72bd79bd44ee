/// Writers' sessions: a key written with a session is deleted when the session ends, that is
/// when no `KeepAlive` renewed it within its time to live (or one ended it).
///
/// Bindings may be stale (the key was rewritten without the session, or deleted); the daemon
/// checks each key against the store when the session ends.
struct SessionTable {
    struct Session {
        var ttlMilliseconds: UInt64
        var deadline: UInt64
        var keys: Set<String> = []
    }

    private(set) var sessions: [[UInt8]: Session] = [:]

    var count: Int { sessions.count }

    /// Binds `key` to `session`, creating the session (with `ttl`) if it is new.
    mutating func bind(_ key: String, to session: [UInt8], now: UInt64, ttl: UInt64) {
        sessions[session, default: Session(ttlMilliseconds: ttl, deadline: now + ttl)].keys.insert(key)
    }

    /// Renews `session` for `ttl` from `now` (creating it if new); `ttl` 0 ends it at once.
    mutating func keepAlive(_ session: [UInt8], ttl: UInt64, now: UInt64) -> Session {
        var entry = sessions[session] ?? Session(ttlMilliseconds: ttl, deadline: now + ttl)
        entry.ttlMilliseconds = ttl
        entry.deadline = now + ttl
        sessions[session] = entry
        return entry
    }

    /// When the next session ends, if any.
    var nextDeadline: UInt64? { sessions.values.lazy.map(\.deadline).min() }

    /// Removes and returns the sessions whose deadline has passed.
    mutating func removeEnded(now: UInt64) -> [(id: [UInt8], keys: Set<String>)] {
        let ended = sessions.filter { $0.value.deadline <= now }
        for id in ended.keys { sessions[id] = nil }
        return ended.map { ($0.key, $0.value.keys) }
    }
}
