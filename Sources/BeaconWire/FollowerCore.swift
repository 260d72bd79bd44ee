import BeaconProtocol

/// The subscriber rules of proto/PROTOCOL.md §6 for a set of followed prefixes, without I/O.
///
/// Both clients drive it: feed it every publication, ask it for the fetches it needs
/// (``nextFetch()``), hand it their answers (``complete(_:with:)``), and apply what it releases
/// (``takeRelease()``) in order. Whatever path a change takes — live, repaired by a delta,
/// replaced by a snapshot, resumed from a bookmark — what it releases keeps the guarantees:
///
/// - **whole revisions, in order**: a revision leaves once every followed prefix it touched
///   has all of its parts (its commit marker was checked by every follower, or every follower
///   is complete past it);
/// - **snapshots as cuts** (``Mode/mirror``): a snapshot of one prefix at revision S leaves
///   together with every held revision up to S, and only once every other mirror is complete
///   through S (a follower behind S is caught up with a delta), so that a snapshot never shows
///   one side of a transaction beside the other side's older state;
/// - **never backwards**: a change that was missed and repaired after later revisions left is
///   released as a late fill, which the receiver applies per key only where it is newer.
public struct FollowerCore: Sendable {
    /// How the followers' state is used.
    public enum Mode: Sendable {
        /// Mirrors of state: a repair may be answered with a snapshot when that is smaller, and
        /// releases are consistent across every followed prefix.
        case mirror
        /// Streams of changes: every change is released; a snapshot only where history is gone.
        case stream
        /// A copy that republishes what it follows (a relay): every change, and each revision
        /// only once every followed prefix is known to be complete through it, so that releases
        /// are strictly in revision order (no late fills) and whole across all prefixes. A
        /// follower that has not confirmed a revision another one released is caught up with a
        /// delta; nothing is released before every follower has state; a refused follower holds
        /// everything back until it is let in.
        case ordered
    }

    /// A request the core needs answered.
    public struct Fetch: Sendable, Equatable {
        public enum Kind: Sendable, Equatable {
            case snapshot
            case delta(since: UInt64, snapshotIfSmaller: Bool)
        }

        public let prefix: String
        public let kind: Kind

        public init(prefix: String, kind: Kind) {
            self.prefix = prefix
            self.kind = kind
        }

        /// The request to send.
        public var request: Beacon_V1_Request.OneOf_Op {
            switch kind {
            case .snapshot:
                return .snapshot(.with { $0.prefix = prefix })
            case .delta(let since, let snapshotIfSmaller):
                return .delta(.with {
                    $0.prefix = prefix
                    $0.sinceRevision = since
                    $0.snapshotIfSmaller = snapshotIfSmaller
                })
            }
        }
    }

    /// One released step, applied in order.
    public enum Step: Sendable {
        /// Whole revisions (and late fills) of one epoch, in order.
        case revisions(epoch: UInt64, events: [Beacon_V1_Event])
        /// The state under `prefix` at `revision`: replaces what was known of it.
        case snapshot(prefix: String, epoch: UInt64, revision: UInt64, kvs: [Beacon_V1_KeyValue])
        /// A follower that resumed from a bookmark is now confirmed by the daemon.
        case resumed(prefix: String)
    }

    /// What ``takeRelease()`` hands on.
    public struct Release: Sendable {
        public var steps: [Step]
        /// No change at or below this revision can still arrive late.
        public var settled: UInt64
    }

    /// Counters of what the core did.
    public struct Statistics: Sendable, Equatable {
        /// Gaps repaired with a delta (not counting first syncs, resumes and catch-ups).
        public var repairs = 0
        /// States replaced by a snapshot after the first.
        public var resyncs = 0
        /// Snapshots received.
        public var snapshots = 0
        /// Followers resumed from a bookmark with a delta.
        public var resumes = 0
        /// Revisions released.
        public var revisions = 0

        public init() {}
    }

    private enum Due: Equatable {
        /// The first sync, a resync, or a snapshot after an epoch change.
        case snapshot
        /// A delta from the follower's position: a resume, a repair or a catch-up.
        case delta(Reason)

        enum Reason { case resume, repair, catchUp }
    }

    private struct Follower {
        var sequencer: PrefixSequencer
        /// Whether the follower has state (a snapshot, a resume bookmark, a stream's start).
        var hasState: Bool
        var due: Due?
        /// The daemon refused its fetch (access rules): skipped until ``retryRefused()``.
        var refused = false
        /// Resumed from a bookmark and not yet confirmed.
        var resuming = false
        /// Its state is from an epoch the journal left: nothing is released until it resyncs.
        var staleEpoch = false

        var isLive: Bool { hasState && due == nil && !refused }

        /// Whether this follower, of `prefix`, covers `key` and has not applied `revision` yet
        /// (a refused follower shows nothing, so it is never behind).
        func isBehind(_ revision: UInt64, forKey key: String, under prefix: String) -> Bool {
            !refused && key.isUnder(prefix) && !(isLive && sequencer.through >= revision)
        }
    }

    private struct HeldRevision {
        let revision: UInt64
        /// The revision's number of changes (all keys, not only followed ones).
        let parts: UInt32
        /// The followed parts, in part order.
        var events: [Beacon_V1_Event]
        /// Its commit marker was checked by every live follower.
        var markerSeen = false
    }

    private struct PendingSnapshot {
        let prefix: String
        let revision: UInt64
        let kvs: [Beacon_V1_KeyValue]
    }

    public let mode: Mode
    /// The epoch of what was released (0 before anything was).
    public private(set) var epoch: UInt64
    /// The highest revision released in ``epoch``.
    public private(set) var releasedThrough: UInt64 = 0
    public private(set) var statistics = Statistics()

    private var followers: [String: Follower] = [:]
    /// The distinct byte lengths of followed prefixes, ascending.
    private var prefixLengths: [Int] = []
    private var held: [HeldRevision] = []
    private var pendingSnapshots: [PendingSnapshot] = []
    /// Whole revisions (and late fills) ready to leave, in order, ahead of everything held.
    private var ready: [Beacon_V1_Event] = []
    /// The newest revision the live stream has reached in ``epoch`` (a diff, a commit marker, a
    /// heartbeat's head): every publication up to it has arrived or was dropped.
    private var streamHead: UInt64 = 0
    /// False only while no follower can have a fetch due (checked on every publication).
    private var mayHaveDue = false
    /// Followers confirmed since the last release.
    private var resumed: [String] = []

    /// A core following nothing yet; `epoch` is the epoch of state the caller already holds
    /// (a local journal's), or 0.
    public init(mode: Mode, epoch: UInt64 = 0) {
        self.mode = mode
        self.epoch = epoch
    }

    // MARK: Followers

    /// Follows `prefix`: first with a snapshot, or — given the revision a saved state is
    /// complete through and its epoch — with a delta after it.
    public mutating func follow(_ prefix: String, resumingAfter revision: UInt64? = nil, epoch resumeEpoch: UInt64 = 0) {
        guard followers[prefix] == nil else { return }
        if let revision {
            var follower = Follower(sequencer: PrefixSequencer(prefix: prefix, epoch: resumeEpoch, through: revision),
                                    hasState: true, due: .delta(.resume))
            follower.resuming = true
            followers[prefix] = follower
        } else {
            followers[prefix] = Follower(sequencer: PrefixSequencer(prefix: prefix), hasState: false, due: .snapshot)
        }
        mayHaveDue = true
        recomputeLengths()
    }

    /// Stops following `prefix`.
    public mutating func unfollow(_ prefix: String) {
        guard followers.removeValue(forKey: prefix) != nil else { return }
        pendingSnapshots.removeAll { $0.prefix == prefix }
        recomputeLengths()
    }

    /// The followed prefixes.
    public var prefixes: [String] { Array(followers.keys) }
    /// Whether `prefix` is followed.
    public func isFollowing(_ prefix: String) -> Bool { followers[prefix] != nil }

    /// Whether some follower has no state yet or waits for a fetch.
    public var isSyncing: Bool { followers.values.contains { !$0.hasState || $0.due != nil } }

    /// Whether a fetch is due (refused followers aside).
    public var hasDueFetch: Bool {
        mayHaveDue && followers.values.contains { $0.due != nil && !$0.refused }
    }

    /// The revision `prefix` is complete through, if it is followed and has state.
    public func through(_ prefix: String) -> UInt64? {
        guard let follower = followers[prefix], follower.hasState else { return nil }
        return follower.sequencer.through
    }

    /// Whether every change through `revision` under the followed prefixes that cover `key` was
    /// released (read-your-writes).
    public func hasReleased(_ revision: UInt64, forKey key: String) -> Bool {
        if !ready.isEmpty { return false }
        if held.first.map({ $0.revision <= revision }) ?? false { return false }
        if pendingSnapshots.first.map({ $0.revision <= revision }) ?? false { return false }
        return !followers.contains { prefix, follower in follower.isBehind(revision, forKey: key, under: prefix) }
    }

    /// The followed prefixes covering `key` that are not yet complete through `revision`.
    public func lagging(_ key: String, behind revision: UInt64) -> [String] {
        followers.compactMap { prefix, follower in follower.isBehind(revision, forKey: key, under: prefix) ? prefix : nil }
    }

    /// Asks for a repair of `prefix` (a writer that waited too long for its diffs).
    public mutating func repair(_ prefix: String) {
        guard let follower = followers[prefix], follower.isLive else { return }
        markDue(prefix, .delta(.repair))
    }

    /// Makes refused followers ask again (access rules may have changed).
    public mutating func retryRefused() {
        for prefix in followers.keys where followers[prefix]!.refused { followers[prefix]!.refused = false }
        mayHaveDue = true
    }

    /// For each live follower, the revision its released state is complete through: what a
    /// saved copy of the released state may resume from.
    public func bookmarks() -> [String: UInt64] {
        var floor = UInt64.max
        if let first = held.first { floor = first.revision - 1 }
        if let first = pendingSnapshots.first { floor = min(floor, first.revision - 1) }
        var bookmarks: [String: UInt64] = [:]
        for (prefix, follower) in followers where follower.isLive && !follower.resuming {
            guard !pendingSnapshots.contains(where: { $0.prefix == prefix }) else { continue }
            bookmarks[prefix] = min(follower.sequencer.through, floor)
        }
        return bookmarks
    }

    // MARK: Publications

    /// Applies the rules to one diff.
    public mutating func receive(_ diff: Beacon_V1_Diff) {
        let event = diff.event
        let revision = event.revision
        if diff.epoch == epoch { streamHead = max(streamHead, revision) }
        if diff.epoch == epoch, !held.isEmpty, held.contains(where: { !$0.markerSeen && $0.parts > 1 && $0.revision < revision }) {
            repairAll()  // the stream moved past a revision whose commit marker was lost
        }
        let fullKey = event.change.key
        let key = fullKey.utf8
        for length in prefixLengths {
            guard length <= key.count else { break }
            let prefix = length == key.count ? fullKey : String(Substring(key.prefix(length)))
            // One lookup; the follower is changed where it is stored.
            guard let index = followers.index(forKey: prefix), followers.values[index].isLive else { continue }
            act(on: followers.values[index].sequencer.accept(diff), for: prefix)
        }
    }

    /// Applies the rules to one commit marker.
    public mutating func receive(_ marker: Beacon_V1_CommitMarker) {
        if marker.epoch == epoch { streamHead = max(streamHead, marker.revision) }
        if marker.epoch == epoch, held.contains(where: { !$0.markerSeen && $0.parts > 1 && $0.revision < marker.revision }) {
            repairAll()
        }
        for prefix in followers.keys where followers[prefix]!.isLive {
            act(on: followers[prefix]!.sequencer.accept(marker), for: prefix)
        }
        if let index = held.firstIndex(where: { $0.revision == marker.revision }) { held[index].markerSeen = true }
    }

    /// Applies the rules to one heartbeat.
    public mutating func receive(_ heartbeat: Beacon_V1_Heartbeat) {
        if heartbeat.epoch == epoch { streamHead = max(streamHead, heartbeat.headRevision) }
        for prefix in followers.keys where followers[prefix]!.isLive {
            act(on: followers[prefix]!.sequencer.accept(heartbeat), for: prefix)
        }
        if heartbeat.epoch == epoch,
           held.contains(where: { !$0.markerSeen && $0.parts > 1 && $0.revision <= heartbeat.headRevision }) {
            repairAll()  // a revision published before this heartbeat is still incomplete
        }
    }

    /// Applies the rules to any publication.
    public mutating func receive(_ publication: WireClient.Publication) {
        switch publication {
        case .diff(let diff): receive(diff)
        case .commit(let marker): receive(marker)
        case .heartbeat(let heartbeat): receive(heartbeat)
        }
    }

    private mutating func act(on decision: PrefixSequencer.Decision, for prefix: String) {
        switch decision {
        case .none: break
        case .completed(let events): hold(events)
        case .completedOne(let event): hold(event)
        case .repair: markDue(prefix, .delta(.repair))
        case .resync: markDue(prefix, .snapshot)
        }
    }

    private mutating func markDue(_ prefix: String, _ due: Due) {
        guard var follower = followers[prefix] else { return }
        if follower.hasState {
            if due == .delta(.repair) && follower.due == nil { statistics.repairs += 1 }
        }
        if follower.due != .snapshot { follower.due = due }  // a snapshot covers any delta
        followers[prefix] = follower
        mayHaveDue = true
    }

    private mutating func repairAll() {
        for prefix in followers.keys where followers[prefix]!.isLive { markDue(prefix, .delta(.repair)) }
    }

    // MARK: Fetches

    /// The next request the core needs answered, or `nil`. Ask again after each answer: an
    /// answer may make others due.
    public mutating func nextFetch() -> Fetch? {
        dueCatchUps()
        guard mayHaveDue else { return nil }
        // Snapshots first (a catch-up is measured against them), then deltas in prefix order.
        var chosen: (prefix: String, follower: Follower)?
        for (prefix, follower) in followers where follower.due != nil && !follower.refused {
            if follower.due == .snapshot {
                chosen = (prefix, follower)
                break
            }
            if chosen == nil || prefix < chosen!.prefix { chosen = (prefix, follower) }
        }
        guard let (prefix, follower) = chosen else {
            mayHaveDue = false
            return nil
        }
        switch follower.due! {
        case .snapshot:
            return Fetch(prefix: prefix, kind: .snapshot)
        case .delta(let reason):
            // A mirror's repair may take the state instead of every change; a catch-up is short.
            let smaller = mode == .mirror && reason != .catchUp
            return Fetch(prefix: prefix, kind: .delta(since: follower.sequencer.through, snapshotIfSmaller: smaller))
        }
    }

    /// Every follower behind a snapshot waiting to be released must reach it; a live follower
    /// learns it has with one delta rather than waiting for traffic or a heartbeat.
    private mutating func dueCatchUps() {
        // Pending snapshots are kept in revision order: the last is the newest.
        let newestSnapshot = pendingSnapshots.last?.revision
        let target: UInt64?
        switch mode {
        case .mirror: target = newestSnapshot
        // Also the first revision held back by a follower that has not confirmed it (a relay's).
        case .ordered: target = newestSnapshot.map { Swift.max($0, held.first?.revision ?? 0) } ?? held.first?.revision
        case .stream: target = nil
        }
        guard let newest = target else { return }
        for prefix in followers.keys {
            let follower = followers[prefix]!
            if follower.isLive && follower.sequencer.through < newest {
                followers[prefix]!.due = .delta(.catchUp)
                mayHaveDue = true
            }
        }
    }

    /// Hands the core the daemon's answer to `fetch`; `nil` when none came in time (the fetch
    /// stays due).
    public mutating func complete(_ fetch: Fetch, with reply: Beacon_V1_Reply?) {
        guard let reply, var follower = followers[fetch.prefix] else { return }
        switch reply.result {
        case .snapshot(let snapshot):
            if follower.hasState && fetch.kind == .snapshot { statistics.resyncs += 1 }
            load(snapshot, for: fetch.prefix)
        case .events(let page):
            if follower.sequencer.epoch == 0 {  // a stream's first page names the epoch
                follower.sequencer.reset(epoch: page.epoch, through: follower.sequencer.through)
                followers[fetch.prefix] = follower
            }
            guard page.epoch == follower.sequencer.epoch, page.epoch == epoch || epoch == 0 else {
                markDue(fetch.prefix, .snapshot)
                return
            }
            if epoch == 0 { epoch = page.epoch }
            if mode == .stream, followers.count == 1, held.isEmpty, pendingSnapshots.isEmpty,
               let first = page.events.first, first.revision > releasedThrough {
                // One stream with nothing held: a page's revisions are whole and in order, and
                // leave as they are (what holding each would release, without the holding).
                ready.append(contentsOf: page.events)
                var previous: UInt64 = 0
                for event in page.events where event.revision != previous {
                    previous = event.revision
                    statistics.revisions += 1
                }
                releasedThrough = previous
            } else {
                for revision in PrefixSequencer.revisions(in: page.events) { hold(revision) }
            }
            followers[fetch.prefix]!.sequencer.advance(through: page.revision)
            guard !page.more else { return }  // the next page is due
            followers[fetch.prefix]!.due = nil
            if followers[fetch.prefix]!.resuming {
                followers[fetch.prefix]!.resuming = false
                statistics.resumes += 1
                resumed.append(fetch.prefix)
            }
        case .error(let error) where error.code == .compacted || error.code == .futureRevision:
            markDue(fetch.prefix, .snapshot)  // history is gone, or the journal was replaced
        default:
            followers[fetch.prefix]!.refused = true  // refused: the prefix is left as it is
        }
    }

    private mutating func load(_ snapshot: Beacon_V1_SnapshotReply, for prefix: String) {
        statistics.snapshots += 1
        if snapshot.epoch != epoch {
            if epoch != 0 {
                // The journal was replaced: everything held is void, and every follower starts
                // over in the new epoch; nothing leaves until all of them have.
                held.removeAll()
                pendingSnapshots.removeAll()
                ready.removeAll()
                for other in followers.keys where other != prefix {
                    followers[other]!.sequencer.reset(epoch: snapshot.epoch, through: 0)
                    followers[other]!.resuming = false
                    followers[other]!.staleEpoch = followers[other]!.hasState
                    if followers[other]!.hasState || followers[other]!.due != nil { followers[other]!.due = .snapshot }
                }
                mayHaveDue = true
            }
            epoch = snapshot.epoch
            releasedThrough = 0
            streamHead = 0
        }
        pendingSnapshots.removeAll { $0.prefix == prefix }
        let index = pendingSnapshots.firstIndex { $0.revision > snapshot.revision } ?? pendingSnapshots.count
        pendingSnapshots.insert(PendingSnapshot(prefix: prefix, revision: snapshot.revision, kvs: snapshot.kvs), at: index)
        followers[prefix]!.sequencer.reset(epoch: snapshot.epoch, through: snapshot.revision)
        followers[prefix]!.hasState = true
        followers[prefix]!.due = nil
        followers[prefix]!.resuming = false
        followers[prefix]!.staleEpoch = false
    }

    // MARK: Holding and releasing

    /// A whole revision of one change under a follower's prefix: what holding `[event]` does,
    /// without making the array in the common case.
    private mutating func hold(_ event: Beacon_V1_Event) {
        if mode != .ordered && event.parts == 1 && held.isEmpty && pendingSnapshots.isEmpty
            && (event.revision <= streamHead || event.revision <= releasedThrough) {
            ready.append(event)
            if event.revision > releasedThrough {
                releasedThrough = event.revision
                statistics.revisions += 1
            }
            return
        }
        hold([event])
    }

    /// One whole revision under a follower's prefix, complete for that follower.
    private mutating func hold(_ events: [Beacon_V1_Event]) {
        guard let first = events.first else { return }
        if mode == .ordered {
            if first.parts == 1 && held.isEmpty && pendingSnapshots.isEmpty && first.revision > releasedThrough
                && first.revision <= settledRevision() {
                ready.append(contentsOf: events)  // next in line, and every follower is through it
                releasedThrough = first.revision
                statistics.revisions += 1
                return
            }
        } else if first.parts == 1 && held.isEmpty && pendingSnapshots.isEmpty
            && (first.revision <= streamHead || first.revision <= releasedThrough) {
            // One change with nothing held before it: it can leave as it is (the common case).
            // Or a repair filled in a one-change revision this follower missed while later ones
            // left: the receiver applies each key's change only where it is newer than what it
            // holds. Behind anything held it waits its turn, and a late part of a transaction is
            // held like any other until it is whole.
            ready.append(contentsOf: events)
            if first.revision > releasedThrough {
                releasedThrough = first.revision
                statistics.revisions += 1
            }
            return
        }
        var index = held.count
        while index > 0 && held[index - 1].revision > first.revision { index -= 1 }
        if index > 0 && held[index - 1].revision == first.revision {
            var merged = held[index - 1].events
            let known = Set(merged.map(\.part))
            merged.append(contentsOf: events.filter { !known.contains($0.part) })
            merged.sort { $0.part < $1.part }
            held[index - 1].events = merged
        } else {
            held.insert(HeldRevision(revision: first.revision, parts: first.parts, events: events), at: index)
        }
    }

    /// The revision every follower with state is complete through.
    private func settledRevision() -> UInt64 {
        var floor = UInt64.max
        if mode == .ordered {
            // Every follower counts: one with no state yet, or refused, holds everything back.
            for follower in followers.values { floor = min(floor, follower.hasState ? follower.sequencer.through : 0) }
            return floor == .max ? releasedThrough : floor
        }
        for follower in followers.values where follower.hasState && !follower.refused {
            floor = min(floor, follower.sequencer.through)
        }
        return floor == .max ? releasedThrough : floor
    }

    /// Appends what can leave now to `output`, in order (consecutive revisions as one step).
    /// - Returns: whether anything was appended.
    @discardableResult
    public mutating func release(into output: inout [Step]) -> Bool {
        var released = false
        if !ready.isEmpty {
            Self.append(ready, epoch: epoch, to: &output)
            ready = []  // its storage went to `output` (a copy-free hand-over when output was empty)
            released = true
        }
        if !held.isEmpty || !pendingSnapshots.isEmpty { released = releaseHeld(into: &output) || released }
        if !resumed.isEmpty {
            output.append(contentsOf: resumed.map { .resumed(prefix: $0) })
            resumed.removeAll()
            released = true
        }
        return released
    }

    /// What can leave now, in order; `nil` when nothing can.
    public mutating func takeRelease() -> Release? {
        var output: [Step] = []
        guard release(into: &output) else { return nil }
        return Release(steps: output, settled: settled)
    }

    /// No change at or below this revision can still arrive late.
    public var settled: UInt64 { min(settledRevision(), releasedThrough) }

    /// Every change at or below this revision that concerns the followed prefixes has been
    /// released: ``settled``, or past it, through the revisions that changed none of them
    /// (heartbeats and marks say so), while nothing is held back.
    public var completeThrough: UInt64 {
        held.isEmpty && pendingSnapshots.isEmpty ? max(settledRevision(), settled) : settled
    }

    /// Appends revisions to the last step when it holds revisions of the same epoch.
    private static func append(_ events: [Beacon_V1_Event], epoch: UInt64, to output: inout [Step]) {
        guard let last = output.indices.last, case .revisions(let lastEpoch, var merged) = output[last], lastEpoch == epoch else {
            output.append(.revisions(epoch: epoch, events: events))
            return
        }
        output[last] = .resumed(prefix: "")  // drops the step's reference: `merged` grows in place
        merged.append(contentsOf: events)
        output[last] = .revisions(epoch: epoch, events: merged)
    }

    /// - Returns: whether anything left.
    private mutating func releaseHeld(into output: inout [Step]) -> Bool {
        // After a new epoch, the new state leaves only once every mirror has it.
        if followers.values.contains(where: { $0.staleEpoch && !$0.refused }) { return false }
        var floor: UInt64?
        var count = 0
        var snapshots = false
        if let barrier = pendingSnapshots.last?.revision {
            // A waiting snapshot at S stands for its prefix's parts of every revision up to S:
            // those revisions and every waiting snapshot leave together, once all mirrors reach
            // the newest.
            floor = settledRevision()
            guard floor! >= barrier else { return false }
            snapshots = true
            for snapshot in pendingSnapshots {
                while count < held.count && held[count].revision <= snapshot.revision {
                    Self.append(held[count].events, epoch: epoch, to: &output)
                    count += 1
                }
                output.append(.snapshot(prefix: snapshot.prefix, epoch: epoch, revision: snapshot.revision, kvs: snapshot.kvs))
                releasedThrough = max(releasedThrough, snapshot.revision)
            }
            pendingSnapshots.removeAll()
        }
        // Then a revision leaves when every mirror is complete through it, or — ahead of that —
        // when all its parts are known: one change, or a commit marker every live mirror checked,
        // and the live stream has reached it (a delta may have fetched it ahead of revisions
        // still on their way).
        var repairing: Bool?
        while count < held.count {
            let next = held[count]
            var whole = false
            if mode != .ordered && next.revision <= streamHead {
                if next.parts == 1 {
                    whole = true
                } else if next.markerSeen {
                    if repairing == nil { repairing = followers.values.contains { $0.hasState && $0.due != nil && !$0.refused } }
                    whole = !repairing!
                }
            }
            if !whole {
                if floor == nil { floor = settledRevision() }
                guard next.revision <= floor! else { break }
            }
            Self.append(next.events, epoch: epoch, to: &output)
            releasedThrough = max(releasedThrough, next.revision)
            count += 1
        }
        held.removeFirst(count)
        statistics.revisions += count
        return count > 0 || snapshots
    }

    private mutating func recomputeLengths() {
        prefixLengths = Set(followers.keys.map(\.utf8.count)).sorted()
    }
}
