#if Etcd  // the Etcd trait (Package.swift)
import BeaconProtocol
import Foundation

/// Where an etcd front keeps Beacon's data in etcd, under its prefix P (`etcd_prefix`):
///
/// - `P k/KEY`: a Beacon key. Its etcd revision, version and create revision are Beacon's; the
///   value is a `KeyValue` message holding only `value`, `mod_time_ms` and `expires_at_ms`.
/// - `P t`: the commit clock, written by every transaction a front makes (and after a session it
///   ended, alone): 8 bytes of commit time (Unix milliseconds, big-endian) and a kind byte (0 a
///   write, 1 an expiry). A revision without it (a lease that ran out) takes the last commit time
///   before it. Its revision is a consistent read's read index (``EtcdLink/readIndex(token:)``).
/// - `P w/HEX`: a write id applied, created in its write's transaction (so its create revision
///   is the write's), on a lease that keeps it for half an hour to an hour.
/// - `P s/HEX`: a writer's session (in its writer's namespace): the id of the etcd lease its keys
///   are on, written on that lease, so that it ends with it.
/// - `P generation`: `GENERATION NONCE`, a number and a random hex number that, with etcd's
///   cluster id, make the epoch; raising the number makes every client resync (after etcd was
///   restored from a backup, say).
struct EtcdLayout: Sendable, Equatable {
    let prefix: String

    init(prefix: String) {
        self.prefix = prefix
    }

    private func key(_ suffix: String) -> Data { Data((prefix + suffix).utf8) }

    /// The etcd key of Beacon key `key`.
    func dataKey(_ key: String) -> Data { self.key("k/" + key) }
    var clockKey: Data { key("t") }
    var generationKey: Data { key("generation") }
    /// The etcd key that says the write with `writeID` was applied.
    func writeIDKey(_ writeID: [UInt8]) -> Data {
        key("w/" + writeID.map { String($0, radix: 16).leftPadded(to: 2) }.joined())
    }

    /// The etcd key that names session `session`'s lease.
    func sessionKey(_ session: [UInt8]) -> Data {
        key("s/" + session.map { String($0, radix: 16).leftPadded(to: 2) }.joined())
    }

    /// What the front watches and reads: the generation, the data keys, sessions and the clock
    /// (`P generation` up to `P u`; write ids come after).
    var watchedRange: (start: [UInt8], end: [UInt8]) { (Array((prefix + "generation").utf8), Array((prefix + "u").utf8)) }

    /// The Beacon key an etcd key stands for; nil for the front's bookkeeping.
    func beaconKey(_ etcdKey: Data) -> String? {
        let head = Data((prefix + "k/").utf8)
        guard etcdKey.starts(with: head) else { return nil }
        return String(decoding: etcdKey.dropFirst(head.count), as: UTF8.self)
    }

    func isClock(_ etcdKey: Data) -> Bool { etcdKey == clockKey }

    /// The journal's content scope for a copy of this prefix (FNV-1a of "etcd " + prefix): a
    /// journal that holds another scope is taken anew.
    var scope: UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in Array(("etcd " + prefix).utf8) { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash
    }

    /// The epoch every front of one cluster and generation shows: a mix of the two, never 0.
    static func epoch(clusterID: UInt64, generation: UInt64) -> UInt64 {
        var mixed = clusterID ^ (generation &* 0x9E37_79B9_7F4A_7C15)
        mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
        mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
        mixed ^= mixed >> 31
        return mixed == 0 ? 1 : mixed
    }

    // MARK: Values

    /// A Beacon key's etcd value.
    static func storedValue(encodedValue: [UInt8], modTimeMilliseconds: UInt64, expiresAtMilliseconds: UInt64) -> Data {
        var stored = Beacon_V1_KeyValue()
        stored.modTimeMs = modTimeMilliseconds
        stored.expiresAtMs = expiresAtMilliseconds
        var bytes: [UInt8] = (try? stored.serializedBytes()) ?? []
        // The value as encoded (field 2, length-delimited), so that it is not decoded and encoded again.
        bytes.append(0x12)
        var length = UInt64(encodedValue.count)
        while length >= 0x80 {
            bytes.append(UInt8(length & 0x7F) | 0x80)
            length >>= 7
        }
        bytes.append(UInt8(length))
        bytes += encodedValue
        return Data(bytes)
    }

    /// A stored value's parts: the encoded Beacon value, its commit time and expiry.
    static func parseStoredValue(_ data: Data) -> (encodedValue: [UInt8], modTimeMilliseconds: UInt64, expiresAtMilliseconds: UInt64)? {
        guard let stored = try? Beacon_V1_KeyValue(serializedBytes: data), let value: [UInt8] = try? stored.value.serializedBytes() else {
            return nil
        }
        return (value, stored.modTimeMs, stored.expiresAtMs)
    }

    /// The commit clock's value.
    static func clockValue(milliseconds: UInt64, isExpiry: Bool) -> Data {
        var bytes = withUnsafeBytes(of: milliseconds.bigEndian) { Array($0) }
        bytes.append(isExpiry ? 1 : 0)
        return Data(bytes)
    }

    static func parseClockValue(_ data: Data) -> (milliseconds: UInt64, isExpiry: Bool)? {
        guard data.count == 9 else { return nil }
        let milliseconds = data.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        return (milliseconds, data[data.startIndex + 8] == 1)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
#endif
