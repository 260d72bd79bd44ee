import BeaconJournal

/// The journal as the daemon uses it: what it reads, appends, compacts and copies. ``Journal``
/// (SQLite) is the one the daemon opens; a test may give it another — one that fails a commit
/// or fills up on demand — to see what the daemon does then, without root or a full disk.
///
/// Like ``Journal``, one thread at a time: the write pipeline hands it to the commit thread for
/// a batch and back to the loop.
package protocol JournalStore: AnyObject {
    /// The journal's epoch: a new one when its history was replaced.
    var epoch: UInt64 { get }
    /// The last revision journaled.
    var headRevision: UInt64 { get }
    /// History through this revision was compacted away.
    var compactedRevision: UInt64 { get }
    /// What a relay's journal copies of its upstream (nil on a primary's).
    var contentScope: UInt64? { get }
    /// The journal's size on disk.
    var sizeInBytes: UInt64 { get }
    /// Whether a compaction is under way.
    var isCompacting: Bool { get }

    /// Journals whole revisions, in order, in one transaction; nothing of them on failure.
    func append(contentsOf chunks: [[JournalChange]]) throws(JournalError)
    /// Every key's latest entry, tombstones included.
    func loadState(_ body: (JournalEntry) -> Void) throws(JournalError)
    /// Write ids of the last `revisions` revisions, oldest first.
    func recentWriteIDs(revisions: UInt64) throws(JournalError) -> [(writeID: [UInt8], revision: UInt64)]
    /// Up to `limit` changes under `prefix` (or to the key `prefix`, `exact`) from `from` through `to`.
    func changes(prefix: String, exact: Bool, from: UInt64, to: UInt64, limit: Int) throws(JournalError)
        -> (changes: [JournalChange], more: Bool)
    /// The live keys under `prefix` as they were at `revision`.
    func snapshot(prefix: String, at revision: UInt64, startAfter: String, limit: Int) throws(JournalError) -> [JournalEntry]
    /// The last revision at or below `revision` that changed a key under `prefix`.
    func lastRevision(prefix: String, atOrBelow revision: UInt64) throws(JournalError) -> UInt64
    /// Replaces history and state with `entries` at `revision` of a new epoch (a relay's resync).
    func replaceContents(epoch newEpoch: UInt64, revision: UInt64, entries: [JournalEntry], scope: UInt64) throws(JournalError)
    /// The revision `policy` allows compacting through, by wall time `nowMilliseconds`.
    func compactionTarget(for policy: RetentionPolicy, nowMilliseconds: UInt64) throws(JournalError) -> UInt64
    /// Starts compacting through `revision`; false if there is nothing to compact.
    func beginCompaction(through revision: UInt64) throws(JournalError) -> Bool
    /// Removes up to `rows` compacted rows; nil when no compaction is under way.
    func continueCompaction(rows: Int) throws(JournalError) -> CompactionProgress?
    /// Starts a consistent copy of the journal into `path`.
    func beginBackup(to path: String) throws(JournalError) -> JournalBackup
    /// Closes the journal.
    func close()
}

extension Journal: JournalStore {}

extension JournalStore {
    /// Every key's latest entry, tombstones included.
    func loadState() throws(JournalError) -> [JournalEntry] {
        var entries: [JournalEntry] = []
        try loadState { entries.append($0) }
        return entries
    }
}
