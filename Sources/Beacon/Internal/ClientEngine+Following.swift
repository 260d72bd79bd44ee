import BeaconProtocol
import BeaconWire
import BeaconZMQ

/// One followed prefix: a mirror's (its revisions go to the graph) or a history stream's (its
/// changes go to the stream).
final class Follower {
    var sequencer: PrefixSequencer
    /// Whether the follower has state (a mirror's first snapshot, a stream's first delta).
    var synced = false
    /// A first sync, a repair or a resync is due.
    var needsSync = true
    /// The due sync must be a snapshot rather than a delta.
    var needsResync: Bool
    /// For a history stream: where its changes go.
    let history: HistoryStream?

    init(mirroring prefix: String) {
        sequencer = PrefixSequencer(prefix: prefix)
        needsResync = true
        history = nil
    }

    /// A mirror that resumes from a local journal's bookmark with a delta.
    init(mirroring prefix: String, resumingAfter revision: UInt64, epoch: UInt64) {
        sequencer = PrefixSequencer(prefix: prefix, epoch: epoch, through: revision)
        needsResync = false
        history = nil
    }

    init(history: HistoryStream, prefix: String, after revision: UInt64) {
        sequencer = PrefixSequencer(prefix: prefix, epoch: 0, through: revision)
        needsResync = false
        self.history = history
    }

    var prefix: String { sequencer.prefix }
}

/// Where a history stream's changes go.
struct HistoryStream {
    let id: Int
    /// Only this key (an exact-key stream), or every key under the prefix.
    let exactKey: String?
    let continuation: AsyncThrowingStream<HistoryEvent, any Error>.Continuation

    func wants(_ key: String) -> Bool { exactKey == nil || exactKey == key }
}

/// One revision received for the mirrors and not yet handed to the graph.
struct HeldRevision {
    let revision: UInt64
    /// The revision's number of changes (all keys, not only ours).
    let parts: UInt32
    /// Our parts of it, in part order.
    var events: [Beacon_V1_Event]
    /// The commit marker was processed: every followed prefix it touched is complete.
    var markerSeen = false
}

extension ClientEngine {
    // MARK: Following

    func follow(_ prefix: String) {
        guard followers[prefix] == nil else { return }
        if let cached = localJournal?.contents, cached.epoch != 0, let bookmark = cached.bookmarks[prefix] {
            followers[prefix] = Follower(mirroring: prefix, resumingAfter: bookmark, epoch: cached.epoch)
        } else {
            followers[prefix] = Follower(mirroring: prefix)
        }
        addSubscription(prefix)  // subscribe before the snapshot: nothing can fall between
    }

    func unfollow(_ prefix: String) {
        guard followers.removeValue(forKey: prefix) != nil else { return }
        removeSubscription(prefix)
    }

    func startHistory(_ request: HistoryRequest) {
        let stream = HistoryStream(id: request.id, exactKey: request.exact ? request.prefix : nil, continuation: request.continuation)
        histories[request.id] = Follower(history: stream, prefix: request.prefix, after: max(request.fromRevision, 1) - 1)
        addSubscription(request.prefix)
    }

    func stopHistory(_ id: Int) {
        guard let follower = histories.removeValue(forKey: id) else { return }
        follower.history?.continuation.finish()
        removeSubscription(follower.prefix)
    }

    // MARK: Syncing

    /// Runs due first syncs, repairs and resyncs; stops at the first that gets no answer.
    func syncFollowers(now: UInt64) {
        guard now >= nextSyncAttempt else { return }
        for follower in Array(followers.values) + Array(histories.values) where follower.needsSync {
            let answered = follower.needsResync ? resync(follower) : repair(follower)
            if !answered {
                nextSyncAttempt = ClientEngine.now() + configuration.retryIntervalMilliseconds
                return
            }
        }
    }

    /// Replaces the follower's state by a snapshot. Returns whether the daemon answered.
    @discardableResult
    func resync(_ follower: Follower) -> Bool {
        follower.needsSync = true
        follower.needsResync = true
        if follower.synced { resyncCount.wrappingAdd(1, ordering: .relaxed) }
        snapshotCount.wrappingAdd(1, ordering: .relaxed)
        guard let reply = call(.snapshot(.with { $0.prefix = follower.prefix })) else { return false }
        guard case .snapshot(let snapshot) = reply.result else {
            return true  // refused (the prefix was validated before): leave it unsynced
        }
        apply(snapshot, to: follower)
        return true
    }

    /// Replaces the follower's state by `snapshot` (asked for, or the daemon's answer to a delta).
    private func apply(_ snapshot: Beacon_V1_SnapshotReply, to follower: Follower) {
        if let history = follower.history {
            let state = snapshot.kvs.filter { history.wants($0.key) }.map { kv in
                KeyChange(.with {
                    $0.revision = kv.modRevision
                    $0.change = .with {
                        $0.key = kv.key; $0.value = kv.value; $0.version = kv.version
                        $0.createRevision = kv.createRevision; $0.expiresAtMs = kv.expiresAtMs
                    }
                })
            }
            history.continuation.yield(.resynced(revision: snapshot.revision, state: state))
        } else {
            flushOutgoing()  // what was released belongs before the snapshot, and to the old epoch
            if snapshot.epoch != mirrorEpoch {
                if mirrorEpoch != 0 {  // the journal was replaced: every mirror starts over
                    held.removeAll()
                    for other in followers.values where other !== follower {
                        other.needsSync = true
                        other.needsResync = true
                    }
                }
                mirrorEpoch = snapshot.epoch
                releasedThrough = 0
            }
            post(.snapshot(prefix: follower.prefix, epoch: snapshot.epoch, revision: snapshot.revision, kvs: snapshot.kvs))
            localJournal?.record(snapshot: snapshot.kvs, prefix: follower.prefix, revision: snapshot.revision, epoch: snapshot.epoch)
            if !follower.synced { post(.synced(prefix: follower.prefix)) }
        }
        follower.sequencer.reset(epoch: snapshot.epoch, through: snapshot.revision)
        follower.synced = true
        follower.needsSync = false
        follower.needsResync = false
    }

    /// Fetches every change after the follower's bookmark. Returns whether the daemon answered.
    @discardableResult
    func repair(_ follower: Follower) -> Bool {
        follower.needsSync = true
        if follower.synced { repairCount.wrappingAdd(1, ordering: .relaxed) }
        while true {
            let since = follower.sequencer.through
            let mirror = follower.history == nil
            guard let reply = call(.delta(.with {
                $0.prefix = follower.prefix
                $0.sinceRevision = since
                $0.snapshotIfSmaller = mirror  // a mirror needs the state, not every change
            })) else { return false }
            if case .snapshot(let snapshot) = reply.result, mirror {
                // The daemon found the keys fewer than the changes. Sequenced by the daemon like
                // a delta, so it is the same as a resync: the mirror's state replaced, nothing missed.
                snapshotCount.wrappingAdd(1, ordering: .relaxed)
                apply(snapshot, to: follower)
                return true
            }
            guard case .events(let page) = reply.result else {
                return resync(follower)  // COMPACTED, or FUTURE_REVISION after the journal was replaced
            }
            if follower.sequencer.epoch == 0 { follower.sequencer.reset(epoch: page.epoch, through: since) }
            if page.epoch != follower.sequencer.epoch || (follower.history == nil && page.epoch != mirrorEpoch) {
                return resync(follower)
            }
            for revision in PrefixSequencer.revisions(in: page.events) { deliver(revision, from: follower) }
            follower.sequencer.advance(through: page.revision)
            if !page.more { break }
        }
        if !follower.synced && follower.history == nil {  // resumed from the local journal
            flushOutgoing()
            post(.synced(prefix: follower.prefix))
            resumeCount.wrappingAdd(1, ordering: .relaxed)
        }
        follower.synced = true
        follower.needsSync = false
        return true
    }

    /// Repairs every synced mirror: after it, each is complete through the head it was answered at.
    func repairAllMirrors() {
        for follower in followers.values where !follower.needsSync {
            repair(follower)
        }
    }

    // MARK: Publications

    /// Handles up to a bounded number of publications so that commands and replies interleave.
    func drainPublications() {
        for _ in 0..<20_000 {
            guard let frames = try? subscriber.receiveMessage(flags: .dontWait) else { return }
            guard frames.count == 2 else { continue }
            heard()
            let body = frames[1].bytes
            switch frames[0].withUnsafeBytes({ WireTopic.kind(of: $0) }) {
            case .heartbeat:
                if let heartbeat = try? Beacon_V1_Heartbeat(serializedBytes: body) { accept(heartbeat) }
            case .commit:
                if let marker = try? Beacon_V1_CommitMarker(serializedBytes: body) { accept(marker) }
            case .diff:
                if let diff = try? Beacon_V1_Diff(serializedBytes: body) { accept(diff) }
            }
            if !held.isEmpty { releaseHeld() }
        }
    }

    private func accept(_ diff: Beacon_V1_Diff) {
        let revision = diff.event.revision
        if diff.epoch == mirrorEpoch, let waiting = held.first(where: { !$0.markerSeen && $0.parts > 1 }), revision > waiting.revision {
            repairAllMirrors()  // the stream moved past a revision whose commit marker was lost
        }
        forEachFollower(of: diff.event.change.key) { follower in
            act(on: follower.sequencer.accept(diff), for: follower)
        }
    }

    private func accept(_ marker: Beacon_V1_CommitMarker) {
        if marker.epoch == mirrorEpoch, let waiting = held.first(where: { !$0.markerSeen && $0.parts > 1 }),
           marker.revision > waiting.revision {
            repairAllMirrors()
        }
        for follower in Array(followers.values) + Array(histories.values) where !follower.needsSync {
            act(on: follower.sequencer.accept(marker), for: follower)
        }
        if let index = held.firstIndex(where: { $0.revision == marker.revision }) { held[index].markerSeen = true }
    }

    private func accept(_ heartbeat: Beacon_V1_Heartbeat) {
        heartbeatIntervalMs = UInt64(max(heartbeat.intervalMs, 10))
        for follower in Array(followers.values) + Array(histories.values) where !follower.needsSync {
            act(on: follower.sequencer.accept(heartbeat), for: follower)
        }
        if heartbeat.epoch == mirrorEpoch,
           held.contains(where: { !$0.markerSeen && $0.parts > 1 && $0.revision <= heartbeat.headRevision }) {
            repairAllMirrors()  // a revision published before this heartbeat is still incomplete
        }
    }

    private func act(on decision: PrefixSequencer.Decision, for follower: Follower) {
        switch decision {
        case .none: break
        case .completed(let events): deliver(events, from: follower)
        case .repair: repair(follower)
        case .resync: resync(follower)
        }
    }

    /// Calls `body` for every synced follower (mirror or stream) whose prefix the key starts with.
    private func forEachFollower(of key: String, _ body: (Follower) -> Void) {
        let utf8 = key.utf8
        for length in prefixLengths {
            guard length <= utf8.count else { break }
            let prefix = length == utf8.count ? key : String(Substring(utf8.prefix(length)))
            if let follower = followers[prefix], !follower.needsSync { body(follower) }
        }
        for follower in histories.values where !follower.needsSync && key.isUnder(follower.prefix) {
            body(follower)
        }
    }

    // MARK: Handing revisions on

    /// One whole revision under a follower's prefix: to the stream, or held for the graph.
    func deliver(_ events: [Beacon_V1_Event], from follower: Follower) {
        guard let first = events.first else { return }
        if let history = follower.history {
            for event in events where history.wants(event.change.key) {
                history.continuation.yield(.change(KeyChange(event)))
            }
            return
        }
        if first.revision <= releasedThrough {
            // A repair filled in what this follower missed while later revisions went on: the
            // graph applies each key's change only if it is newer than what it holds.
            outgoing.append(contentsOf: events)
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

    /// The revision every synced mirror is complete through.
    private func settledRevision() -> UInt64 {
        var floor = UInt64.max
        for follower in followers.values where follower.synced { floor = min(floor, follower.sequencer.through) }
        return floor == .max ? releasedThrough : floor
    }

    /// Moves every held revision that is complete for all mirrors, in order, to the outgoing
    /// batch. A revision is complete when it has one change (all followers of that key saw the
    /// same diff), when its commit marker was checked by every synced follower and none is
    /// repairing, or when every synced follower is complete past it.
    func releaseHeld() {
        var released = 0
        var floor: UInt64?
        for revision in held {
            if revision.parts != 1 {
                let repairing = followers.values.contains { $0.synced && $0.needsSync }
                if !(revision.markerSeen && !repairing) {
                    if floor == nil { floor = settledRevision() }
                    guard revision.revision <= floor! else { break }
                }
            }
            outgoing.append(contentsOf: revision.events)
            releasedThrough = revision.revision
            released += 1
        }
        guard released > 0 else { return }
        held.removeFirst(released)
        revisionCount.wrappingAdd(released, ordering: .relaxed)
    }

    /// Hands the released revisions to the graph in one update.
    func flushOutgoing() {
        guard !outgoing.isEmpty else { return }
        post(.revision(epoch: mirrorEpoch, events: outgoing, settled: settledRevision()))
        localJournal?.record(outgoing, epoch: mirrorEpoch)
        outgoing.removeAll(keepingCapacity: true)
    }
}
