import Foundation

/// A copy of a journal under way (``Journal/beginBackup(to:)``), made a few pages at a time.
///
/// Owned by the thread that owns the journal: it steps the copy through the journal's own
/// connection. A backup dropped or cancelled before it is done deletes its file.
public final class JournalBackup {
    /// The copy's file.
    public let path: String
    /// The epoch the finished copy carries (not the journal's).
    public let epoch: UInt64
    /// The journal copied; kept open while the copy steps through its connection.
    private let journal: Journal
    private var run: SQLiteBackup?
    /// Whether the copy is complete, with its own epoch.
    public private(set) var isDone = false

    init(journal: Journal, run: SQLiteBackup, path: String, epoch: UInt64) {
        self.journal = journal
        self.run = run
        self.path = path
        self.epoch = epoch
    }

    deinit {
        if !isDone { cancel() }
    }

    /// Copies up to `pages` more pages of the journal (-1: all that remain). Once done, the copy
    /// holds every revision the journal committed before this call (its `headRevision` now).
    /// - Returns: whether the copy is complete.
    /// - Throws: ``JournalError``; the copy is deleted then.
    public func step(pages: Int) throws(JournalError) -> Bool {
        guard let run, !isDone else { return isDone }
        do {
            guard try run.step(pages: Int32(clamping: pages)) else { return false }
            self.run = nil
            let copy = try SQLiteDatabase(path: path, create: false)
            defer { copy.close() }
            try copy.execute("UPDATE meta SET value = \(epoch) WHERE name = 'epoch'")
        } catch {
            cancel()
            throw JournalError(error, while: "cannot back up the journal")
        }
        isDone = true
        return true
    }

    /// Pages still to copy and pages in all, as of the last step (0 and 0 once done).
    public var pages: (remaining: Int, total: Int) { run?.pages ?? (0, 0) }

    /// Stops the copy and deletes its file. Idempotent.
    public func cancel() {
        run?.finish()
        run = nil
        if !isDone { try? FileManager.default.removeItem(atPath: path) }
    }
}
