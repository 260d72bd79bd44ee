import BeaconJournal
import BeaconLocking
import Foundation

/// Commits batches of journal changes on a thread of its own, so that the loop thread can
/// decode and validate the next batch meanwhile (the loop's group commit, pipelined).
///
/// One batch is in flight at a time. While it is, only this thread touches the journal; the
/// loop uses the journal itself only after ``waitForResult()`` (reads, compaction, shutdown).
final class CommitThread: @unchecked Sendable {
    private struct Slot {
        /// Whole revisions, in order, as the writes' own arrays of changes.
        var batch: [[JournalChange]]?
        var result: Result<Void, JournalError>?
        var stopping = false
    }

    private let journal: any JournalStore
    private let slot = Locked(Slot())
    private let work = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private let onCommitted: @Sendable () -> Void
    /// Whether a batch was submitted and its result not yet taken (loop thread only).
    private(set) var inFlight = false

    /// Starts the thread; `onCommitted` runs on it after each batch (it wakes the loop).
    init(journal: any JournalStore, onCommitted: @escaping @Sendable () -> Void) {
        self.journal = journal
        self.onCommitted = onCommitted
        let thread = Thread { [self] in run() }
        thread.name = "beacond-commit"
        thread.start()
    }

    private func run() {
        nameCurrentThread("beacond-commit")
        defer { finished.signal() }
        while true {
            work.wait()
            let batch = slot.withLock { slot -> [[JournalChange]]? in
                defer { slot.batch = nil }
                return slot.stopping ? nil : slot.batch
            }
            guard let batch else { return }
            let result = Result { () throws(JournalError) in try journal.append(contentsOf: batch) }
            slot.withLock { $0.result = result }
            done.signal()
            onCommitted()
        }
    }

    /// Hands `batch` (whole revisions, in order, in arrays split anywhere) to the thread.
    /// Nothing may be in flight.
    func submit(_ batch: [[JournalChange]]) {
        precondition(!inFlight, "one batch in flight at a time")
        inFlight = true
        slot.withLock { $0.batch = batch }
        work.signal()
    }

    /// The in-flight batch's result if it is ready, without waiting.
    func takeResultIfReady() -> Result<Void, JournalError>? {
        guard inFlight, done.wait(timeout: .now()) == .success else { return nil }
        return take()
    }

    /// Waits for the in-flight batch and returns its result; `nil` if nothing was in flight.
    func waitForResult() -> Result<Void, JournalError>? {
        guard inFlight else { return nil }
        done.wait()
        return take()
    }

    private func take() -> Result<Void, JournalError> {
        inFlight = false
        return slot.withLock { slot in
            defer { slot.result = nil }
            return slot.result!
        }
    }

    /// Stops the thread after any in-flight batch; the caller must have taken its result.
    func stop() {
        slot.withLock { $0.stopping = true }
        work.signal()
        finished.wait()
    }
}
