/// What the daemon counts and samples for `Stats`, systemd's status line and its logs. Loop thread only.
struct DaemonStats {
    var writes: UInt64 = 0
    var rejected: UInt64 = 0
    var requests: UInt64 = 0
    var commits: UInt64 = 0
    var connectionsRefused: UInt64 = 0
    var accessDenied: UInt64 = 0
    var rateLimited: UInt64 = 0
    var quotaExceeded: UInt64 = 0
    var subscriptionsRefused: UInt64 = 0
    var batches: UInt64 = 0
    var leasesRefused: UInt64 = 0
    var slowSubscribersClosed: UInt64 = 0
    /// Requests refused since start, by code (the metrics endpoint's `beacon_refusals_total`).
    var refusals: [Refusal.Code: UInt64] = [:]

    /// Recent write and publication rates.
    var writeRate = RateMeter()
    var publicationRate = RateMeter()
    /// Writes counted at the last status line (its rate is over the interval since).
    var writesAtLastStatus: UInt64 = 0
    /// The journal's size, sampled every heartbeat (for `max_journal_bytes`).
    var journalBytes: UInt64 = 0
    /// Log lines outside peers can cause, throttled.
    var logThrottle = LogThrottle()
    /// This run of the daemon, as pings and heartbeats name it.
    let instance = UInt64.random(in: 1...UInt64(Int64.max))
    let startedAt: MonotonicTime

    init(startedAt: MonotonicTime) {
        self.startedAt = startedAt
    }
}

/// The journal's upkeep: the compaction under way and the backup copies being made, each in
/// paced steps between requests. Loop thread only.
struct Maintenance {
    /// The steps of a compaction under way.
    var compaction = CompactionSchedule()
    /// Journal copies being read by `Backup` requests.
    var backups: BackupCopies
    /// The pace of the steps that make a backup copy: pages per step, sized to hold the loop about 8 ms.
    var backupPacer = StepPacer(initialSize: 256, sizes: 16...262_144)
    /// When subscribers that do not read were last looked for.
    var lastStalledSubscriberScan = MonotonicTime(milliseconds: 0)
    /// Subscriber connections whose send queue was full at the last scan.
    var stalledSubscribers: Set<StalledSubscriber> = []
}
