import BeaconJournal
import BeaconProtocol

/// Stored value bytes that do not decode as a `Value`: the journal was damaged or written by
/// something else. Answered as an `INTERNAL` error and logged, never sent as an empty value.
struct UndecodableValue: Error, CustomStringConvertible {
    var key: String
    var revision: UInt64
    var reason: String

    var description: String { "the stored value of '\(key)' (revision \(revision)) does not decode: \(reason)" }
}

/// What the daemon keeps (store entries, journaled changes) as wire messages. The journal and the
/// store hold values as the encoded bytes a client sent; they are decoded again here only.
enum StoredValueCodec {
    /// A stored entry as a wire key-value; without `includingValue`, its value is not decoded.
    static func keyValue(_ key: String, _ entry: SignalStore.Entry, includingValue: Bool = true) throws(UndecodableValue) -> Beacon_V1_KeyValue {
        var kv = Beacon_V1_KeyValue()
        kv.key = key
        if includingValue { kv.value = try value(entry.value, key: key, revision: entry.modRevision) }
        kv.version = entry.version
        kv.createRevision = entry.createRevision
        kv.modRevision = entry.modRevision
        kv.expiresAtMs = entry.expiresAtMilliseconds
        kv.modTimeMs = entry.modTimeMilliseconds
        return kv
    }

    static func kind(_ kind: ChangeKind) -> Beacon_V1_Change.Kind {
        switch kind {
        case .put: .put
        case .delete: .delete
        case .expire: .expire
        }
    }

    static func value(_ bytes: [UInt8], key: String, revision: UInt64) throws(UndecodableValue) -> Beacon_V1_Value {
        do {
            return try Beacon_V1_Value(serializedBytes: bytes)
        } catch {
            throw UndecodableValue(key: key, revision: revision, reason: "\(error)")
        }
    }
}
