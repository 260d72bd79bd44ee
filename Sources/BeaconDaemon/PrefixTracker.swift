import BeaconJournal
import BeaconProtocol

/// The prefixes the daemon sequences: those subscribed on the publish socket, and those named
/// by snapshot and delta requests (for a lease, which closes the subscribe/snapshot race).
///
/// For each tracked prefix it knows the last revision that touched a key under it, which every
/// diff, commit marker and heartbeat carries so that a subscriber of only that prefix can tell
/// whether it missed anything (proto/PROTOCOL.md, "Sequencing").
struct PrefixTracker {
    struct Tracked {
        var lastRevision: UInt64
        /// Subscriptions to the prefix on the publish socket now.
        var subscribers: Int
        var leaseUntilMilliseconds: UInt64
    }

    private(set) var tracked: [String: Tracked] = [:]
    /// The byte lengths of the tracked prefixes: with many tracked, a key's prefixes are looked
    /// up by these lengths instead of every tracked prefix being compared with the key. Worked
    /// out again when needed after prefixes came or went.
    private var prefixLengths: Set<Int> = []
    private var prefixLengthsStale = false
    /// Leases by holder (a peer): prefix → until (Unix ms), for ``leases(of:)``.
    private var leasesByHolder: [String: [String: UInt64]] = [:]

    /// Whether `prefix` is sequenced.
    func isTracked(_ prefix: String) -> Bool { tracked[prefix] != nil }

    /// Whether no prefix is sequenced (then diffs carry no marks).
    var isEmpty: Bool { tracked.isEmpty }

    /// Counts a subscriber of `prefix` and tracks it, with `initial` as its last revision if new.
    mutating func subscribe(_ prefix: String, initial: () -> UInt64) {
        if tracked[prefix] == nil {
            tracked[prefix] = Tracked(lastRevision: initial(), subscribers: 1, leaseUntilMilliseconds: 0)
            prefixLengthsStale = true
        } else {
            tracked[prefix]!.subscribers += 1
        }
    }

    /// A subscriber of `prefix` left; after the last, tracking continues while a lease holds.
    mutating func unsubscribe(_ prefix: String, nowMilliseconds: UInt64) {
        guard var item = tracked[prefix] else { return }
        item.subscribers = max(item.subscribers - 1, 0)
        tracked[prefix] = item.subscribers > 0 || item.leaseUntilMilliseconds > nowMilliseconds ? item : nil
        prefixLengthsStale = true
    }

    /// Starts every tracked prefix over at `revision` (a relay's journal was replaced by its
    /// upstream's state there): a subscriber behind it repairs, and finds the history gone.
    mutating func restart(at revision: UInt64) {
        for prefix in Array(tracked.keys) { tracked[prefix]!.lastRevision = revision }
    }

    /// Forgets every subscriber (the publish socket was opened anew); leases stay.
    mutating func resetSubscriptions() {
        for prefix in Array(tracked.keys) { tracked[prefix]!.subscribers = 0 }
    }

    /// Prefixes `holder` has leases on (some may have run out since the last ``expireLeases(nowMilliseconds:)``).
    func leases(of holder: String) -> Int { leasesByHolder[holder]?.count ?? 0 }

    /// Tracks `prefix` at least until `until` for `holder`, unless the holder has `limit` other
    /// leases (0: no limit). Returns the prefix's last revision either way, and whether it leased.
    mutating func lease(_ prefix: String, until: UInt64, holder: String, limit: Int,
                        initial: () -> UInt64) -> (revision: UInt64, leased: Bool) {
        var held = leasesByHolder[holder] ?? [:]
        if limit > 0, held[prefix] == nil, held.count >= limit {
            return (tracked[prefix]?.lastRevision ?? initial(), false)
        }
        held[prefix] = max(held[prefix] ?? 0, until)
        leasesByHolder[holder] = held
        return (lease(prefix, until: until, initial: initial), true)
    }

    /// Tracks `prefix` at least until `until` and returns its last revision.
    mutating func lease(_ prefix: String, until: UInt64, initial: () -> UInt64) -> UInt64 {
        if var item = tracked[prefix] {
            item.leaseUntilMilliseconds = max(item.leaseUntilMilliseconds, until)
            tracked[prefix] = item
            return item.lastRevision
        }
        let item = Tracked(lastRevision: initial(), subscribers: 0, leaseUntilMilliseconds: until)
        tracked[prefix] = item
        prefixLengthsStale = true
        return item.lastRevision
    }

    /// Stops tracking prefixes with no subscriber whose lease has run out.
    mutating func expireLeases(nowMilliseconds: UInt64) {
        tracked = tracked.filter { $0.value.subscribers > 0 || $0.value.leaseUntilMilliseconds > nowMilliseconds }
        prefixLengthsStale = true
        leasesByHolder = leasesByHolder.compactMapValues { held in
            let live = held.filter { $0.value > nowMilliseconds }
            return live.isEmpty ? nil : live
        }
    }

    /// Marks for one revision (both empty when nothing is tracked): per change, the marks of the tracked prefixes its key starts with,
    /// and the marks of every tracked prefix the revision touched. Advances those prefixes.
    mutating func record(revision: UInt64, keys: some RandomAccessCollection<String>)
        -> (perChange: [[Beacon_V1_PrefixMark]], touched: [Beacon_V1_PrefixMark]) {
        if tracked.isEmpty { return ([], []) }
        if keys.count == 1 && tracked.count <= Self.scanLimit {
            let marks = recordOne(revision: revision, key: keys.first!)
            return ([marks], marks.count > 1 ? marks.sorted { $0.prefix < $1.prefix } : marks)
        }
        var matches: [[String]] = []
        matches.reserveCapacity(keys.count)
        var counts: [String: UInt32] = [:]
        let scan = tracked.count <= Self.scanLimit
        if !scan && prefixLengthsStale {
            prefixLengths = Set(tracked.keys.map(\.utf8.count))
            prefixLengthsStale = false
        }
        for key in keys {
            var here: [String] = []
            if scan {
                for prefix in tracked.keys where key.isUnder(prefix) { here.append(prefix) }
            } else {
                let utf8 = key.utf8
                for length in prefixLengths where length <= utf8.count {
                    // A length inside a character decodes to U+FFFD: checked byte for byte below.
                    let prefix = String(decoding: utf8.prefix(length), as: UTF8.self)
                    if tracked[prefix] != nil, key.isUnder(prefix) { here.append(prefix) }
                }
            }
            for prefix in here { counts[prefix, default: 0] += 1 }
            matches.append(here)
        }
        var marks: [String: Beacon_V1_PrefixMark] = [:]
        for (prefix, parts) in counts {
            var mark = Beacon_V1_PrefixMark()
            mark.prefix = prefix
            mark.previousRevision = tracked[prefix]!.lastRevision
            mark.parts = parts
            marks[prefix] = mark
            tracked[prefix]!.lastRevision = revision
        }
        let perChange = matches.map { $0.map { marks[$0]! } }
        return (perChange, marks.values.sorted { $0.prefix < $1.prefix })
    }

    /// Up to this many tracked prefixes, a key is compared with each; past it, looked up by length.
    private static let scanLimit = 16

    /// ``record(revision:keys:)`` for a revision of one change with few prefixes tracked (most
    /// writes): the marks in one pass, with no table of counts.
    private mutating func recordOne(revision: UInt64, key: String) -> [Beacon_V1_PrefixMark] {
        var marks: [Beacon_V1_PrefixMark] = []
        var index = tracked.startIndex
        while index != tracked.endIndex {
            if key.isUnder(tracked.keys[index]) {
                var mark = Beacon_V1_PrefixMark()
                mark.prefix = tracked.keys[index]
                mark.previousRevision = tracked.values[index].lastRevision
                mark.parts = 1
                marks.append(mark)
                tracked.values[index].lastRevision = revision
            }
            tracked.formIndex(after: &index)
        }
        return marks
    }

    /// Every tracked prefix with its last revision, for heartbeats.
    var heads: [Beacon_V1_PrefixHead] {
        tracked.map { prefix, item in
            var head = Beacon_V1_PrefixHead()
            head.prefix = prefix
            head.revision = item.lastRevision
            return head
        }.sorted { $0.prefix < $1.prefix }
    }
}
