import BeaconProtocol
import BeaconWire
import BeaconZMQ

/// A history stream: its own follower core (every change, in order), and where they go.
final class HistoryFollower {
    let id: Int
    let prefix: String
    /// Only this key (an exact-key stream), or every key under the prefix.
    let exactKey: String?
    let feed: HistoryFeed
    var core = FollowerCore(mode: .stream)

    init(_ request: HistoryRequest) {
        id = request.id
        prefix = request.prefix
        exactKey = request.exact ? request.prefix : nil
        feed = request.feed
        core.follow(request.prefix, resumingAfter: max(request.fromRevision, 1) - 1)
    }

    func wants(_ key: String) -> Bool { exactKey == nil || exactKey == key }

    /// Hands what the core released to the stream, in one page.
    func deliver() {
        var page: [HistoryEvent] = []
        while let release = core.takeRelease() {
            for step in release.steps {
                switch step {
                case .revisions(_, let events):
                    page.reserveCapacity(page.count + events.count)
                    for event in events where wants(event.change.key) { page.append(.change(KeyChange(event))) }
                case .snapshot(_, _, let revision, let kvs):
                    let state = kvs.filter { wants($0.key) }.map { KeyChange(Beacon_V1_Event(writing: $0)) }
                    page.append(.resynced(revision: revision, state: state))
                case .resumed:
                    break
                }
            }
        }
        feed.yield(page)
    }
}

extension ClientEngine {
    // MARK: Following

    func follow(_ prefix: String) {
        guard !mirrors.isFollowing(prefix) else { return }
        if let cached = localJournal?.contents, cached.epoch != 0, let bookmark = cached.bookmarks[prefix] {
            mirrors.follow(prefix, resumingAfter: bookmark, epoch: cached.epoch)
        } else {
            mirrors.follow(prefix)
        }
        addSubscription(prefix)  // subscribe before the snapshot: nothing can fall between
    }

    func unfollow(_ prefix: String) {
        guard mirrors.isFollowing(prefix) else { return }
        mirrors.unfollow(prefix)
        removeSubscription(prefix)
    }

    func startHistory(_ request: HistoryRequest) {
        histories[request.id] = HistoryFollower(request)
        addSubscription(request.prefix)
    }

    func stopHistory(_ id: Int) {
        guard let history = histories.removeValue(forKey: id) else { return }
        retiredHistoryStatistics.add(history.core.statistics)
        history.feed.finish()
        removeSubscription(history.prefix)
    }

    /// Whether a first sync, repair, catch-up or resync is due.
    var hasDueFetch: Bool { mirrors.hasDueFetch || histories.values.contains { $0.core.hasDueFetch } }

    // MARK: Syncing

    /// Runs the fetches the cores ask for; stops at the first that gets no answer and tries
    /// again after the retry interval.
    func syncFollowers(now: UInt64) {
        guard now >= nextSyncAttempt else { return }
        if now >= nextRefusedRetry {
            mirrors.retryRefused()
            for history in histories.values { history.core.retryRefused() }
            nextRefusedRetry = now + 5_000
        }
        var answered = true
        var budget = 1_000  // per pass, so that commands and publications interleave
        while answered && budget > 0, let fetch = mirrors.nextFetch() {
            budget -= 1
            let reply = call(fetch.request)
            answered = reply != nil
            mirrors.complete(fetch, with: reply)
        }
        for history in histories.values {
            // A stream's next page is asked for as soon as a page says there is more, so that
            // the daemon reads it while this one is taken in.
            var prefetched: (fetch: FollowerCore.Fetch, id: UInt64)?
            while answered && budget > 0, let fetch = history.core.nextFetch() {
                budget -= 1
                let reply: Beacon_V1_Reply?
                if let ahead = prefetched, ahead.fetch == fetch {
                    reply = awaitReply(id: ahead.id)
                } else {
                    reply = call(fetch.request)  // a reply to a prefetch not wanted after all is skipped
                }
                prefetched = nil
                if case .events(let page) = reply?.result, page.more, case .delta(_, let smaller) = fetch.kind {
                    let next = FollowerCore.Fetch(prefix: fetch.prefix, kind: .delta(since: page.revision, snapshotIfSmaller: smaller))
                    let id = nextID()
                    sendRequest(id: id, next.request)
                    prefetched = (next, id)
                }
                answered = reply != nil
                history.core.complete(fetch, with: reply)
            }
        }
        if !answered { nextSyncAttempt = ClientEngine.now() + configuration.retryIntervalMilliseconds }
    }

    // MARK: Publications

    /// Handles up to a bounded number of publications so that commands and replies interleave.
    func drainPublications() {
        for _ in 0..<20_000 {
            guard let frames = try? subscriber.receiveMessage(flags: .dontWait) else { return }
            guard frames.count == 2 else { continue }
            heard()
            switch frames[0].withUnsafeBytes({ WireTopic.kind(of: $0) }) {
            case .heartbeat:
                guard let heartbeat = try? Beacon_V1_Heartbeat(serializedBytes: frames[1].bytes) else { continue }
                heartbeatIntervalMs = UInt64(max(heartbeat.intervalMs, 10))
                // A daemon started anew may publish bundles or not: follow what it says.
                setBundled(configuration.receivesBundles && heartbeat.bundles)
                // A relay that cannot reach its upstream serves what it has: stale, like a lost daemon.
                upstreamUnreachable = heartbeat.hasUpstream && !heartbeat.upstream.reachable
                mirrors.receive(heartbeat)
                for history in histories.values { history.core.receive(heartbeat) }
            case .commit:
                guard let marker = try? Beacon_V1_CommitMarker(serializedBytes: frames[1].bytes) else { continue }
                mirrors.receive(marker)
                for history in histories.values { history.core.receive(marker) }
            case .diff:
                guard let diff = try? Beacon_V1_Diff(frame: frames[1]) else { continue }
                receive(diff)
            case .bundle:
                guard let diffs = try? Beacon_V1_Bundle.diffs(frame: frames[1]) else { continue }
                bundleCount.add(1, ordering: .relaxed)
                for diff in diffs { receive(diff) }
            }
            if hasDueFetch { syncFollowers(now: ClientEngine.now()) }
        }
    }

    /// Hands a diff to the mirrors and to the history streams of prefixes its key is under.
    private func receive(_ diff: Beacon_V1_Diff) {
        mirrors.receive(diff)
        for history in histories.values where diff.event.change.key.isUnder(history.prefix) {
            history.core.receive(diff)
        }
    }

    // MARK: Handing revisions on

    /// Moves what the cores released to the outgoing update and the history streams.
    func takeReleased() {
        mirrors.release(into: &outgoing)
        for history in histories.values { history.deliver() }
    }

    /// Hands the released steps to the graph in one update, and to the local journal.
    func flushOutgoing() {
        guard !outgoing.isEmpty else { return }
        post(.release(steps: outgoing, settled: mirrors.settled))
        if let localJournal {
            for step in outgoing {
                switch step {
                case .revisions(let epoch, let events):
                    localJournal.record(events, epoch: epoch)
                case .snapshot(let prefix, let epoch, let revision, let kvs):
                    localJournal.record(snapshot: kvs, prefix: prefix, revision: revision, epoch: epoch)
                case .resumed:
                    break
                }
            }
        }
        outgoing.removeAll(keepingCapacity: true)
        publishStatistics()
    }

    /// Copies the cores' counters to the ones ``BeaconClient/statistics`` reads.
    func publishStatistics() {
        var total = retiredHistoryStatistics
        total.add(mirrors.statistics)
        for history in histories.values { total.add(history.core.statistics) }
        repairCount.store(total.repairs, ordering: .relaxed)
        resyncCount.store(total.resyncs, ordering: .relaxed)
        revisionCount.store(mirrors.statistics.revisions, ordering: .relaxed)
        snapshotCount.store(total.snapshots, ordering: .relaxed)
        resumeCount.store(mirrors.statistics.resumes, ordering: .relaxed)
    }
}

extension FollowerCore.Statistics {
    mutating func add(_ other: FollowerCore.Statistics) {
        repairs += other.repairs
        resyncs += other.resyncs
        snapshots += other.snapshots
        resumes += other.resumes
        revisions += other.revisions
    }
}
