#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconJournal
import BeaconLocking
import BeaconProtocol
import BeaconZMQ
import Foundation
import Logging

/// What an etcd front's link reports to the loop thread, in order.
enum EtcdLinkEvent: Sendable {
    /// Whole Beacon revisions from the watch, in order.
    case revisions([[JournalChange]])
    /// The cluster's state at `revision`, to replace the journal's (a first sync, another epoch,
    /// history etcd compacted away).
    case reset(epoch: UInt64, revision: UInt64, entries: [JournalEntry])
    /// etcd's answer to the write sent with `token`.
    case answered(token: UInt64, Result<Etcdserverpb_TxnResponse, EtcdLinkFailure>)
    /// The answer to the `KeepAlive` sent with `token`.
    case keptAlive(token: UInt64, Result<Beacon_V1_KeepAliveReply, EtcdLinkFailure>)
    /// An expiry this front sent did not reach etcd: it is tried again.
    case expiryNotSent(key: String, modRevision: UInt64)
    /// Whether the watch is in place (a member with a leader answers), and etcd's revision.
    case status(reachable: Bool, headRevision: UInt64)
    /// The watch reported every change under the prefix through this etcd revision (the
    /// revisions before this event included).
    case followed(through: UInt64)
    /// The read index asked for with `token`: the commit clock's revision, as a linearizable read saw it.
    case readIndex(token: UInt64, Result<UInt64, EtcdError>)
}

/// Why a write or a `KeepAlive` the link was given did not go through.
enum EtcdLinkFailure: Error, Sendable {
    /// etcd refused it or did not answer.
    case etcd(EtcdError)
    /// It would start a session, and its writer holds `limit` sessions in etcd already
    /// (`sessions_per_peer`).
    case sessionLimit(Int)
}

/// An etcd front's link to its cluster: one watch of the front's prefix, from the revision after
/// what its journal holds, turned into Beacon revisions; and the writes it sends. Runs on Swift
/// concurrency's threads; reports to the loop thread through an inbox and a wake-up pipe, which
/// the loop polls. ``close()`` ends it.
final class EtcdLink: Sendable {
    let client: EtcdClient
    let layout: EtcdLayout
    /// Readable when events wait in the inbox.
    let wake: WakePipe
    /// A description of the cluster for status lines and `UpstreamStatus.endpoint`.
    let clusterName: String
    private let inbox = Locked<[EtcdLinkEvent]>([])
    private let watching = Locked<Task<Void, Never>?>(nil)
    private let writes = Locked<[UInt64: Task<Void, Never>]?>([:])
    /// The lease of each session this front has used, by session (in its writer's namespace).
    private let sessionLeases = Locked<[[UInt8]: Int64]>([:])
    /// How long a session lives that a put starts (`session_ttl_ms`), in whole seconds.
    private let sessionSeconds: Int64
    /// The lease write ids are kept on, and when it was granted.
    private let writeIDLease = Locked<(id: Int64, grantedAt: ContinuousClock.Instant)?>(nil)
    private let logger: Logger
    /// What the last status reported said (for logging each loss once).
    private let wasReachable = Locked(true)

    /// How long a write id's key is kept at least (its lease lives twice as long).
    static let writeIDSeconds: Int64 = 1800

    /// Connects to the cluster and starts watching.
    /// - Parameters:
    ///   - after: the last etcd revision the journal holds (0: none); the watch resumes after it
    ///     if `journalEpoch` is the cluster's, or takes the cluster's state anew.
    ///   - lastCommitMilliseconds: the commit time of that revision.
    ///   - sessionTTLMilliseconds: how long a session lives that a put starts.
    init(settings: DaemonConfiguration.EtcdSettings, after: UInt64, journalEpoch: UInt64, lastCommitMilliseconds: UInt64,
         sessionTTLMilliseconds: UInt64, logger: Logger) throws(DaemonError) {
        sessionSeconds = Self.seconds(sessionTTLMilliseconds)
        do {
            client = try EtcdClient(endpoints: try EtcdEndpoint.list(parsing: settings.endpoints.joined(separator: ",")),
                                    tls: EtcdTLSFiles(certificatePath: settings.certificateFile, keyPath: settings.keyFile,
                                                      authorityPath: settings.authorityFile))
            wake = try WakePipe()
        } catch {
            throw DaemonError(.startup, "cannot set up the etcd client: \(error)")
        }
        layout = EtcdLayout(prefix: settings.prefix)
        clusterName = "etcd " + settings.endpoints.joined(separator: ",") + " " + settings.prefix
        self.logger = logger
        resume(after: after, journalEpoch: journalEpoch, lastCommitMilliseconds: lastCommitMilliseconds)
    }

    /// Follows the cluster anew from the revision after `after` (what the journal holds now).
    func resume(after: UInt64, journalEpoch: UInt64, lastCommitMilliseconds: UInt64) {
        let task = Task { [self] in
            await follow(after: after, journalEpoch: journalEpoch, lastCommitMilliseconds: lastCommitMilliseconds)
        }
        watching.withLock { running in
            running?.cancel()
            running = task
        }
    }

    /// Ends the watch and every write in flight (their answers are not reported), and the client.
    func close() {
        watching.withLock { $0 }?.cancel()
        for task in writes.withLock({ tasks in defer { tasks = nil }; return tasks ?? [:] }).values { task.cancel() }
        client.close()
    }

    /// Takes the events reported since the last call, in order.
    func take() -> [EtcdLinkEvent] {
        wake.drain()
        return inbox.withLock { events in defer { events.removeAll() }; return events }
    }

    private func report(_ event: EtcdLinkEvent) {
        if case .status(let reachable, _) = event { wasReachable.withLock { $0 = reachable } }
        inbox.withLock { $0.append(event) }
        wake.wake()
    }

    // MARK: Writes

    /// Sends a write's transaction, after finding or starting the leases it needs; its answer
    /// comes back as `.answered(token, …)`.
    /// - Parameter sessionLimit: the sessions a writer may hold (0: no limit); a write that would
    ///   start one more is not sent.
    func send(_ plan: EtcdWritePlan, token: UInt64, nowMilliseconds: UInt64, sessionLimit: Int) {
        run(token: token) { [self] () async -> EtcdLinkEvent in
            var result: Result<Etcdserverpb_TxnResponse, EtcdLinkFailure> = .failure(.etcd(EtcdError(.closed, "not sent")))
            // A lease that ran out between finding it and using it is found anew, once.
            for attempt in 0..<2 {
                do throws(EtcdError) {
                    for session in plan.sessions where try await !mayStart(session, limit: sessionLimit) {
                        return .answered(token: token, .failure(.sessionLimit(sessionLimit)))
                    }
                    let idLease = try await currentWriteIDLease()
                    var leases: [[UInt8]: Int64] = [:]
                    for session in plan.sessions { leases[session] = try await lease(of: session, seconds: sessionSeconds) }
                    let request = plan.request(nowMilliseconds: nowMilliseconds, writeIDLease: idLease, sessionLeases: leases)
                    result = .success(try await client.txn(request, idempotent: true))  // the write id makes it so
                } catch {
                    result = .failure(.etcd(error))
                    guard attempt == 0, error.code == .rejected, error.message.contains("lease not found") else { break }
                    writeIDLease.withLock { $0 = nil }
                    sessionLeases.withLock { known in for session in plan.sessions { known[session] = nil } }
                    continue
                }
                break
            }
            return .answered(token: token, result)
        }
    }

    /// Renews session `session` for `ttlMilliseconds` (starting it if it is new), or ends it
    /// (0): its keys are deleted in one revision. The answer comes back as `.keptAlive(token, …)`.
    ///
    /// etcd keeps a lease's time to live: a session lives for the time of the `KeepAlive` or
    /// put that started it, in whole seconds; later `KeepAlive`s renew it for that time.
    /// - Parameter sessionLimit: the sessions a writer may hold (0: no limit); one more is not started.
    func keepAlive(_ session: [UInt8], ttlMilliseconds: UInt64, token: UInt64, nowMilliseconds: UInt64, sessionLimit: Int) {
        run(token: token) { [self] () async -> EtcdLinkEvent in
            do throws(EtcdError) {
                if ttlMilliseconds == 0 {
                    if let lease = try await existingLease(of: session) {
                        try await client.revokeLease(lease)
                        sessionLeases.withLock { $0[session] = nil }
                        // The revocation's revision writes no clock: one that does follows, so
                        // that other fronts' consistent reads wait for the session's end.
                        _ = try await client.txn(.with {
                            $0.success = [.with { $0.requestPut = .with {
                                $0.key = layout.clockKey
                                $0.value = EtcdLayout.clockValue(milliseconds: nowMilliseconds, isExpiry: false)
                            } }]
                        }, idempotent: true)
                    }
                    return .keptAlive(token: token, .success(.init()))
                }
                for _ in 0..<2 {
                    guard try await mayStart(session, limit: sessionLimit) else {
                        return .keptAlive(token: token, .failure(.sessionLimit(sessionLimit)))
                    }
                    let lease = try await self.lease(of: session, seconds: Self.seconds(ttlMilliseconds))
                    let left = try await client.renewLease(lease)
                    guard left > 0 else {
                        sessionLeases.withLock { $0[session] = nil }
                        continue
                    }
                    let keys = try await client.leaseTimeToLive(lease).keys.count
                    return .keptAlive(token: token, .success(.with {
                        $0.keys = UInt32(clamping: max(keys - 1, 0))  // the session's own key is on it too
                        $0.expiresAtMs = nowMilliseconds &+ UInt64(left) * 1000
                    }))
                }
                return .keptAlive(token: token, .failure(.etcd(EtcdError(.unavailable, "the session's lease ended while it was renewed"))))
            } catch {
                return .keptAlive(token: token, .failure(.etcd(error)))
            }
        }
    }

    /// Learns a read index: the revision of the commit clock, by a linearizable read (etcd's
    /// leader confirms it still leads). Every front writes the clock in each transaction it makes
    /// and acknowledges a write only after etcd committed it, so every write acknowledged at any
    /// front before this call is at or below it. The answer comes back as `.readIndex(token, …)`.
    func readIndex(token: UInt64) {
        run(token: token) { [self] () async -> EtcdLinkEvent in
            do throws(EtcdError) {
                let clock = try await client.range(.with { $0.key = layout.clockKey; $0.keysOnly = true })
                return .readIndex(token: token, .success(UInt64(max(clock.kvs.first?.modRevision ?? 0, 0))))
            } catch {
                return .readIndex(token: token, .failure(error))
            }
        }
    }

    /// Expires `key` as of its write at `modRevision`, unless another front did or it was written again.
    func expire(_ key: String, modRevision: UInt64, nowMilliseconds: UInt64) {
        run(token: nil) { [self] () async -> EtcdLinkEvent? in
            do throws(EtcdError) {
                _ = try await client.txn(EtcdWritePlan.expiry(of: key, modRevision: modRevision, nowMilliseconds: nowMilliseconds,
                                                              layout: layout), idempotent: true)
                return nil
            } catch {
                return .expiryNotSent(key: key, modRevision: modRevision)
            }
        }
    }

    /// Runs `work` as a task this link owns (ended by ``close()``) and reports what it returns.
    private func run(token: UInt64?, _ work: @escaping @Sendable () async -> EtcdLinkEvent?) {
        let key = token ?? UInt64.random(in: (1 << 63)...UInt64.max)
        let task = Task { [self] in
            let event = await work()
            writes.withLock { _ = $0?.removeValue(forKey: key) }
            if let event { report(event) }
        }
        let added = writes.withLock { tasks -> Bool in
            guard tasks != nil else { return false }
            tasks![key] = task
            return true
        }
        if !added { task.cancel() }
    }

    /// Whole seconds, at least 1, for a time to live in milliseconds.
    private static func seconds(_ milliseconds: UInt64) -> Int64 {
        Int64(clamping: max((milliseconds + 999) / 1000, 1))
    }

    /// The lease of `session`, if it has one in etcd.
    private func existingLease(of session: [UInt8]) async throws(EtcdError) -> Int64? {
        if let known = sessionLeases.withLock({ $0[session] }) { return known }
        let found = try await client.range(.with { $0.key = layout.sessionKey(session) }).kvs.first
        return found.flatMap { Int64(String(decoding: $0.value, as: UTF8.self)) }
    }

    /// Whether `session` exists in etcd, or its writer (the namespace it is in) holds fewer than
    /// `limit` sessions there (0: no limit). Several fronts starting sessions of one writer at
    /// the same moment may each see room for one.
    private func mayStart(_ session: [UInt8], limit: Int) async throws(EtcdError) -> Bool {
        guard limit > 0, try await existingLease(of: session) == nil else { return true }
        let namespace = Array(session.prefix(through: session.firstIndex(of: 0) ?? session.endIndex - 1))
        let prefix = Array(layout.sessionKey(namespace))
        let held = try await client.range(.with {
            $0.key = Data(prefix)
            $0.rangeEnd = Data(EtcdClient.rangeEnd(ofPrefix: prefix))
            $0.countOnly = true
        }).count
        return held < limit
    }

    /// The lease of `session`: the one it has, or one of `seconds` started now (by this front, or
    /// by another that started it at the same moment).
    private func lease(of session: [UInt8], seconds: Int64) async throws(EtcdError) -> Int64 {
        if let existing = try await existingLease(of: session) {
            sessionLeases.withLock { $0[session] = existing }
            return existing
        }
        let granted = try await client.grantLease(seconds: seconds).id
        let key = layout.sessionKey(session)
        let created = try await client.txn(.with {
            $0.compare = [.with { $0.key = key; $0.target = .create; $0.result = .equal; $0.createRevision = 0 }]
            $0.success = [.with { $0.requestPut = .with { $0.key = key; $0.value = Data(String(granted).utf8); $0.lease = granted } }]
            $0.failure = [.with { $0.requestRange = .with { $0.key = key } }]
        }, idempotent: true)
        var lease = granted
        if !created.succeeded, let theirs = created.responses.first?.responseRange.kvs.first.flatMap({ Int64(String(decoding: $0.value, as: UTF8.self)) }) {
            try? await client.revokeLease(granted)
            lease = theirs
        }
        sessionLeases.withLock { $0[session] = lease }
        return lease
    }

    /// The lease for write ids: granted for twice ``writeIDSeconds`` and used for half of that.
    private func currentWriteIDLease() async throws(EtcdError) -> Int64 {
        if let lease = writeIDLease.withLock({ $0 }), ContinuousClock.now - lease.grantedAt < .seconds(Self.writeIDSeconds) {
            return lease.id
        }
        let granted = try await client.grantLease(seconds: Self.writeIDSeconds * 2)
        writeIDLease.withLock { $0 = (granted.id, .now) }
        return granted.id
    }

    // MARK: The watch

    /// Follows the cluster until closed: takes its state when the journal's is not its own, then
    /// watches from the revision after the last one applied; reports whether a member answers.
    private func follow(after journaled: UInt64, journalEpoch: UInt64, lastCommitMilliseconds: UInt64) async {
        var after = journaled
        var epoch: UInt64?
        var reader = EtcdChangeReader(layout: layout, lastCommitMilliseconds: lastCommitMilliseconds)
        // Watches that ended in a row without a word: the front says it cannot reach etcd once every
        // member has been tried (at once when none has a leader, each refusing in a moment), not
        // when one member goes quiet and the next takes over.
        var failures = 0
        let heard = Locked(false)
        while !Task.isCancelled {
            do throws(EtcdError) {
                heard.withLock { $0 = false }
                let clusterEpoch = try await self.epoch()
                if after == 0 || clusterEpoch != (epoch ?? journalEpoch) {
                    after = try await takeState(epoch: clusterEpoch, reader: &reader)
                }
                epoch = clusterEpoch
                let range = layout.watchedRange
                let progress = Locked((after: after, reader: reader))
                defer { (after, reader) = progress.withLock { ($0.after, $0.reader) } }
                try await client.watch(prefix: range.start, end: range.end, from: Int64(after + 1), progressInterval: .seconds(1)) { [self] update in
                    heard.withLock { $0 = true }
                    switch update {
                    case .created(let head), .progress(let head):
                        report(.status(reachable: true, headRevision: UInt64(max(head, 0))))
                    case .events(let events, _) where events.contains(where: { $0.kv.key == layout.generationKey }):
                        // A new generation: the epoch is made again, and the state taken anew.
                        return false
                    case .events(let events, let head):
                        let revisions = progress.withLock { state in
                            state.after = UInt64(max(events.last?.kv.modRevision ?? 0, 0))
                            return state.reader.revisions(from: events)
                        }
                        if !revisions.isEmpty { report(.revisions(revisions)) }
                        report(.followed(through: UInt64(max(events.last?.kv.modRevision ?? 0, 0))))
                        report(.status(reachable: true, headRevision: UInt64(max(head, 0))))
                    }
                    return !Task.isCancelled
                }
            } catch {
                if Task.isCancelled || error.code == .closed { return }
                if error.code == .compacted {
                    logger.notice("etcd compacted history this front still needed: it takes the cluster's state anew", metadata: [
                        "front.after": "\(after)", "etcd.compacted": "\(error.compactedRevision)"])
                    after = 0
                    continue
                }
                failures = heard.withLock { $0 } ? 1 : failures + 1
                guard failures >= client.endpoints.count else {
                    logger.info("an etcd watch ended; following from the next member", metadata: ["error": "\(error)"])
                    continue
                }
                if wasReachable.withLock({ $0 }) {
                    logger.warning("etcd cannot be followed; serving what this front holds", metadata: ["error": "\(error)"])
                }
                report(.status(reachable: false, headRevision: 0))
                try? await Task.sleep(for: .milliseconds(200))
            }
        }
    }

    /// The cluster's epoch: its id mixed with the generation and a random number kept under the
    /// prefix (`GENERATION NONCE`, created as generation 1 by the first front), so that two
    /// clusters made alike (the same token and member URLs give the same id) differ.
    private func epoch() async throws(EtcdError) -> UInt64 {
        let key = layout.generationKey
        let fresh = "1 " + String(UInt64.random(in: 1...UInt64.max), radix: 16)
        let created = try await client.txn(.with {
            $0.compare = [.with { $0.key = key; $0.target = .create; $0.result = .equal; $0.createRevision = 0 }]
            $0.success = [.with { $0.requestPut = .with { $0.key = key; $0.value = Data(fresh.utf8) } }]
            $0.failure = [.with { $0.requestRange = .with { $0.key = key } }]
        }, idempotent: true)
        let text = created.succeeded ? fresh : String(decoding: created.responses.first?.responseRange.kvs.first?.value ?? Data(), as: UTF8.self)
        let parts = text.split(separator: " ")
        guard let first = parts.first, let generation = UInt64(first), parts.count <= 2,
              let nonce = parts.count == 2 ? UInt64(parts[1], radix: 16) : 0 else {
            throw EtcdError(.rejected, "\(String(decoding: key, as: UTF8.self)) holds '\(text)', not 'GENERATION [NONCE]'")
        }
        return EtcdLayout.epoch(clusterID: created.header.clusterID ^ nonce, generation: generation)
    }

    /// Reads every key under the prefix at one revision and reports it as the state to take.
    /// - Returns: that revision.
    private func takeState(epoch: UInt64, reader: inout EtcdChangeReader) async throws(EtcdError) -> UInt64 {
        let range = layout.watchedRange
        var entries: [JournalEntry] = []
        var revision: Int64 = 0
        var start = Data(range.start)
        while true {
            let page = try await client.range(.with {
                $0.key = start
                $0.rangeEnd = Data(range.end)
                $0.revision = revision
                $0.limit = 10_000
            })
            if revision == 0 { revision = page.header.revision }
            for kv in page.kvs { if let entry = reader.entry(kv) { entries.append(entry) } }
            guard page.more, let last = page.kvs.last else { break }
            start = last.key + Data([0])
        }
        let taken = UInt64(max(revision, 0))
        report(.reset(epoch: epoch, revision: taken, entries: entries))
        report(.status(reachable: true, headRevision: taken))
        return taken
    }
}
#endif
