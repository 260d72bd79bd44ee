import BeaconDaemon
import BeaconJournal
import BeaconLocking
import Dispatch

/// A real journal (SQLite, in a file) whose commits a test can make fail, as a full disk or an
/// unwritable file would: what the daemon does then — undo, refuse, back off, recover — is seen
/// without root, a small tmpfs or a filled disk.
///
/// Everything else goes to the journal underneath unchanged.
public final class FaultInjectingJournal: JournalStore {
    /// The journal underneath.
    public let journal: Journal
    private let faults = Locked<(failing: JournalError?, commits: Int, failed: Int)>((nil, 0, 0))

    /// Wraps `journal`.
    public init(_ journal: Journal) {
        self.journal = journal
    }

    /// Makes every commit from now on fail with `error` (nil: commit again).
    public func failCommits(with error: JournalError?) {
        faults.withLock { $0.failing = error }
    }

    /// A full disk, as SQLite reports it.
    public static let diskFull = JournalError(code: .full, message: "database or disk is full (injected)")

    /// How many commits succeeded, and how many were made to fail.
    public var commitCounts: (succeeded: Int, failed: Int) {
        faults.withLock { ($0.commits, $0.failed) }
    }

    /// Holds every commit from now on, on whichever thread makes it, until ``releaseCommits()``:
    /// a commit that takes as long as the test needs (a slow disk's, a checkpoint's).
    public func holdCommits() {
        gate.withLock { $0 = DispatchSemaphore(value: 0) }
    }

    /// Lets held commits, and later ones, go on.
    public func releaseCommits() {
        let held = gate.withLock { gate -> DispatchSemaphore? in
            defer { gate = nil }
            return gate
        }
        held?.signal()
    }

    /// Commits waiting at the gate now.
    public var heldCommits: Int { waiting.withLock { $0 } }

    private let gate = Locked<DispatchSemaphore?>(nil)
    private let waiting = Locked(0)

    public func append(contentsOf chunks: [[JournalChange]]) throws(JournalError) {
        if let held = gate.withLock({ $0 }) {
            waiting.withLock { $0 += 1 }
            held.wait()
            held.signal()  // the next commit held by the same gate goes on too
            waiting.withLock { $0 -= 1 }
        }
        let failing = faults.withLock { state -> JournalError? in
            if state.failing != nil { state.failed += 1 } else { state.commits += 1 }
            return state.failing
        }
        if let failing { throw failing }
        try journal.append(contentsOf: chunks)
    }

    public var epoch: UInt64 { journal.epoch }
    public var headRevision: UInt64 { journal.headRevision }
    public var compactedRevision: UInt64 { journal.compactedRevision }
    public var contentScope: UInt64? { journal.contentScope }
    public var sizeInBytes: UInt64 { journal.sizeInBytes }
    public var isCompacting: Bool { journal.isCompacting }

    public func loadState(_ body: (JournalEntry) -> Void) throws(JournalError) { try journal.loadState(body) }

    public func recentWriteIDs(revisions: UInt64) throws(JournalError) -> [(writeID: [UInt8], revision: UInt64)] {
        try journal.recentWriteIDs(revisions: revisions)
    }

    public func changes(prefix: String, exact: Bool, from: UInt64, to: UInt64, limit: Int) throws(JournalError)
        -> (changes: [JournalChange], more: Bool) {
        try journal.changes(prefix: prefix, exact: exact, from: from, to: to, limit: limit)
    }

    public func snapshot(prefix: String, at revision: UInt64, startAfter: String, limit: Int) throws(JournalError) -> [JournalEntry] {
        try journal.snapshot(prefix: prefix, at: revision, startAfter: startAfter, limit: limit)
    }

    public func lastRevision(prefix: String, atOrBelow revision: UInt64) throws(JournalError) -> UInt64 {
        try journal.lastRevision(prefix: prefix, atOrBelow: revision)
    }

    public func replaceContents(epoch newEpoch: UInt64, revision: UInt64, entries: [JournalEntry], scope: UInt64) throws(JournalError) {
        try journal.replaceContents(epoch: newEpoch, revision: revision, entries: entries, scope: scope)
    }

    public func compactionTarget(for policy: RetentionPolicy, nowMilliseconds: UInt64) throws(JournalError) -> UInt64 {
        try journal.compactionTarget(for: policy, nowMilliseconds: nowMilliseconds)
    }

    public func beginCompaction(through revision: UInt64) throws(JournalError) -> Bool {
        try journal.beginCompaction(through: revision)
    }

    public func continueCompaction(rows: Int) throws(JournalError) -> CompactionProgress? {
        try journal.continueCompaction(rows: rows)
    }

    public func beginBackup(to path: String) throws(JournalError) -> JournalBackup {
        try journal.beginBackup(to: path)
    }

    public func close() { journal.close() }
}
