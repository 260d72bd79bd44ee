import BeaconJournal

/// The daemon's group commit: the writes staged (applied to the store, waiting), the batch the
/// commit thread is journaling, and the journal itself. Loop thread only.
///
/// It owns the journal and the commit thread. While a batch is in flight the journal is the
/// commit thread's, so ``journal`` traps if the loop reaches for it then: the loop must first
/// take the batch's outcome (``waitForOutcome()``). What the loop may read at any time
/// (``epoch``, ``compactedRevision``, ``sizeInBytes``, ``isCompacting``) a commit never writes.
final class WritePipeline {
    private let storage: any JournalStore
    private let commits: CommitThread
    // The loop thread's alone: no dynamic exclusivity checks (each cost as much as the access).
    /// Writes applied to the store and waiting for the next batch.
    @exclusivity(unchecked) private(set) var staged: [StagedWrite] = []
    /// The batch the commit thread is journaling (or the loop, inline).
    @exclusivity(unchecked) private var committing: [StagedWrite] = []
    /// When the batch in flight was handed over (monotonic ns), and how long the last one took
    /// from its hand-over to its outcome (the metrics' commit latency).
    @exclusivity(unchecked) private var submittedAt: UInt64 = 0
    @exclusivity(unchecked) private(set) var lastCommitNanoseconds: UInt64 = 0
    /// Write ids of writes staged or committing, not yet remembered as committed.
    @exclusivity(unchecked) private(set) var pendingWriteIDs: Set<[UInt8]> = []

    /// What became of a batch.
    enum Outcome {
        /// Journaled: these writes are durable, in order.
        case committed([StagedWrite])
        /// Not journaled: the batch and every write staged behind it are undone, newest first.
        case failed([StagedWrite], JournalError)
    }

    /// Takes over `journal` and starts the commit thread; `onCommitted` runs on that thread
    /// after each batch (it wakes the loop).
    init(journal: any JournalStore, onCommitted: @escaping @Sendable () -> Void) {
        storage = journal
        commits = CommitThread(journal: journal, onCommitted: onCommitted)
    }

    /// The journal, for the loop's own reads and compaction steps: only while no batch is in flight.
    var journal: any JournalStore {
        precondition(!commits.inFlight, "the journal is the commit thread's while a batch is in flight")
        return storage
    }

    var epoch: UInt64 { storage.epoch }
    var compactedRevision: UInt64 { storage.compactedRevision }
    var sizeInBytes: UInt64 { storage.sizeInBytes }
    var isCompacting: Bool { storage.isCompacting }

    /// Adds a write, already applied to the store, to the next batch.
    func stage(_ write: consuming StagedWrite) {
        if let writeID = write.writeID { pendingWriteIDs.insert(writeID) }
        staged.append(write)
    }

    /// Hands what is staged to the commit thread if it is idle. With `inline`, a small batch is
    /// journaled here at once (the commit thread is idle, so the journal is the loop's).
    /// - Returns: the outcome of an inline commit.
    func submitIfIdle(inline: Bool, inlineLimit: Int) -> Outcome? {
        guard !commits.inFlight, !staged.isEmpty else { return nil }
        committing = staged
        staged.removeAll(keepingCapacity: true)
        submittedAt = StepPacer.monotonicNanoseconds()
        // Each write's own array of changes: one reference each, no copy of the changes.
        let changes = committing.map(\.changes)
        if inline && committing.count <= inlineLimit {
            return outcome(Result { () throws(JournalError) in try storage.append(contentsOf: changes) })
        }
        commits.submit(changes)
        return nil
    }

    /// The in-flight batch's outcome, if its commit has finished.
    func takeOutcomeIfReady() -> Outcome? {
        commits.takeResultIfReady().map(outcome)
    }

    /// Waits for the in-flight batch; `nil` if none was in flight.
    func waitForOutcome() -> Outcome? {
        commits.waitForResult().map(outcome)
    }

    private func outcome(_ result: Result<Void, JournalError>) -> Outcome {
        lastCommitNanoseconds = StepPacer.monotonicNanoseconds() &- submittedAt
        let batch = committing
        committing.removeAll(keepingCapacity: true)
        switch result {
        case .success:
            for index in batch.indices { if let writeID = batch[index].writeID { pendingWriteIDs.remove(writeID) } }
            return .committed(batch)
        case .failure(let error):
            let refused = batch + staged
            staged.removeAll(keepingCapacity: true)
            pendingWriteIDs.removeAll(keepingCapacity: true)
            return .failed(refused, error)
        }
    }

    /// Whether ``close()`` has run.
    private var isClosed = false

    /// Stops the commit thread (take any in-flight outcome first) and closes the journal; once.
    func close() {
        guard !isClosed else { return }
        isClosed = true
        commits.stop()
        storage.close()
    }
}
