import BeaconProtocol
import BeaconSignals

/// Every key under a prefix, mirrored as one read-only signal: a dictionary from key to value
/// that gains and loses keys as the daemon's do.
///
/// `value` is the whole dictionary (a tracked read that changes once per applied batch);
/// `keys` changes only when keys appear or disappear; `subscript` reads one entry. Values that
/// do not decode as `Value` are left out of the dictionary and listed in `errors`.
///
/// Values are decoded once, when they arrive. Holding on to a copy of `value` across updates
/// makes the next update copy the dictionary; read it, use it, let it go.
public final class RemoteMap<Value: Codable & Sendable>: Signal<[String: Value]> {
    /// The prefix mirrored.
    public let prefix: String
    private let table: PrefixTable
    private let connection: Signal<ConnectionState>
    private var decoded: [String: Value] = [:]
    private var decodeErrors: [String: BeaconError] = [:]
    private let sortedKeys: Computed<[String]>

    init(table: PrefixTable, connection: Signal<ConnectionState>) {
        prefix = table.prefix
        self.table = table
        self.connection = connection
        let membership = table.membership
        sortedKeys = computed {
            _ = membership.value
            return table.entries.keys.sorted()
        }
        super.init()
        for (key, kv) in table.entries { store(key, kv) }
        table.observers.append { [unowned self] key, kv in store(key, kv) }
    }

    // Runs once per update. Unspecialized, each dictionary write looks up the generic types'
    // metadata at run time, which cost more than the write; the common value types get code of
    // their own, which the generic entry dispatches to.
    @_specialize(where Value == Int)
    @_specialize(where Value == Int64)
    @_specialize(where Value == Double)
    @_specialize(where Value == Bool)
    @_specialize(where Value == String)
    private func store(_ key: String, _ kv: Beacon_V1_KeyValue?) {
        guard let kv else {
            decoded[key] = nil
            decodeErrors[key] = nil
            return
        }
        do throws(BeaconError) {
            decoded[key] = try decodeValue(Value.self, from: kv.value, key: key)
            if !decodeErrors.isEmpty { decodeErrors[key] = nil }
        } catch {
            decoded[key] = nil
            decodeErrors[key] = error
        }
    }

    /// Every live key under the prefix with its value.
    public override var value: [String: Value] {
        _ = table.changes.value
        return decoded
    }

    /// The dictionary without tracking a dependency.
    public override func peek() -> [String: Value] { decoded }

    /// The value of one key under the prefix, `nil` if it does not exist (or does not decode).
    public subscript(key: String) -> Value? {
        _ = table.changes.value
        return decoded[key]
    }

    /// The live keys, sorted; changes only when keys appear or disappear.
    public var keys: [String] { sortedKeys.value }

    /// How many keys are live under the prefix.
    public var count: Int {
        _ = table.membership.value
        return table.entries.count
    }

    /// Keys whose value does not decode as `Value`, with the reason.
    public var errors: [String: BeaconError] {
        _ = table.changes.value
        return decodeErrors
    }

    /// The state of one key: version and revisions (`nil` if it does not exist).
    public func metadata(of key: String) -> RemoteMetadata? {
        _ = table.changes.value
        guard let kv = table.entries[key] else { return nil }
        return RemoteMetadata(kv)
    }

    /// Whether the mirror is live, syncing or stale.
    public var status: RemoteStatus {
        RemoteStatus(synced: table.synced.value, cached: table.cached.value, connection: connection.value)
    }
}
