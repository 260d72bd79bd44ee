import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// A simulated daemon and a lossy publish queue drive the follower core through thousands of
/// generated runs: transactions over nested and disjoint prefixes, dropped diffs, markers and
/// heartbeats, fetches answered at a head that has moved on. After every release the mirror
/// must hold no transaction in part and no value older than before; at the end it must equal
/// the daemon's state. A failing seed is printed; `BEACON_FOLLOWER_SEED` replays it,
/// `BEACON_FOLLOWER_TRACE=1` prints what happened, `BEACON_FOLLOWER_MODE` (mirror or ordered) runs
/// one mode only, and `BEACON_FOLLOWER_CASES` runs more cases (`make soak-follower`).
///
/// In ``FollowerCore/Mode/ordered`` (a relay's), what is released is applied as a relay applies
/// it, with no check of what is newer: a release's steps up to its last snapshot make one state
/// at that snapshot's revision, and every revision after it must come after everything released
/// before it.
@Suite(.offThePool, .timeLimit(.minutes(3))) struct FollowerCoreModelTests {
    static let keys = ["a.x", "a.y", "b.1", "b.2", "c", "d.q"]
    static let prefixes = ["a.x", "a.y", "b.", "c"]

    /// The daemon: every revision's changes, in order (values are the revision that wrote them).
    struct Daemon {
        var log: [[String]] = [[]]  // log[r] = keys written at revision r; revision 0 is empty
        /// A replaced journal starts a new epoch with an empty log.
        var epoch: UInt64 = 1
        var head: UInt64 { UInt64(log.count - 1) }

        func lastWrite(_ key: String, atOrBelow revision: UInt64) -> UInt64? {
            var r = Int(revision)
            while r > 0 { if log[r].contains(key) { return UInt64(r) }; r -= 1 }
            return nil
        }

        func last(under prefix: String, below revision: UInt64) -> UInt64 {
            var r = Int(revision) - 1
            while r > 0 { if log[r].contains(where: { $0.hasPrefix(prefix) }) { return UInt64(r) }; r -= 1 }
            return 0
        }

        func events(_ revision: UInt64, under prefix: String) -> [Beacon_V1_Event] {
            let written = log[Int(revision)]
            return written.enumerated().compactMap { part, key in
                key.hasPrefix(prefix) ? FollowerCoreTests.event(key, Int64(revision), revision: revision, part: UInt32(part), parts: UInt32(written.count)) : nil
            }
        }

        /// The publications of one revision for a subscriber of `prefixes` (and `!`).
        func publications(_ revision: UInt64, prefixes: [String]) -> [WireClient.Publication] {
            let written = log[Int(revision)]
            var out: [WireClient.Publication] = []
            for (part, key) in written.enumerated() where prefixes.contains(where: { key.hasPrefix($0) }) {
                let marks = prefixes.filter { key.hasPrefix($0) }.map { prefix in
                    (prefix, last(under: prefix, below: revision), UInt32(written.filter { $0.hasPrefix(prefix) }.count))
                }
                let event = FollowerCoreTests.event(key, Int64(revision), revision: revision, part: UInt32(part), parts: UInt32(written.count))
                out.append(.diff(FollowerCoreTests.diff(event, epoch: epoch, marks: marks)))
            }
            if written.count > 1 {
                let marks = prefixes.filter { prefix in written.contains { $0.hasPrefix(prefix) } }.map { prefix in
                    (prefix, last(under: prefix, below: revision), UInt32(written.filter { $0.hasPrefix(prefix) }.count))
                }
                out.append(.commit(FollowerCoreTests.marker(revision: revision, parts: UInt32(written.count), epoch: epoch, marks: marks)))
            }
            return out
        }

        func heartbeat(prefixes: [String]) -> WireClient.Publication {
            .heartbeat(FollowerCoreTests.heartbeat(head: head, epoch: epoch, prefixes: prefixes.map { ($0, last(under: $0, below: head + 1)) }))
        }

        /// The answer to a fetch at the current head, in pages of at most `pageRevisions`.
        func answer(_ fetch: FollowerCore.Fetch, pageRevisions: Int) -> Beacon_V1_Reply {
            let keys = FollowerCoreModelTests.keys.filter { $0.hasPrefix(fetch.prefix) && lastWrite($0, atOrBelow: head) != nil }
            let state = keys.map { ($0, Int64(lastWrite($0, atOrBelow: head)!)) }
            switch fetch.kind {
            case .snapshot:
                return snapshot(state)
            case .delta(let since, let snapshotIfSmaller):
                if since > head { return FollowerCoreTests.refusal(.futureRevision) }
                let changed = (Int(since) + 1..<log.count).filter { r in log[r].contains { $0.hasPrefix(fetch.prefix) } }
                let changes = changed.reduce(0) { $0 + events(UInt64($1), under: fetch.prefix).count }
                if snapshotIfSmaller && keys.count < changes { return snapshot(state) }
                let page = changed.prefix(pageRevisions)
                let more = page.count < changed.count
                let through = more ? UInt64(page.last!) : head
                return FollowerCoreTests.page(page.flatMap { events(UInt64($0), under: fetch.prefix) }, through: through, epoch: epoch, more: more)
            }
        }

        private func snapshot(_ state: [(String, Int64)]) -> Beacon_V1_Reply {
            .with {
                $0.result = .snapshot(.with {
                    $0.epoch = epoch
                    $0.revision = head
                    $0.kvs = state.map { kv in .with { $0.key = kv.0; $0.value = .with { $0.intValue = kv.1 }; $0.modRevision = UInt64(kv.1) } }
                })
            }
        }
    }

    /// Runs one generated case; returns a failure description, or nil.
    static func run(seed: UInt64, steps: Int, mode: FollowerCore.Mode = .mirror) -> String? {
        var random = SplitMix64(seed: seed)
        var daemon = Daemon()
        var core = FollowerCore(mode: mode)
        let ordered = mode == .ordered
        var lastReleased: UInt64 = 0  // in graphEpoch
        var queue: [WireClient.Publication] = []
        var mirror: [String: UInt64] = [:]  // key → revision of the value shown
        var graphEpoch: UInt64 = 0  // as MirrorGraph: revisions of another epoch are ignored
        let dropRate = [0, 5, 20, 50][random.next(4)]
        let pageRevisions = 1 + random.next(4)
        // Some prefixes are followed from the start, the others join later.
        var followed = prefixes.filter { _ in random.next(3) > 0 }
        if followed.isEmpty { followed = [prefixes[0]] }
        for prefix in followed { core.follow(prefix) }

        let trace = ProcessInfo.processInfo.environment["BEACON_FOLLOWER_TRACE"] != nil
        var epochOf: [String: UInt64] = [:]  // key → the epoch its shown value is from
        var visible: Set<String> = []  // prefixes whose state was released
        func sync() -> String? {
            var fetches = 0
            while let fetch = core.nextFetch() {
                fetches += 1
                if fetches > 1000 { return "more than 1000 fetches in a row" }
                if random.next(4) == 0 {  // no answer in time: the fetch stays due, tried next step
                    core.complete(fetch, with: nil)
                    break
                }
                let answer = daemon.answer(fetch, pageRevisions: pageRevisions)
                if trace { print("fetch \(fetch) at head \(daemon.head) -> \(answer.result.map { "\($0)".prefix(300) } ?? "")") }
                core.complete(fetch, with: answer)
            }
            while let release = core.takeRelease() {
                if trace { print("release \(FollowerCoreTests.describe(release))") }
                var steps = release.steps[...]
                // As a relay does: the steps up to the last snapshot make one state at its revision
                // (from nothing in a new epoch), journaled anew; what follows is applied in order.
                if ordered, let last = steps.lastIndex(where: { if case .snapshot = $0 { true } else { false } }),
                   case .snapshot(_, let epoch, let revision, _) = steps[last] {
                    if epoch != graphEpoch { mirror.removeAll() }
                    for step in steps[...last] {
                        switch step {
                        case .revisions(_, let events):
                            for event in events {
                                if event.revision > revision { return "revision \(event.revision) released ahead of a snapshot at \(revision)" }
                                mirror[event.change.key] = event.revision
                            }
                        case .snapshot(let prefix, let snapshotEpoch, let at, let kvs):
                            if snapshotEpoch != epoch || at > revision { return "snapshot \(prefix)@\(at) in epoch \(snapshotEpoch) before the last at \(revision)" }
                            for key in mirror.keys where key.hasPrefix(prefix) { mirror[key] = nil }
                            for kv in kvs { mirror[kv.key] = UInt64(kv.value.intValue) }
                            visible.insert(prefix)
                        case .resumed:
                            break
                        }
                    }
                    for key in mirror.keys { epochOf[key] = epoch }
                    graphEpoch = epoch
                    lastReleased = revision
                    steps = steps[(last + 1)...]
                }
                for step in steps {
                    switch step {
                    case .revisions(let epoch, let events) where ordered:
                        // A relay applies what it is given, in the order given.
                        guard epoch == graphEpoch else { return "revisions of epoch \(epoch) released in epoch \(graphEpoch)" }
                        let floor = lastReleased
                        for event in events {
                            if event.revision <= floor || event.revision < lastReleased {
                                return "revision \(event.revision) released after \(lastReleased)"
                            }
                            lastReleased = event.revision
                            if event.change.kind == .delete { mirror[event.change.key] = nil } else { mirror[event.change.key] = event.revision }
                            epochOf[event.change.key] = epoch
                        }
                    case .revisions(let epoch, let events):
                        guard epoch == graphEpoch else { continue }
                        for event in events where epochOf[event.change.key] ?? epoch == epoch
                            && event.revision > mirror[event.change.key] ?? 0 {
                            mirror[event.change.key] = event.revision
                            epochOf[event.change.key] = epoch
                        }
                    case .snapshot(let prefix, let epoch, let revision, let kvs):
                        // As MirrorGraph: the graph takes the snapshot's epoch; what the prefix
                        // showed from another epoch is replaced, not merged.
                        precondition(!ordered, "taken above")
                        graphEpoch = epoch
                        visible.insert(prefix)
                        for key in mirror.keys where key.hasPrefix(prefix) && epochOf[key] != epoch {
                            mirror[key] = nil
                            epochOf[key] = nil
                        }
                        for kv in kvs where kv.key.hasPrefix(prefix) && (mirror[kv.key] ?? 0) <= revision {
                            if let shown = mirror[kv.key], UInt64(kv.value.intValue) < shown {
                                return "snapshot \(prefix)@\(revision) moved \(kv.key) back from \(shown) to \(kv.value.intValue)"
                            }
                            mirror[kv.key] = UInt64(kv.value.intValue)
                            epochOf[kv.key] = epoch
                        }
                    case .resumed:
                        break
                    }
                }
                // After a new journal, nothing of the old one may show beside it.
                if graphEpoch == daemon.epoch, let stale = mirror.keys.first(where: { epochOf[$0] != graphEpoch }) {
                    return "\(stale) still shows epoch \(epochOf[stale] ?? 0) beside epoch \(graphEpoch)"
                }
                if let broken = halfTransaction() { return broken }
            }
            return nil
        }

        /// A revision that wrote several followed keys, shown for some and not others.
        func halfTransaction() -> String? {
            guard graphEpoch == daemon.epoch else { return nil }
            let shown = Set(mirror.keys)
            for revision in 1..<daemon.log.count {
                // Keys of prefixes whose first state was released (a mirror not yet synced shows nothing).
                let written = daemon.log[revision].filter { key in shown.contains(key) || visible.contains { key.hasPrefix($0) } }
                guard written.count > 1 else { continue }
                let applied = written.map { (mirror[$0] ?? 0) >= UInt64(revision) }
                if applied.contains(true) && applied.contains(false) {
                    return "revision \(revision) shown in part: \(written.map { "\($0)=\(mirror[$0] ?? 0)" })"
                }
            }
            return nil
        }

        for _ in 0..<steps {
            switch random.next(10) {
            case 0...3:  // the daemon commits a revision of one to three keys
                var written: [String] = []
                for _ in 0...random.next(3) {
                    let key = keys[random.next(keys.count)]
                    if !written.contains(key) { written.append(key) }
                }
                daemon.log.append(written)
                if trace { print("commit \(daemon.head) \(written)") }
                for publication in daemon.publications(daemon.head, prefixes: core.prefixes) where random.next(100) >= dropRate {
                    queue.append(publication)
                }
            case 4:
                if random.next(100) >= dropRate { queue.append(daemon.heartbeat(prefixes: core.prefixes)) }
                if random.next(40) == 0 {  // the journal is replaced: a new epoch starts from revision 0
                    daemon.epoch += 1
                    daemon.log = [[]]
                    if trace { print("new epoch \(daemon.epoch)") }
                }
            case 5:
                let prefix = prefixes[random.next(prefixes.count)]
                if !core.prefixes.contains(prefix) && random.next(4) == 0 {
                    core.follow(prefix)
                    followed.append(prefix)
                }
            default:
                if !queue.isEmpty {
                    let publication = queue.removeFirst()
                    if trace { print("receive \(publication)".replacingOccurrences(of: "\n", with: " ").prefix(400)) }
                    core.receive(publication)
                }
            }
            if let broken = sync() { return broken }
        }
        // Quiet: the rest of the queue, then a heartbeat that arrives, and every fetch answered.
        while !queue.isEmpty {
            core.receive(queue.removeFirst())
            if let broken = sync() { return broken }
        }
        core.receive(daemon.heartbeat(prefixes: core.prefixes))
        for _ in 0..<100 where core.hasDueFetch {
            if let broken = sync() { return broken }
        }
        if let broken = sync() { return broken }
        if graphEpoch != daemon.epoch { return "at the end the mirror is in epoch \(graphEpoch), the daemon in \(daemon.epoch)" }
        for key in keys where followed.contains(where: { key.hasPrefix($0) }) {
            let expected = daemon.lastWrite(key, atOrBelow: daemon.head)
            if mirror[key] != expected { return "at the end \(key) shows \(mirror[key].map(String.init) ?? "nothing"), the daemon \(expected.map(String.init) ?? "nothing")" }
        }
        return nil
    }

    @Test(arguments: [FollowerCore.Mode.mirror, .ordered])
    func generatedRunsNeverShowHalfATransactionAndConverge(mode: FollowerCore.Mode) {
        let environment = ProcessInfo.processInfo.environment
        if let only = environment["BEACON_FOLLOWER_MODE"], only != "\(mode)" { return }
        let cases = environment["BEACON_FOLLOWER_CASES"].flatMap(UInt64.init) ?? 1000
        // Seeds that once failed (a late one-change fill leaving ahead of a held transaction).
        let regressions: [UInt64] = [11257, 13238, 17371, 24735, 29486]
        let seeds: [UInt64] = environment["BEACON_FOLLOWER_SEED"].flatMap(UInt64.init).map { [$0] }
            ?? regressions + Array(1...max(cases, 1))
        var failures: [String] = []
        for seed in seeds {
            if let failure = Self.run(seed: seed, steps: 300, mode: mode) { failures.append("seed \(seed) (\(mode)): \(failure)") }
            if failures.count >= 5 { break }
        }
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
    }
}
