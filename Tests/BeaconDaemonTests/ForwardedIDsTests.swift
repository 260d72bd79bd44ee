@testable import BeaconDaemon
import Foundation
import Testing
import BeaconTestSupport

/// The ids a relay sends upstream for its clients' write ids and sessions.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct ForwardedIDsTests {
    @Test func sipHash128MatchesTheReferenceVectors() {
        // The reference implementation's first vectors (vectors.h, vectors_sip128): key
        // 00 01 … 0f, messages 00 01 … of length 0 and 1.
        let k0 = UInt64(0x0706_0504_0302_0100), k1 = UInt64(0x0f0e_0d0c_0b0a_0908)
        func bytes(_ length: Int) -> [UInt8] {
            var hasher = SipHash128(k0: k0, k1: k1)
            let (low, high) = hasher.hash((0..<length).map { UInt8($0) })
            return withUnsafeBytes(of: low.littleEndian, Array.init) + withUnsafeBytes(of: high.littleEndian, Array.init)
        }
        #expect(bytes(0) == [0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93])
        #expect(bytes(1) == [0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45])
    }

    @Test func idsAreStableAcrossRestartsAndDistinctAcrossClients() throws {
        let path = NSTemporaryDirectory() + "relay-ids-\(UInt64.random(in: 0 ... .max)).key"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = try ForwardedIDs(keyFile: path)
        let again = try ForwardedIDs(keyFile: path)
        let alice = Array("uid:1000".utf8) + [0] + Array("write-1".utf8)
        let bob = Array("uid:1001".utf8) + [0] + Array("write-1".utf8)
        #expect(first.forwarded(alice).count == 16)
        #expect(first.forwarded(alice) == again.forwarded(alice), "a retry after the relay restarts keeps its id")
        #expect(first.forwarded(alice) != first.forwarded(bob), "two clients' ids of the same name stay apart")
        #expect(first.forwarded([]) == [], "no id stays no id")
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
    }
}
