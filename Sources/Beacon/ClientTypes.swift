import BeaconProtocol
import Foundation

/// How the client as a whole stands with the daemon.
public enum ConnectionState: String, Sendable, Equatable, CustomStringConvertible {
    /// Nothing heard from the daemon yet (it may not be running).
    case connecting
    /// The daemon answers; some mirror is taking its first snapshot or repairing a gap.
    case syncing
    /// Every mirror holds the daemon's state and heartbeats arrive.
    case live
    /// Heartbeats stopped (daemon down, connection lost), or the daemon is a relay that cannot
    /// reach its upstream: mirrors show the last known values.
    case stale

    public var description: String { rawValue }
}

/// Counters of a client's work, for monitoring and tests.
public struct ClientStatistics: Sendable, Equatable {
    /// Gaps (dropped publications, lost connections) repaired from the journal with a delta.
    public var repairs: Int
    /// Mirrors replaced by a snapshot after their first sync (new journal, compacted history).
    public var resyncs: Int
    /// Revisions handed to the mirrors.
    public var revisions: Int
    /// Snapshots taken (first syncs without a local journal, and resyncs).
    public var snapshots: Int
    /// First syncs done with a delta from the local journal's bookmark instead of a snapshot.
    public var resumes: Int
    /// Bundles received: messages that each carried a group commit's diffs under a followed
    /// prefix (``BeaconConfiguration/receivesBundles``).
    public var bundles: Int
}

/// What a committed write did.
public struct WriteResult: Sendable, Equatable {
    /// The revision the write committed at; the writer's own mirrors are at or past it.
    public var revision: UInt64
    /// Per operation, the key's version after it (0 for a delete).
    public var versions: [UInt64]
    /// Whether the daemon had already committed this write (a retry); the result is the first one's.
    public var replayed: Bool
}

/// One operation of a multi-key transaction (``BeaconClient/transaction(_:)``).
public struct TransactionOperation: Sendable {
    var op: Beacon_V1_TxnOp
    let key: String
    var boundToSession = false

    /// Writes `value` to `key`.
    /// - Parameters:
    ///   - ifVersion: apply only if the key's version equals this (0: the key must not exist).
    ///   - ttl: delete the key this long after the transaction.
    ///   - boundToSession: delete the key when the writing client's session ends.
    /// - Throws: ``BeaconError`` with `.encoding` when the value cannot be encoded.
    public static func set<Value: Encodable>(_ key: String, _ value: Value, ifVersion: UInt64? = nil,
                                             ttl: Duration? = nil, boundToSession: Bool = false) throws(BeaconError) -> TransactionOperation {
        let put = try Beacon_V1_Put.make(key, value, ifVersion: ifVersion, createOnly: false, ttl: ttl)
        return TransactionOperation(op: .with { $0.op = .put(put) }, key: key, boundToSession: boundToSession)
    }

    /// Deletes `key` (which must exist).
    /// - Parameter ifVersion: apply only if the key's version equals this.
    public static func delete(_ key: String, ifVersion: UInt64? = nil) -> TransactionOperation {
        var delete = Beacon_V1_Delete()
        delete.key = key
        if let ifVersion { delete.ifVersion = ifVersion }
        return TransactionOperation(op: .with { $0.op = .delete(delete) }, key: key)
    }
}

/// One change from the journal, as a history stream delivers it.
public struct KeyChange: Sendable, Equatable {
    /// What happened to the key.
    public enum Kind: Sendable, Equatable {
        /// Written.
        case set
        /// Deleted by a client.
        case delete
        /// Deleted because its TTL ran out (or its writer's session ended).
        case expire
    }

    /// The key.
    public var key: String { event.change.key }
    /// What happened.
    public var kind: Kind {
        switch event.change.kind {
        case .put: .set
        case .delete: .delete
        default: .expire
        }
    }
    /// The revision of the change.
    public var revision: UInt64 { event.revision }
    /// The change's index within its revision, and the revision's number of changes.
    public var part: (index: Int, of: Int) { (Int(event.part), Int(event.parts)) }
    /// The key's version after the change (0 after a delete).
    public var version: UInt64 { event.change.version }
    /// When the daemon committed the change.
    public var timestamp: Date { Date(timeIntervalSince1970: Double(event.timestampMs) / 1000) }
    /// The value written, as compact JSON (`null` for deletes).
    public var jsonValue: String { event.change.hasValue ? event.change.value.jsonText : "null" }

    let event: Beacon_V1_Event

    init(_ event: Beacon_V1_Event) { self.event = event }

    /// The value written, decoded as `type`.
    /// - Throws: ``BeaconError`` with `.typeMismatch` (or `.notFound` for a deletion).
    public func value<Value: Decodable>(as type: Value.Type) throws(BeaconError) -> Value {
        guard kind == .set else { throw BeaconError(.notFound, "\(key) was deleted at revision \(revision)", key: key) }
        return try decodeValue(type, from: event.change.value, key: key)
    }

    public static func == (lhs: KeyChange, rhs: KeyChange) -> Bool { lhs.event == rhs.event }
}

/// What a history stream (``BeaconClient/history(of:exact:from:)``) delivers.
public enum HistoryEvent: Sendable, Equatable {
    /// One change, in revision order, never twice, with no gaps.
    case change(KeyChange)
    /// History before the requested revision was compacted away (or the journal was replaced):
    /// here is the state at `revision` instead, and changes after it follow.
    case resynced(revision: UInt64, state: [KeyChange])
}

func decodeValue<Value: Decodable>(_ type: Value.Type, from value: Beacon_V1_Value, key: String) throws(BeaconError) -> Value {
    do {
        return try ValueDecoder().decode(type, from: value)
    } catch {
        throw BeaconError(.typeMismatch, "\(key) holds \(value.jsonText), which is not a \(Value.self): \(describe(error))",
                          key: key, underlying: error as? DecodingError)
    }
}

private func describe(_ error: any Error) -> String {
    guard let error = error as? DecodingError else { return "\(error)" }
    switch error {
    case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context), .dataCorrupted(let context):
        let path = context.codingPath.map(\.stringValue).joined(separator: ".")
        return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
    @unknown default:
        return "\(error)"
    }
}

extension Beacon_V1_Put {
    static func make<Value: Encodable>(_ key: String, _ value: Value, ifVersion: UInt64?, createOnly: Bool,
                                       ttl: Duration?) throws(BeaconError) -> Beacon_V1_Put {
        var put = Beacon_V1_Put()
        put.key = key
        do {
            put.value = try ValueEncoder().encode(value)
        } catch {
            throw BeaconError(.encoding, "cannot encode a \(Value.self) for \(key): \(error)", key: key, underlying: error as? EncodingError)
        }
        if let ifVersion { put.ifVersion = ifVersion }
        put.createOnly = createOnly
        if let ttl {
            let (seconds, attoseconds) = ttl.components
            put.ttlMs = UInt64(max(1, seconds * 1000 + attoseconds / 1_000_000_000_000_000))
        }
        return put
    }
}

/// What a read (``BeaconClient/read(_:consistency:)``, ``BeaconClient/list(prefix:consistency:)``)
/// must see.
public enum ReadConsistency: Sendable, Equatable {
    /// Every write the daemon this client talks to has acknowledged, its own clients' included
    /// (at an etcd front or a relay: its copy, which may trail writes acknowledged elsewhere by
    /// a few milliseconds). Answered at once.
    case local
    /// Every write acknowledged anywhere before the read: at any front of the same etcd
    /// cluster, at a relay's upstream. A front asks etcd for its revision first (one round trip
    /// to etcd's leader), a relay its upstream, and either answers once its copy holds it. A
    /// relay or front that predates consistent reads makes it fail with `.rejected`.
    case linearizable
}

/// A key's current state, as a read returns it.
public struct StoredValue: Sendable, Equatable {
    /// The key.
    public var key: String { kv.key }
    /// Writes to the key since it was created (1 after the create).
    public var version: UInt64 { kv.version }
    /// The revision that created the key.
    public var createRevision: UInt64 { kv.createRevision }
    /// The revision of the key's last write.
    public var modRevision: UInt64 { kv.modRevision }
    /// The value, as compact JSON.
    public var jsonValue: String { kv.value.jsonText }

    let kv: Beacon_V1_KeyValue

    init(_ kv: Beacon_V1_KeyValue) { self.kv = kv }

    /// The value, decoded as `type`.
    /// - Throws: ``BeaconError`` with `.typeMismatch`.
    public func value<Value: Decodable>(as type: Value.Type) throws(BeaconError) -> Value {
        try decodeValue(type, from: kv.value, key: kv.key)
    }
}
