import BeaconJournal
import BeaconProtocol
import BeaconSignals
import BeaconWire
import Foundation

/// What the graph knows of one mirrored key.
struct KeyState {
    /// The key's state, `nil` when it does not exist (or nothing is known yet).
    var kv: Beacon_V1_KeyValue?
    /// Whether the daemon's state has arrived at least once (or was loaded from the local journal).
    var synced = false
    /// Whether the state is the local journal's, not yet confirmed by the daemon.
    var cached = false
}

/// One mirrored key: its state as a signal, and the newest revision applied to it.
final class KeyRecord {
    let key: String
    let state = MutableSignal(KeyState(), equals: nil)
    var epoch: UInt64 = 0
    var revision: UInt64 = 0

    init(key: String) { self.key = key }
}

/// Every live key under one prefix, with ticks that tell readers something changed.
final class PrefixTable {
    let prefix: String
    private(set) var entries: [String: Beacon_V1_KeyValue] = [:]
    /// Bumped once per applied batch that changed an entry.
    let changes = MutableSignal<UInt64>(0)
    /// Bumped when keys appear or disappear.
    let membership = MutableSignal<UInt64>(0)
    /// Whether the daemon's state has arrived at least once (or was loaded from the local journal).
    let synced = MutableSignal(false)
    /// Whether the entries are the local journal's, not yet confirmed by the daemon.
    let cached = MutableSignal(false)
    var epoch: UInt64 = 0
    /// Every change at or below this revision is in `entries` (the last snapshot's revision).
    var floor: UInt64 = 0
    /// Revisions of deletions after `floor`, so that a late older write cannot bring a key back.
    private var tombstones: [String: UInt64] = [:]
    /// Typed views that keep decoded copies of the entries.
    var observers: [(String, Beacon_V1_KeyValue?) -> Void] = []

    init(prefix: String) { self.prefix = prefix }

    /// Applies one change of `key` at `revision` (`kv`, its state after the change; `nil` when
    /// the change removed it) where it is newer than what the table holds; returns whether
    /// anything and whether membership changed.
    func apply(_ key: String, revision: UInt64, kv: Beacon_V1_KeyValue?) -> (changed: Bool, membership: Bool) {
        guard revision > floor else { return (false, false) }
        if !tombstones.isEmpty, let deleted = tombstones[key], deleted >= revision { return (false, false) }
        if let kv {
            guard let previous = entries.updateValue(kv, forKey: key) else {
                if !tombstones.isEmpty { tombstones[key] = nil }
                for observer in observers { observer(key, kv) }
                return (true, true)
            }
            if previous.modRevision >= revision {  // a late older change: keep what was there
                entries[key] = previous
                return (false, false)
            }
            for observer in observers { observer(key, kv) }
            return (true, false)
        }
        tombstones[key] = revision
        guard entries.removeValue(forKey: key) != nil else { return (false, false) }
        for observer in observers { observer(key, nil) }
        return (true, true)
    }

    /// Replaces the entries by a snapshot at `revision`, keeping changes newer than it.
    func load(_ kvs: [Beacon_V1_KeyValue], epoch newEpoch: UInt64, revision: UInt64) -> (changed: Bool, membership: Bool) {
        var next: [String: Beacon_V1_KeyValue] = [:]
        next.reserveCapacity(kvs.count)
        for kv in kvs where kv.key.isUnder(prefix) { next[kv.key] = kv }
        if newEpoch == epoch {
            for (key, kv) in entries where kv.modRevision > revision { next[key] = kv }
            for (key, deleted) in tombstones where deleted > revision { next[key] = nil }
            tombstones = tombstones.filter { $0.value > revision }
        } else {
            tombstones = [:]
        }
        epoch = newEpoch
        floor = revision
        let membershipChanged = next.count != entries.count || next.keys.contains { entries[$0] == nil }
        var changed = membershipChanged
        for (key, kv) in next where entries[key] != kv {
            changed = true
            for observer in observers { observer(key, kv) }
        }
        for key in entries.keys where next[key] == nil {
            for observer in observers { observer(key, nil) }
        }
        entries = next
        return (changed, membershipChanged)
    }

    /// Forgets deletion revisions that no late change can undercut any more.
    func pruneTombstones(through revision: UInt64) {
        if tombstones.count > 1024 { tombstones = tombstones.filter { $0.value > revision } }
    }
}

/// The application side of a client: mirrored keys and prefixes as signals. It belongs to the
/// delivery context (a queue, the main actor, an actor) and is touched only there.
final class MirrorGraph {
    let connection = MutableSignal(ConnectionState.connecting)
    private(set) var records: [String: KeyRecord] = [:]
    private(set) var tables: [String: PrefixTable] = [:]
    private var epoch: UInt64 = 0
    /// Typed signals handed out, by key and Swift type, so that asking twice gives the same one.
    var signalCache: [String: AnyObject] = [:]
    /// What the local journal held at start: key states, and the followed prefixes' bookmarks.
    private var cachedStates: [String: Beacon_V1_KeyValue] = [:]
    private var cachedBookmarks: [String: UInt64] = [:]

    /// Takes the local journal's contents as the starting point of mirrors made later.
    func startFromCache(_ contents: MirrorCache.Contents) {
        guard contents.epoch != 0 else { return }
        epoch = contents.epoch
        cachedBookmarks = contents.bookmarks
        for row in contents.rows {
            if let kv = try? Beacon_V1_KeyValue(serializedBytes: row.record) { cachedStates[row.key] = kv }
        }
    }

    /// The record for `key`, and whether it was created now (then its prefix must be followed).
    func record(for key: String) -> (KeyRecord, isNew: Bool) {
        if let record = records[key] { return (record, false) }
        let record = KeyRecord(key: key)
        if cachedBookmarks.keys.contains(where: { key.isUnder($0) }) {
            // The local journal followed this key: its last known state (or absence) is kept.
            let kv = cachedStates[key]
            record.epoch = epoch
            record.revision = kv?.modRevision ?? 0
            record.state.set(KeyState(kv: kv, synced: true, cached: true))
        }
        records[key] = record
        return (record, true)
    }

    /// The table for `prefix`, and whether it was created now.
    func table(for prefix: String) -> (PrefixTable, isNew: Bool) {
        if let table = tables[prefix] { return (table, false) }
        let table = PrefixTable(prefix: prefix)
        if let bookmark = cachedBookmarks[prefix] {
            let kvs = cachedStates.filter { $0.key.isUnder(prefix) }.map(\.value)
            _ = table.load(kvs, epoch: epoch, revision: bookmark)
            table.synced.set(true)
            table.cached.set(true)
        }
        tables[prefix] = table
        return (table, true)
    }

    /// Applies one update from the I/O thread (inside the caller's batch).
    func apply(_ update: GraphUpdate) {
        switch update {
        case .release(let steps, let settled):
            for step in steps {
                switch step {
                case .revisions(let epoch, let events): apply(events, epoch: epoch, settled: settled)
                case .snapshot(let prefix, let epoch, let revision, let kvs): load(prefix: prefix, epoch: epoch, revision: revision, kvs: kvs)
                case .resumed(let prefix):
                    records[prefix]?.state.update { $0.synced = true; $0.cached = false }
                    tables[prefix]?.synced.set(true)
                    tables[prefix]?.cached.set(false)
                }
            }
        case .connection(let state): connection.set(state)
        case .completion: break  // run by the caller after the batch
        }
    }

    private func apply(_ events: [Beacon_V1_Event], epoch: UInt64, settled: UInt64) {
        guard epoch == self.epoch else { return }  // from before a new journal; snapshots follow
        var touched: [ObjectIdentifier: (PrefixTable, Bool)] = [:]
        for event in events {
            let key = event.change.key
            let revision = event.revision
            let kv = Beacon_V1_KeyValue(after: event)  // once, for the key's record and every table
            if !records.isEmpty, let record = records[key], record.epoch == epoch, revision > record.revision {
                record.revision = revision
                record.state.update { $0.kv = kv }
            }
            for table in tables.values where table.epoch == epoch && key.isUnder(table.prefix) {
                let result = table.apply(key, revision: revision, kv: kv)
                if result.changed {
                    let id = ObjectIdentifier(table)
                    touched[id] = (table, (touched[id]?.1 ?? false) || result.membership)
                }
            }
        }
        for (table, membership) in touched.values {
            table.changes.update { $0 &+= 1 }
            if membership { table.membership.update { $0 &+= 1 } }
            table.pruneTombstones(through: settled)
        }
    }

    private func load(prefix: String, epoch: UInt64, revision: UInt64, kvs: [Beacon_V1_KeyValue]) {
        self.epoch = epoch
        let underPrefix = records.values.filter { $0.key.isUnder(prefix) }
        if !underPrefix.isEmpty {
            let byKey = Dictionary(kvs.map { ($0.key, $0) }, uniquingKeysWith: { $1 })
            for record in underPrefix where record.epoch != epoch || revision >= record.revision {
                record.epoch = epoch
                record.revision = revision
                let kv = byKey[record.key]
                record.state.update { $0.kv = kv; $0.synced = true; $0.cached = false }
            }
        }
        for table in tables.values where table.prefix.isUnder(prefix) {
            guard table.epoch != epoch || revision >= table.floor else { continue }
            let result = table.load(kvs, epoch: epoch, revision: revision)
            if result.changed { table.changes.update { $0 &+= 1 } }
            if result.membership { table.membership.update { $0 &+= 1 } }
            table.synced.set(true)
            table.cached.set(false)
        }
    }
}
