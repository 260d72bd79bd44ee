import BeaconJournal
import BeaconProtocol
import Foundation

/// The client's side of ``MirrorCache``: what was loaded at start, and what the I/O thread has
/// applied since and not yet saved. Owned by the I/O thread after start.
final class LocalJournal: @unchecked Sendable {
    /// What the cache held when the client started.
    let contents: MirrorCache.Contents
    private var cache: MirrorCache?
    private var rows: [String: MirrorCache.Row] = [:]
    private var snapshots: [String: UInt64] = [:]
    private var epoch: UInt64

    init(path: String) throws(BeaconError) {
        do {
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty { try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) }
            let cache = try MirrorCache(path: path)
            self.cache = cache
            contents = try cache.load()
        } catch {
            throw BeaconError(.localJournal, "cannot open the local journal \(path): \(error)")
        }
        epoch = contents.epoch
    }

    var hasPending: Bool { !rows.isEmpty || !snapshots.isEmpty }

    /// Records released changes.
    func record(_ events: [Beacon_V1_Event], epoch: UInt64) {
        adopt(epoch)
        for event in events {
            let record: [UInt8] = Beacon_V1_KeyValue(after: event).flatMap { try? $0.serializedBytes() } ?? []
            keep(MirrorCache.Row(key: event.change.key, revision: event.revision, record: record))
        }
    }

    /// Records the state under `prefix` at `revision`.
    func record(snapshot kvs: [Beacon_V1_KeyValue], prefix: String, revision: UInt64, epoch: UInt64) {
        adopt(epoch)
        // Pending rows under the prefix at or below the snapshot are superseded by it.
        rows = rows.filter { !($0.key.isUnder(prefix) && $0.value.revision <= revision) }
        snapshots[prefix] = max(snapshots[prefix] ?? 0, revision)
        for kv in kvs {
            keep(MirrorCache.Row(key: kv.key, revision: kv.modRevision, record: (try? kv.serializedBytes()) ?? []))
        }
    }

    /// Saves what is pending with the bookmarks; after a failure the cache is no longer used.
    func save(bookmarks: [String: UInt64]) {
        guard let cache, epoch != 0 else { return }
        do {
            try cache.save(epoch: epoch, rows: Array(rows.values), snapshots: snapshots, bookmarks: bookmarks)
            rows.removeAll(keepingCapacity: true)
            snapshots.removeAll()
        } catch {
            cache.close()
            self.cache = nil
        }
    }

    func close() {
        cache?.close()
        cache = nil
    }

    private func keep(_ row: MirrorCache.Row) {
        if let existing = rows[row.key], existing.revision >= row.revision { return }
        rows[row.key] = row
    }

    /// A new journal epoch makes everything pending from the old one meaningless.
    private func adopt(_ newEpoch: UInt64) {
        guard newEpoch != epoch else { return }
        rows.removeAll()
        snapshots.removeAll()
        epoch = newEpoch
    }
}
