/// Compaction in bounded steps.
///
/// Compacting through revision T keeps, of everything at or below T, only the latest change of
/// each key that is still live: what a snapshot at T needs. Done in one statement, that takes
/// about 1.5 µs per change record, seconds for a few million, during which the journal's user
/// (the daemon's loop) can do nothing else. So compaction is announced first and then done in
/// steps of a bounded number of rows, with the journal usable between steps:
///
/// 1. *Announce* (one transaction): `compacted_revision` becomes T. From then on history and
///    deltas from below T are refused, so removing what lies below T can no longer change an
///    answer, except that a history from revision 0 may still include some superseded changes
///    until the run finishes (in revision order, so replaying them ends in the same state).
/// 2. *Collect* (read-only steps): the latest position of every key below T's end, into a
///    temporary table, scanning the log in position order.
/// 3. *Prune* (one transaction per step, in position order): remove every change below T's end
///    that is a deletion or not its key's latest. Going upwards, a key's tombstone is removed
///    only after every older change of that key, so a snapshot at T is right after every step.
///
/// Changes appended meanwhile lie above T and are not touched. A run interrupted by a crash or
/// a stop is resumed at the next open (`compaction_finished` in `meta` lags `compacted_revision`).
struct CompactionRun {
    enum Phase {
        case collect
        case prune
    }

    /// The revision compacted through.
    let target: UInt64
    /// The first position above the target: everything below it is examined.
    let end: Int64
    var phase = Phase.collect
    /// The position the next step starts at.
    var cursor: Int64 = 0
    /// Change records removed so far.
    var removed = 0
    /// Whether the temporary table of latest positions may hold rows of an earlier run.
    var needsFreshTable = true

    init(target: UInt64) {
        self.target = target
        self.end = LogPosition.after(target).rowID
    }
}

/// Where a compaction stands after a step.
public struct CompactionProgress: Sendable, Equatable {
    /// The revision being compacted through.
    public var target: UInt64
    /// Change records removed so far by this compaction.
    public var removed: Int
    /// Whether the compaction is complete.
    public var isFinished: Bool
}

extension Journal {
    /// Whether a compaction is under way: ``continueCompaction(rows:)`` finishes it.
    public var isCompacting: Bool { compaction != nil }

    /// Starts compacting history at or below `revision`: announces it (``compactedRevision``
    /// becomes `revision`, and deletion tombstones at or below it leave the state table) and
    /// leaves the removal of old change records to ``continueCompaction(rows:)``. A compaction
    /// already under way is replaced by this one (what it removed stays removed).
    /// - Returns: whether there is anything to compact (`revision` is above the compacted one).
    @discardableResult
    public func beginCompaction(through revision: UInt64) throws(JournalError) -> Bool {
        let target = min(revision, headRevision)
        guard target > compactedRevision else { return false }
        try checkpointState()  // the state table must hold what compaction leaves in the log
        do {
            let previous = compactedRevision
            try inTransaction { () throws(SQLiteError) in
                let tombstones = try database.prepare("DELETE FROM state WHERE deleted = 1 AND mod_revision <= ?1")
                tombstones.bind(1, target)
                try tombstones.run()
                let meta = try database.prepare("UPDATE meta SET value = ?1 WHERE name = 'compacted_revision'")
                meta.bind(1, target)
                try meta.run()
                // Journals from before compaction in steps have no such row: they were finished.
                let finished = try database.prepare("INSERT OR IGNORE INTO meta(name, value) VALUES ('compaction_finished', ?1)")
                finished.bind(1, previous)
                try finished.run()
            }
        } catch {
            throw JournalError(error, while: "cannot compact through \(target)")
        }
        compactedRevision = target
        compaction = CompactionRun(target: target)
        return true
    }

    /// Performs one step of the compaction under way, examining at most `rows` change records.
    /// - Returns: where the compaction stands, or `nil` when none is under way.
    /// - Throws: ``JournalError``; the step is undone and may be tried again.
    @discardableResult
    public func continueCompaction(rows: Int) throws(JournalError) -> CompactionProgress? {
        guard var run = compaction else { return nil }
        do {
            if run.needsFreshTable {
                try database.execute("""
                    CREATE TEMP TABLE IF NOT EXISTS compaction_latest(key TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID;
                    DELETE FROM temp.compaction_latest;
                    """)
                run.needsFreshTable = false
            }
            let stepEnd = try position(from: run.cursor, after: max(rows, 1), below: run.end)
            switch run.phase {
            case .collect:
                let collect = try database.prepare("""
                    INSERT INTO temp.compaction_latest(key, position)
                    SELECT key, max(position) FROM change_log WHERE position >= ?1 AND position < ?2 GROUP BY key
                    ON CONFLICT(key) DO UPDATE SET position = excluded.position
                    """)
                collect.bind(1, run.cursor)
                collect.bind(2, stepEnd)
                try collect.run()
                run.cursor = stepEnd
                if stepEnd == run.end {
                    run.phase = .prune
                    run.cursor = 0
                }
            case .prune:
                let finishing = stepEnd == run.end
                try inTransaction { () throws(SQLiteError) in
                    let prune = try database.prepare("""
                        DELETE FROM change_log WHERE position >= ?1 AND position < ?2 AND (kind != 0 OR NOT EXISTS
                          (SELECT 1 FROM temp.compaction_latest latest
                           WHERE latest.key = change_log.key AND latest.position = change_log.position))
                        """)
                    prune.bind(1, run.cursor)
                    prune.bind(2, stepEnd)
                    try prune.run()
                    run.removed += database.changes
                    if finishing {
                        let meta = try database.prepare("UPDATE meta SET value = ?1 WHERE name = 'compaction_finished'")
                        meta.bind(1, run.target)
                        try meta.run()
                    }
                }
                run.cursor = stepEnd
                // Write this step's pages back now: left to the automatic checkpoint, they would
                // be written back ~40 MiB at a time, in one stall of about 100 ms.
                try database.execute("PRAGMA wal_checkpoint(PASSIVE)")
                if finishing {
                    try? database.execute("DELETE FROM temp.compaction_latest")
                    compaction = nil
                    return CompactionProgress(target: run.target, removed: run.removed, isFinished: true)
                }
            }
        } catch {
            compaction = run
            throw JournalError(error, while: "cannot compact through \(run.target)")
        }
        compaction = run
        return CompactionProgress(target: run.target, removed: run.removed, isFinished: false)
    }

    /// Drops history at or below `revision` that a snapshot at `revision` does not need: every
    /// change that a later change (at or below `revision`) to the same key superseded, and
    /// deletions. Current state is kept. Delta and history requests from below `revision`
    /// must then resync. Runs a whole compaction (and any under way) before returning.
    /// - Returns: the number of change records removed.
    @discardableResult
    public func compact(through revision: UInt64) throws(JournalError) -> Int {
        try beginCompaction(through: revision)
        var removed = 0
        while let progress = try continueCompaction(rows: 1 << 20) {
            removed = progress.removed
            if progress.isFinished { break }
        }
        return removed
    }

    /// The position `rows` records after `start`, or `end` if fewer lie below it.
    private func position(from start: Int64, after rows: Int, below end: Int64) throws(SQLiteError) -> Int64 {
        let statement = try database.prepare(
            "SELECT position FROM change_log WHERE position >= ?1 ORDER BY position LIMIT 1 OFFSET ?2")
        statement.bind(1, start)
        statement.bind(2, rows)
        guard try statement.step() else { return end }
        return min(statement.int(0), end)
    }

    /// The revision that `policy` allows compacting through now.
    public func compactionTarget(for policy: RetentionPolicy, nowMilliseconds: UInt64 = Journal.nowMilliseconds()) throws(JournalError) -> UInt64 {
        var target: UInt64 = 0
        if let keep = policy.revisions, headRevision > keep {
            target = headRevision - keep
        }
        if let age = policy.maxAgeMilliseconds, nowMilliseconds > age {
            target = max(target, try lastRevision(before: nowMilliseconds - age))
        }
        return min(target, headRevision)
    }
}
