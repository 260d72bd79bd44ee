/// Writers' sessions: a key written with a session is deleted when the session ends, that is
/// when no `KeepAlive` renewed it within its time to live (or one ended it). Deadlines are on the
/// monotonic clock.
///
/// Bindings may be stale (the key was rewritten without the session, or deleted); the daemon
/// checks each key against the store when the session ends. Each session has one timer in the
/// loop's ``TimerQueue`` at a time: renewals push the deadline out without setting another, and
/// the timer, when it comes due early, is set again for the deadline (``check(_:timerAt:now:)``).
struct SessionTable {
    struct Session {
        var ttlMilliseconds: UInt64
        var deadline: MonotonicTime
        /// When this session's timer is set to come due.
        var timerAt: MonotonicTime
        var keys: Set<String> = []
    }

    /// What a session's timer found.
    enum Check {
        /// The session ended: delete its keys.
        case ended(keys: Set<String>)
        /// It was renewed: set the timer again for this time.
        case renewed(until: MonotonicTime)
        /// The timer was not this session's current one, or the session is gone.
        case stale
    }

    private(set) var sessions: [[UInt8]: Session] = [:]
    /// Sessions per owner: a session id starts with its owner's name and a 0 byte.
    private var owned: [[UInt8]: Int] = [:]

    var count: Int { sessions.count }

    /// Whether `session` exists.
    func contains(_ session: [UInt8]) -> Bool { sessions[session] != nil }

    /// The sessions whose ids start with `owner` and a 0 byte.
    func count(ownedBy owner: String) -> Int { owned[Array(owner.utf8), default: 0] }

    private static func owner(of session: [UInt8]) -> [UInt8] {
        Array(session.prefix { $0 != 0 })
    }

    private mutating func created(_ session: [UInt8]) { owned[Self.owner(of: session), default: 0] += 1 }

    private mutating func removed(_ session: [UInt8]) {
        let owner = Self.owner(of: session)
        owned[owner, default: 1] -= 1
        if owned[owner] == 0 { owned[owner] = nil }
    }

    /// Binds `key` to `session`, creating the session (with `ttl`) if it is new.
    /// - Returns: when to set the new session's timer; `nil` for a session that has one.
    mutating func bind(_ key: String, to session: [UInt8], now: MonotonicTime, ttl: UInt64) -> MonotonicTime? {
        if sessions[session] != nil {
            sessions[session]!.keys.insert(key)
            return nil
        }
        let deadline = now.adding(milliseconds: ttl)
        sessions[session] = Session(ttlMilliseconds: ttl, deadline: deadline, timerAt: deadline, keys: [key])
        created(session)
        return deadline
    }

    /// Renews `session` for `ttl` from `now`, creating it if new.
    /// - Returns: the session, and when to set a timer for it if it needs an earlier one.
    mutating func keepAlive(_ session: [UInt8], ttl: UInt64, now: MonotonicTime) -> (session: Session, timerAt: MonotonicTime?) {
        let deadline = now.adding(milliseconds: ttl)
        if sessions[session] == nil { created(session) }
        var entry = sessions[session] ?? Session(ttlMilliseconds: ttl, deadline: deadline, timerAt: .distantFuture)
        entry.ttlMilliseconds = ttl
        entry.deadline = deadline
        var timer: MonotonicTime?
        if deadline < entry.timerAt {
            entry.timerAt = deadline
            timer = deadline
        }
        sessions[session] = entry
        return (entry, timer)
    }

    /// Ends `session` now, whatever its deadline; returns its keys.
    mutating func end(_ session: [UInt8]) -> Set<String>? {
        guard let entry = sessions.removeValue(forKey: session) else { return nil }
        removed(session)
        return entry.keys
    }

    /// Decides a session timer set for `timerAt` that came due at `now`.
    mutating func check(_ session: [UInt8], timerAt: MonotonicTime, now: MonotonicTime) -> Check {
        guard let entry = sessions[session], entry.timerAt == timerAt else { return .stale }
        if entry.deadline <= now {
            sessions[session] = nil
            removed(session)
            return .ended(keys: entry.keys)
        }
        sessions[session]!.timerAt = entry.deadline
        return .renewed(until: entry.deadline)
    }
}
