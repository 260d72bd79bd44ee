extension Journal {
    /// Replaces everything this journal holds with another journal's state at `revision`, under
    /// that journal's `epoch`: a relay taking its upstream's snapshot (first sync, a new upstream
    /// epoch, or history the upstream compacted away).
    ///
    /// Afterwards the journal is as if it had been compacted through `revision`: its head and
    /// compacted revision are `revision`, the log holds each live key's last change (so that
    /// snapshots at the head read as they do after a compaction), and history below is gone.
    /// Appends continue above `revision` with the other journal's revisions.
    /// - Parameters:
    ///   - entries: the live keys at `revision`, as the other journal has them.
    ///   - scope: what of the other journal `entries` cover, named by the caller (a relay's
    ///     prefixes); kept as ``contentScope``.
    /// - Throws: ``JournalError``; the journal is unchanged then.
    public func replaceContents(epoch newEpoch: UInt64, revision: UInt64, entries: [JournalEntry], scope: UInt64) throws(JournalError) {
        precondition(newEpoch != 0, "an epoch is never 0")
        // A key's last change goes into the log at its own revision; keys sharing a revision (a
        // transaction's) take parts in key order.
        var byRevision: [UInt64: [JournalEntry]] = [:]
        for entry in entries where !entry.isDeleted {
            precondition(entry.modRevision <= revision, "a snapshot's entry is above its revision")
            byRevision[entry.modRevision, default: []].append(entry)
        }
        var chunks: [[JournalChange]] = []
        chunks.reserveCapacity(byRevision.count)
        for modRevision in byRevision.keys.sorted() {
            let keys = byRevision[modRevision]!.sorted { $0.key < $1.key }
            chunks.append(keys.enumerated().map { part, entry in
                JournalChange(revision: modRevision, part: UInt32(part), parts: UInt32(keys.count), kind: .put, key: entry.key,
                              value: entry.value, version: entry.version, createRevision: entry.createRevision,
                              expiresAtMilliseconds: entry.expiresAtMilliseconds, timestampMilliseconds: entry.modTimeMilliseconds)
            })
        }
        do {
            try inTransaction { () throws(SQLiteError) in
                try database.execute("DELETE FROM change_log; DELETE FROM state;")
                try changeLog.insert(contentsOf: chunks)
                for chunk in chunks {
                    for change in chunk { try saveState(change) }
                }
                let meta = try database.prepare("""
                    INSERT INTO meta(name, value) VALUES ('epoch', ?1), ('compacted_revision', ?2),
                      ('compaction_finished', ?2), ('state_revision', ?2), ('content_scope', ?3)
                    ON CONFLICT(name) DO UPDATE SET value = excluded.value
                    """)
                meta.bind(1, Int64(bitPattern: newEpoch))
                meta.bind(2, revision)
                meta.bind(3, Int64(bitPattern: scope))
                try meta.run()
            }
        } catch {
            throw JournalError(error, while: "cannot replace the journal's contents with a snapshot at \(revision)")
        }
        epoch = newEpoch
        headRevision = revision
        compactedRevision = revision
        stateRevision = revision
        contentScope = scope
        compaction = nil
        resetUnsavedChanges()
    }
}
