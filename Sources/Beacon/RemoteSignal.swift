import BeaconProtocol
import BeaconSignals
import Foundation

/// How far a mirrored key can be trusted.
public enum RemoteStatus: String, Sendable, Equatable, CustomStringConvertible {
    /// The daemon has not been reached yet; the value is the default.
    case connecting
    /// The daemon answers; this key's first snapshot is on its way.
    case syncing
    /// The value is the daemon's, kept current.
    case live
    /// The connection is lost: the value is the last one known and may be out of date.
    case stale

    public var description: String { rawValue }
}

extension RemoteStatus {
    /// A mirror's status from whether it ever synced, whether its state is only the local
    /// journal's, and how the client stands.
    init(synced: Bool, cached: Bool = false, connection: ConnectionState) {
        if cached {
            self = .stale
            return
        }
        self = switch connection {
        case .connecting: synced ? .stale : .connecting
        case .syncing, .live: synced ? .live : .syncing
        case .stale: .stale
        }
    }
}

/// A key's bookkeeping at the daemon, as mirrored.
public struct RemoteMetadata: Sendable, Equatable {
    /// Whether the key exists (false before the first sync, and after a delete or expiry).
    public var exists: Bool
    /// Writes to the key since it was created (0 when it does not exist).
    public var version: UInt64
    /// The revision that created the key's current life.
    public var createRevision: UInt64
    /// The revision of the key's last write.
    public var modRevision: UInt64
    /// When the key's last write was committed, by the daemon's clock; `nil` when the key does
    /// not exist or the daemon predates commit times on current values.
    public var modifiedAt: Date?

    /// Creates metadata.
    public init(exists: Bool, version: UInt64, createRevision: UInt64, modRevision: UInt64, modifiedAt: Date? = nil) {
        self.exists = exists
        self.version = version
        self.createRevision = createRevision
        self.modRevision = modRevision
        self.modifiedAt = modifiedAt
    }
}

extension RemoteMetadata {
    /// The metadata of a live key's state.
    init(_ kv: Beacon_V1_KeyValue) {
        self.init(exists: true, version: kv.version, createRevision: kv.createRevision, modRevision: kv.modRevision,
                  modifiedAt: kv.modTimeMs == 0 ? nil : Date(timeIntervalSince1970: Double(kv.modTimeMs) / 1000))
    }
}

/// A daemon's key mirrored as a read-only signal of the reactive core.
///
/// Read `value` in a `computed` or an `effect` like any signal: it changes when the daemon's
/// value does (one batch per revision, so a transaction is never seen half applied). While
/// the key does not exist, or its value does not decode as `Value`, `value` is the default
/// given at creation; `error` then says why. `status`, `metadata` and `isDeleted` are tracked
/// reads too.
///
/// Create it with ``BeaconClient/signal(_:as:default:)`` in the client's delivery context, and
/// read it there.
public final class RemoteSignal<Value: Codable & Sendable>: Signal<Value> {
    /// The key mirrored.
    public let key: String
    private let record: KeyRecord
    private let decoded: Computed<Decoded>
    private let statusSignal: Computed<RemoteStatus>

    struct Decoded {
        var value: Value
        var error: BeaconError?
    }

    init(record: KeyRecord, defaultValue: Value, connection: Signal<ConnectionState>, equals: ((Value, Value) -> Bool)?) {
        key = record.key
        self.record = record
        let state = record.state
        decoded = computed(equals: { old, new in
            guard old.error == nil, new.error == nil, let equals else { return false }
            return equals(old.value, new.value)
        }) {
            guard let kv = state.value.kv else { return Decoded(value: defaultValue, error: nil) }
            do throws(BeaconError) {
                return Decoded(value: try decodeValue(Value.self, from: kv.value, key: kv.key), error: nil)
            } catch {
                return Decoded(value: defaultValue, error: error)
            }
        }
        statusSignal = computed {
            let current = state.value
            return RemoteStatus(synced: current.synced, cached: current.cached, connection: connection.value)
        }
        super.init()
    }

    /// The daemon's value, or the default while the key does not exist or does not decode.
    public override var value: Value { decoded.value.value }

    /// The value without tracking a dependency.
    public override func peek() -> Value { decoded.peek().value }

    /// The daemon's value; throws when it does not decode as `Value` (tracked like `value`).
    /// - Throws: ``BeaconError`` with `.typeMismatch`.
    public func get() throws(BeaconError) -> Value {
        let current = decoded.value
        if let error = current.error { throw error }
        return current.value
    }

    /// Why `value` is the default although the key exists: its value is not a `Value`.
    public var error: BeaconError? { decoded.value.error }

    /// Whether the mirror is live, syncing or stale.
    public var status: RemoteStatus { statusSignal.value }

    /// Version and revisions of the key.
    public var metadata: RemoteMetadata {
        guard let kv = record.state.value.kv else {
            return RemoteMetadata(exists: false, version: 0, createRevision: 0, modRevision: 0)
        }
        return RemoteMetadata(kv)
    }

    /// The key's version (writes since it was created; 0 when it does not exist).
    public var version: UInt64 { metadata.version }

    /// Whether the daemon's state has arrived and the key does not exist in it.
    public var isDeleted: Bool {
        let state = record.state.value
        return state.synced && state.kv == nil
    }
}

extension BeaconError: Equatable {
    /// Errors are equal when their code, message and key are.
    public static func == (lhs: BeaconError, rhs: BeaconError) -> Bool {
        lhs.code == rhs.code && lhs.message == rhs.message && lhs.key == rhs.key
    }
}
