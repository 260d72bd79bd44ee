@_exported import BeaconSignals
import BeaconProtocol
import Dispatch
import Foundation
import Synchronization

/// A connection to `beacond`: mirrors the daemon's keys as read-only signals, writes, and
/// streams history.
///
/// ```swift
/// let client = try BeaconClient()                       // finds the daemon like `beacon` does
/// let ssid = try client.signal("net.wifi.ssid", as: String.self, default: "")
/// let e = effect { print("ssid is \(ssid.value)") }
/// try await client.set("net.wifi.ssid", "home")         // returns once `ssid` shows it
/// ```
///
/// **Threading.** The ZeroMQ sockets live on one I/O thread of the client. Updates reach the
/// signal graph in the delivery context chosen in ``BeaconConfiguration/delivery`` — a serial
/// queue (`.main` by default) or the application's own domain (`.manual`) — as whole
/// revisions, in one batch per delivery: a `computed` never sees half of a transaction and an
/// `effect` runs once for it. Create remote signals, computeds and effects in that context and
/// read them there. Writes (`set`, `delete`, `transaction`) and `history` may be called from
/// anywhere.
///
/// **Faults.** Drops (a full receive queue, a reconnect, a daemon restart) are detected within
/// one heartbeat interval and repaired from the journal; a new journal (epoch) makes every
/// mirror resync. While the daemon is unreachable, mirrors keep their last values and report
/// `stale`; writes are retried with the same write id until ``BeaconConfiguration/writeTimeout``.
public final class BeaconClient: @unchecked Sendable {
    /// Where the client connects and delivers.
    public let configuration: BeaconConfiguration
    private let engine: ClientEngine
    private let inbox: Inbox
    private let graph = MirrorGraph()
    private let nextStreamID = Atomic<Int>(1)
    /// This client's session: keys written with `boundToSession: true` are deleted by the daemon
    /// when the session ends (``close()``, or no renewal for ``BeaconConfiguration/sessionTimeout``).
    private let sessionID: Data

    /// Connects (in the background) to the daemon.
    /// - Parameter configuration: endpoints, delivery context and timeouts; by default the daemon
    ///   found like the `beacon` tool finds it, delivering on the main queue.
    /// - Throws: ``BeaconError`` when the I/O thread cannot be set up, or the local journal cannot
    ///   be opened (`.localJournal`). A daemon that is not running is not an error: the client
    ///   connects when it appears.
    public init(configuration: BeaconConfiguration = BeaconConfiguration()) throws(BeaconError) {
        self.configuration = configuration
        let inbox = Inbox()
        self.inbox = inbox
        sessionID = Self.randomID()
        var cache: LocalJournal?
        if let path = configuration.localJournalPath {
            cache = try LocalJournal(path: path)
            graph.startFromCache(cache!.contents)
        }
        engine = try ClientEngine(configuration: configuration, sessionID: sessionID, localJournal: cache) { update in inbox.post(update) }
        let graph = graph
        let drain: @Sendable () -> Void = { [graph = UncheckedGraph(graph)] in inbox.drain(into: graph.graph) }
        switch configuration.delivery {
        case .queue(let queue): inbox.wake = { queue.async(execute: drain) }
        case .manual(let wake): inbox.wake = wake
        }
        engine.start()
    }

    /// Connects to the daemon whose sockets are in `runtimeDirectory`, delivering on `queue`.
    public convenience init(runtimeDirectory: String, deliveringOn queue: DispatchQueue = .main) throws(BeaconError) {
        var configuration = BeaconConfiguration(runtimeDirectory: runtimeDirectory)
        configuration.delivery = .queue(queue)
        try self.init(configuration: configuration)
    }

    deinit {
        engine.stop()
    }

    /// Stops the I/O thread; pending writes fail with `.closed` and history streams finish.
    /// Mirrors keep their last values. Called on deinit too.
    public func close() {
        engine.stop()
    }

    /// What the client has done so far; safe from any thread.
    public var statistics: ClientStatistics {
        ClientStatistics(repairs: engine.repairCount.load(ordering: .relaxed),
                         resyncs: engine.resyncCount.load(ordering: .relaxed),
                         revisions: engine.revisionCount.load(ordering: .relaxed),
                         snapshots: engine.snapshotCount.load(ordering: .relaxed),
                         resumes: engine.resumeCount.load(ordering: .relaxed),
                         bundles: engine.bundleCount.load(ordering: .relaxed))
    }

    /// The client's connection state (a tracked read in the delivery context).
    public var connection: Signal<ConnectionState> { graph.connection.readOnly() }

    /// With `.manual` delivery: applies every update that arrived, in one batch. Call it in the
    /// context that owns the signals when the `wake` closure asks. Harmless when nothing waits.
    public func applyPendingUpdates() {
        inbox.drain(into: graph)
    }

    // MARK: Mirrors

    /// Mirrors `key` as a read-only signal of `Value`. Call it in the delivery context; asking
    /// again for the same key and type gives the same signal.
    /// - Parameters:
    ///   - key: the key, such as `net.wifi.ssid`.
    ///   - type: the Swift type its value decodes as.
    ///   - defaultValue: the value while the key does not exist or does not decode.
    /// - Throws: ``BeaconError`` with `.invalidKey`.
    public func signal<Value: Codable & Sendable & Equatable>(_ key: String, as type: Value.Type = Value.self,
                                                              default defaultValue: Value) throws(BeaconError) -> RemoteSignal<Value> {
        try makeSignal(key, defaultValue: defaultValue, equals: { $0 == $1 })
    }

    /// Mirrors `key` as a read-only signal of a `Value` that is not `Equatable` (every update
    /// counts as a change).
    public func signal<Value: Codable & Sendable>(_ key: String, as type: Value.Type = Value.self,
                                                  default defaultValue: Value) throws(BeaconError) -> RemoteSignal<Value> {
        try makeSignal(key, defaultValue: defaultValue, equals: nil)
    }

    private func makeSignal<Value>(_ key: String, defaultValue: Value,
                                   equals: ((Value, Value) -> Bool)?) throws(BeaconError) -> RemoteSignal<Value> {
        if let problem = KeyPath.problem(key: key) { throw BeaconError(.invalidKey, "invalid key \"\(key)\": \(problem)", key: key) }
        let cacheKey = "k\(key)\u{0}\(ObjectIdentifier(Value.self))"
        if let cached = graph.signalCache[cacheKey] as? RemoteSignal<Value> { return cached }
        let (record, isNew) = graph.record(for: key)
        let signal = RemoteSignal(record: record, defaultValue: defaultValue, connection: graph.connection, equals: equals)
        graph.signalCache[cacheKey] = signal
        if isNew { engine.submit(.follow(prefix: key)) }
        return signal
    }

    /// Mirrors every key under `prefix` as a reactive dictionary of `Value`. Call it in the
    /// delivery context; asking again for the same prefix and type gives the same map.
    /// - Throws: ``BeaconError`` with `.invalidKey` for an invalid prefix.
    public func mirror<Value: Codable & Sendable>(prefix: String, as type: Value.Type = Value.self) throws(BeaconError) -> RemoteMap<Value> {
        if let problem = KeyPath.problem(prefix: prefix) {
            throw BeaconError(.invalidKey, "invalid prefix \"\(prefix)\": \(problem)", key: prefix)
        }
        let cacheKey = "p\(prefix)\u{0}\(ObjectIdentifier(Value.self))"
        if let cached = graph.signalCache[cacheKey] as? RemoteMap<Value> { return cached }
        let (table, isNew) = graph.table(for: prefix)
        let map = RemoteMap<Value>(table: table, connection: graph.connection)
        graph.signalCache[cacheKey] = map
        if isNew { engine.submit(.follow(prefix: prefix)) }
        return map
    }

    // MARK: Writes

    /// Writes `value` to `key`. Returns once the daemon committed it and this client's mirrors
    /// of the key show it (read-your-writes). Retries after a timeout reuse the write id, so the
    /// write applies at most once.
    /// - Parameters:
    ///   - ifVersion: compare-and-set: apply only if the key's version is this (0: absent).
    ///   - ttl: the daemon deletes the key this long after the write.
    ///   - boundToSession: the daemon deletes the key when this client's session ends: on
    ///     ``close()``, or ``BeaconConfiguration/sessionTimeout`` after the process died or lost
    ///     its connection. Another write to the key without it unbinds the key.
    /// - Returns: the committed revision and the key's new version.
    /// - Throws: ``BeaconError``: `.versionConflict`, `.invalidKey`, `.valueTooLarge`,
    ///   `.unreachable`, `.encoding`, …
    @discardableResult
    public func set<Value: Encodable>(_ key: String, _ value: Value, ifVersion: UInt64? = nil, ttl: Duration? = nil,
                                      boundToSession: Bool = false) async throws(BeaconError) -> WriteResult {
        try await put(key, value, ifVersion: ifVersion, createOnly: false, ttl: ttl, boundToSession: boundToSession)
    }

    /// Creates `key` with `value`; fails with `.alreadyExists` if it exists.
    /// - Parameters:
    ///   - ttl: the daemon deletes the key this long after the write.
    ///   - boundToSession: the key goes when this client's session ends (see ``set(_:_:ifVersion:ttl:boundToSession:)``).
    @discardableResult
    public func create<Value: Encodable>(_ key: String, _ value: Value, ttl: Duration? = nil,
                                         boundToSession: Bool = false) async throws(BeaconError) -> WriteResult {
        try await put(key, value, ifVersion: nil, createOnly: true, ttl: ttl, boundToSession: boundToSession)
    }

    private func put<Value: Encodable>(_ key: String, _ value: Value, ifVersion: UInt64?, createOnly: Bool, ttl: Duration?,
                                       boundToSession: Bool) async throws(BeaconError) -> WriteResult {
        var put = try Beacon_V1_Put.make(key, value, ifVersion: ifVersion, createOnly: createOnly, ttl: ttl)
        if boundToSession { put.session = sessionID }
        put.writeID = Self.randomID()
        return try await write(.put(put), keys: [key], bindsSession: boundToSession)
    }

    /// Deletes `key`; fails with `.notFound` if it does not exist.
    /// - Parameter ifVersion: delete only if the key's version is this.
    @discardableResult
    public func delete(_ key: String, ifVersion: UInt64? = nil) async throws(BeaconError) -> WriteResult {
        var delete = Beacon_V1_Delete()
        delete.key = key
        if let ifVersion { delete.ifVersion = ifVersion }
        delete.writeID = Self.randomID()
        return try await write(.delete(delete), keys: [key])
    }

    /// Commits several writes as one revision: all apply or none, and every mirror shows them
    /// in one batch.
    /// - Throws: ``BeaconError`` naming the failing operation in `operationIndex`.
    @discardableResult
    public func transaction(_ operations: [TransactionOperation]) async throws(BeaconError) -> WriteResult {
        var txn = Beacon_V1_Txn()
        txn.ops = operations.map { operation in
            var op = operation.op
            if operation.boundToSession, case .put(var put) = op.op {
                put.session = sessionID
                op.op = .put(put)
            }
            return op
        }
        txn.writeID = Self.randomID()
        return try await write(.txn(txn), keys: operations.map(\.key), bindsSession: operations.contains(where: \.boundToSession))
    }

    private func write(_ op: Beacon_V1_Request.OneOf_Op, keys: [String], bindsSession: Bool = false) async throws(BeaconError) -> WriteResult {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<WriteResult, BeaconError>, Never>) in
            engine.submit(.write(WriteRequest(op: op, keys: keys, bindsSession: bindsSession) { continuation.resume(returning: $0) }))
        }
        return try result.get()
    }

    private static func randomID() -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<16).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    // MARK: Reads

    /// Reads `key` from the daemon (not from a mirror).
    /// - Parameter consistency: `.linearizable` to see every write acknowledged anywhere before
    ///   the call, at every front of an etcd cluster too (``ReadConsistency``).
    /// - Returns: the key's state; nil when it does not exist.
    /// - Throws: ``BeaconError``: `.invalidKey`, `.permissionDenied`, `.upstreamUnavailable` (a
    ///   front that cannot reach etcd, for a linearizable read), `.rejected` (a daemon that cannot
    ///   serve a linearizable read: a relay, or one that predates them), `.unreachable`, …
    public func read(_ key: String, consistency: ReadConsistency = .local) async throws(BeaconError) -> StoredValue? {
        let replies = try await read([.get(.with {
            $0.key = key
            $0.consistent = consistency == .linearizable
        })], consistency: consistency)
        switch replies[0].result {
        case .get(let get): return StoredValue(get.kv)
        case .error(let error) where error.code == .notFound: return nil
        case .error(let error): throw BeaconError(reply: error, operationCount: 1)
        default: throw BeaconError(.rejected, "the daemon answered a Get with \(String(describing: replies[0].result))")
        }
    }

    /// Reads every live key under `prefix` from the daemon, in key order (several requests for
    /// many keys, each seeing what the one before saw at least).
    /// - Parameter consistency: as for ``read(_:consistency:)``; with `.linearizable`, each page.
    public func list(prefix: String, consistency: ReadConsistency = .local) async throws(BeaconError) -> [StoredValue] {
        var values: [StoredValue] = []
        var after = ""
        while true {
            let replies = try await read([.list(.with {
                $0.prefix = prefix
                $0.startAfter = after
                $0.limit = 10_000
                $0.consistent = consistency == .linearizable
            })], consistency: consistency)
            switch replies[0].result {
            case .list(let list):
                values += list.kvs.map(StoredValue.init)
                guard list.more, let last = list.kvs.last else { return values }
                after = last.key
            case .error(let error): throw BeaconError(reply: error, operationCount: 1)
            default: throw BeaconError(.rejected, "the daemon answered a List with \(String(describing: replies[0].result))")
            }
        }
    }

    /// Sends `ops` (one batch) and returns their replies. A linearizable read goes with a `Ping`
    /// ahead of it, whose answer says whether the daemon honours `consistent`.
    private func read(_ ops: [Beacon_V1_Request.OneOf_Op], consistency: ReadConsistency) async throws(BeaconError) -> [Beacon_V1_Reply] {
        let linearizable = consistency == .linearizable
        let sent = (linearizable ? [.ping(.init())] : []) + ops
        let op: Beacon_V1_Request.OneOf_Op = sent.count == 1 ? sent[0]
            : .batch(.with { $0.requests = sent.enumerated().map { index, op in .with { $0.id = UInt64(index + 1); $0.op = op } } })
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Beacon_V1_Reply, BeaconError>, Never>) in
            engine.submit(.read(ReadRequest(op: op) { continuation.resume(returning: $0) }))
        }
        let reply = try result.get()
        guard sent.count > 1 else { return [reply] }
        switch reply.result {
        case .batch(let batch) where batch.replies.count == sent.count:
            if case .ping(let ping) = batch.replies[0].result, !ping.consistentReads, ping.hasUpstream {
                throw BeaconError(.rejected, "beacond \(ping.daemonVersion) at \(configuration.requestEndpoint) mirrors "
                    + "\(ping.upstream.endpoint) and cannot serve a linearizable read: read with .local, or at the upstream")
            }
            return Array(batch.replies.dropFirst())
        case .error(let error):
            throw BeaconError(reply: error, operationCount: 1)
        default:
            throw BeaconError(.rejected, "the daemon answered a batch with \(String(describing: reply.result))")
        }
    }

    // MARK: History

    /// The changes of a key (`exact`) or of every key under a prefix from revision `from` on:
    /// first replayed from the journal, then live, in revision order, never twice, with no gaps.
    /// If the journal no longer holds history that old (compaction) or was replaced, the stream
    /// says so with ``HistoryEvent/resynced(revision:state:)`` and continues from that state.
    ///
    /// The stream ends when the task iterating it is cancelled, when it is dropped, or when the
    /// client is closed.
    /// - Parameters:
    ///   - prefix: a key or prefix.
    ///   - exact: only the key equal to `prefix`.
    ///   - from: the first revision wanted; 0 or 1 for all retained history.
    public func history(of prefix: String, exact: Bool = false, from revision: UInt64 = 0) -> HistoryStream {
        let feed = HistoryFeed()
        if let problem = exact ? KeyPath.problem(key: prefix) : KeyPath.problem(prefix: prefix) {
            feed.finish(throwing: BeaconError(.invalidKey, "invalid key \"\(prefix)\": \(problem)", key: prefix))
            return HistoryStream(feed)
        }
        let id = nextStreamID.wrappingAdd(1, ordering: .relaxed).oldValue
        feed.setOnCancel { [engine] in engine.submit(.cancelHistory(id: id)) }
        engine.submit(.history(HistoryRequest(id: id, prefix: prefix, exact: exact, fromRevision: revision, feed: feed)))
        return HistoryStream(feed)
    }
}

/// The queue between the I/O thread and the delivery context.
private final class Inbox: @unchecked Sendable {
    // NSLock rather than Mutex: ThreadSanitizer sees pthread locks, not the stdlib's futex.
    private let lock = NSLock()
    private var updates: [GraphUpdate] = []
    /// Set once at client creation, before the I/O thread starts.
    var wake: @Sendable () -> Void = {}

    func post(_ update: GraphUpdate) {
        let wasEmpty = lock.withLock {
            updates.append(update)
            return updates.count == 1
        }
        if wasEmpty { wake() }
    }

    /// Applies every waiting update in one batch, then runs the completions among them.
    func drain(into graph: MirrorGraph) {
        let taken = lock.withLock {
            defer { updates.removeAll(keepingCapacity: true) }
            return updates
        }
        guard !taken.isEmpty else { return }
        var completions: [@Sendable () -> Void] = []
        batch {
            for update in taken {
                if case .completion(let complete) = update { completions.append(complete) }
                graph.apply(update)
            }
        }
        for complete in completions { complete() }
    }
}

/// Carries the graph to its delivery queue; the graph is only ever touched there.
private struct UncheckedGraph: @unchecked Sendable {
    let graph: MirrorGraph
    init(_ graph: MirrorGraph) { self.graph = graph }
}
