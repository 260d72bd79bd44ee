import Foundation

/// The write ids and sessions a relay sends upstream in place of its clients' own.
///
/// The upstream keeps ids and sessions in the namespace of the peer that sent them — for every
/// write through a relay, the relay. So the relay names each client's id by its own peer and the
/// id, as the daemon does (`peer 0 id`), and sends a 16-byte keyed hash of that name: within the
/// protocol's 64-byte limit, the same for a retry (also after the relay restarts: the key is kept
/// in the state directory), and, being a pseudorandom function of a secret key (SipHash-2-4,
/// 128-bit output), not one a client can make collide with another client's.
struct ForwardedIDs {
    private let k0: UInt64
    private let k1: UInt64

    /// Reads the key from `path`, or makes one there (mode 0600) when there is none.
    init(keyFile path: String) throws {
        if let data = FileManager.default.contents(atPath: path), data.count == 16 {
            k0 = data.prefix(8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            k1 = data.suffix(8).withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            return
        }
        var generator = SystemRandomNumberGenerator()
        k0 = generator.next()
        k1 = generator.next()
        var bytes = Data()
        withUnsafeBytes(of: k0) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: k1) { bytes.append(contentsOf: $0) }
        let temporary = path + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: bytes, attributes: [.posixPermissions: 0o600]),
              rename(temporary, path) == 0 else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
    }

    /// A key given directly (tests).
    init(k0: UInt64, k1: UInt64) {
        self.k0 = k0
        self.k1 = k1
    }

    /// The id to send upstream for `id` (already in the client's namespace); empty stays empty.
    func forwarded(_ id: [UInt8]) -> [UInt8] {
        guard !id.isEmpty else { return id }
        var hasher = SipHash128(k0: k0, k1: k1)
        let (low, high) = hasher.hash(id)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        withUnsafeBytes(of: low.littleEndian) { bytes.append(contentsOf: $0) }
        withUnsafeBytes(of: high.littleEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }
}

/// SipHash-2-4 with a 128-bit output (Aumasson and Bernstein; the reference's `siphash` with
/// `outlen` 16).
struct SipHash128 {
    private var v0: UInt64
    private var v1: UInt64
    private var v2: UInt64
    private var v3: UInt64

    init(k0: UInt64, k1: UInt64) {
        v0 = 0x736f_6d65_7073_6575 ^ k0
        v1 = 0x646f_7261_6e64_6f6d ^ k1 ^ 0xee
        v2 = 0x6c79_6765_6e65_7261 ^ k0
        v3 = 0x7465_6462_7974_6573 ^ k1
    }

    private mutating func round() {
        v0 &+= v1; v1 = v1.rotatedLeft(13); v1 ^= v0; v0 = v0.rotatedLeft(32)
        v2 &+= v3; v3 = v3.rotatedLeft(16); v3 ^= v2
        v0 &+= v3; v3 = v3.rotatedLeft(21); v3 ^= v0
        v2 &+= v1; v1 = v1.rotatedLeft(17); v1 ^= v2; v2 = v2.rotatedLeft(32)
    }

    private mutating func compress(_ m: UInt64) {
        v3 ^= m
        round(); round()
        v0 ^= m
    }

    /// The two 64-bit halves of the hash of `bytes`.
    mutating func hash(_ bytes: [UInt8]) -> (UInt64, UInt64) {
        let whole = bytes.count / 8 * 8
        var index = 0
        while index < whole {
            var m: UInt64 = 0
            for shift in 0..<8 { m |= UInt64(bytes[index + shift]) << (8 * UInt64(shift)) }
            compress(m)
            index += 8
        }
        var last = UInt64(truncatingIfNeeded: bytes.count) << 56
        for shift in 0..<(bytes.count - whole) { last |= UInt64(bytes[whole + shift]) << (8 * UInt64(shift)) }
        compress(last)
        v2 ^= 0xee
        round(); round(); round(); round()
        let first = v0 ^ v1 ^ v2 ^ v3
        v1 ^= 0xdd
        round(); round(); round(); round()
        let second = v0 ^ v1 ^ v2 ^ v3
        return (first, second)
    }
}

private extension UInt64 {
    func rotatedLeft(_ count: UInt64) -> UInt64 { (self << count) | (self >> (64 - count)) }
}
