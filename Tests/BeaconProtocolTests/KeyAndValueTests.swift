import BeaconProtocol
import Testing

@Suite(.timeLimit(.minutes(3)))
struct KeyPathTests {
    @Test(arguments: ["a", "net.wifi.ssid", "A-b_c:d@e/f.0", String(repeating: "k", count: 256)])
    func acceptsValidKeys(_ key: String) {
        #expect(KeyPath.problem(key: key) == nil)
    }

    /// A prefix is a prefix of the key's bytes, not of its segments or characters; the
    /// empty prefix covers everything.
    @Test func aKeyIsUnderAPrefixOfItsBytes() {
        #expect("net.wifi.ssid".isUnder(""))
        #expect("net.wifi.ssid".isUnder("net."))
        #expect("net.wifi.ssid".isUnder("net.wi"))
        #expect("net.wifi.ssid".isUnder("net.wifi.ssid"))
        #expect(!"net.wifi.ssid".isUnder("net.wifi.ssid2"))
        #expect(!"net.wifi.ssid".isUnder("Net."))
        #expect(!"net".isUnder("net."))
        #expect(!"".isUnder("a"))
        let long = String(repeating: "segment.", count: 30) + "end"
        #expect(long.isUnder(String(long.dropLast(3))))
        #expect(!long.isUnder(String(long.dropLast(4)) + "x"))
        // Compared as UTF-8 bytes, not as characters.
        #expect("café.x".isUnder("café"))
        #expect(!"cafe.x".isUnder("café"))
        #expect(!"café.x".isUnder("cafe"))
    }

    @Test func rejectsInvalidKeysWithTheReason() {
        #expect(KeyPath.problem(key: "") == .empty)
        #expect(KeyPath.problem(key: String(repeating: "k", count: 257)) == .tooLong(bytes: 257))
        #expect(KeyPath.problem(key: "net wifi") == .invalidCharacter(UInt8(ascii: " "), offset: 3))
        #expect(KeyPath.problem(key: "!h") == .invalidCharacter(UInt8(ascii: "!"), offset: 0))
        #expect(KeyPath.problem(key: "net..x") == .emptySegment(offset: 4))
        #expect(KeyPath.problem(key: ".net") == .emptySegment(offset: 0))
        #expect(KeyPath.problem(key: "net.") == .emptySegment(offset: 4))
        #expect(KeyPath.problem(key: "né") == .invalidCharacter(0xC3, offset: 1))
    }

    /// Every ASCII character is accepted in a segment exactly when it is one of
    /// `A–Z a–z 0–9 _ - : @ /` ('.' separates segments); no byte above 127 is.
    @Test func eachASCIICharacterIsAllowedExactlyWhenTheSpecAllowsIt() {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:@/".utf8)
        for byte in UInt8(0)..<128 where byte != UInt8(ascii: ".") {
            let key = "a" + String(UnicodeScalar(byte)) + "b"
            let expected: KeyPath.Problem? = allowed.contains(byte) ? nil : .invalidCharacter(byte, offset: 1)
            #expect(KeyPath.problem(key: key) == expected, "byte \(byte)")
        }
        for scalar in ["\u{80}", "\u{FF}", "\u{2028}", "\u{1F600}"] {
            let key = "a" + scalar
            #expect(KeyPath.problem(key: key) == .invalidCharacter(Array(scalar.utf8)[0], offset: 1))
        }
    }

    @Test func prefixesMayBeEmptyOrEndInADot() {
        #expect(KeyPath.problem(prefix: "") == nil)
        #expect(KeyPath.problem(prefix: "net.") == nil)
        #expect(KeyPath.problem(prefix: "net.wi") == nil)
        #expect(KeyPath.problem(prefix: "net..") == .emptySegment(offset: 4))
        #expect(KeyPath.problem(prefix: "!") != nil)
    }
}

@Suite(.timeLimit(.minutes(3)))
struct ValueTests {
    @Test func aValueWithNoTypeIsMissing() {
        #expect(Beacon_V1_Value().problem() == .missing)
        var list = Beacon_V1_ListValue()
        list.items = [Beacon_V1_Value()]
        #expect(Beacon_V1_Value.with { $0.listValue = list }.problem() == .missing)
    }

    @Test func nestingDeeperThanTheLimitIsRejected() {
        var value = Beacon_V1_Value.with { $0.intValue = 1 }
        for _ in 0..<WireLimits.maxValueDepth { value = .with { $0.listValue.items = [value] } }
        #expect(value.problem() == nil)
        value = .with { $0.listValue.items = [value] }
        #expect(value.problem() == .tooDeep)
    }

    @Test func oversizedValuesAreRejectedWithTheirSize() {
        let value = Beacon_V1_Value.with { $0.bytesValue = .init(repeating: 0, count: WireLimits.maxValueBytes) }
        guard case .tooLarge(let bytes) = value.problem() else { Issue.record("expected tooLarge"); return }
        #expect(bytes > WireLimits.maxValueBytes)
    }

    @Test func jsonKeepsTypes() throws {
        #expect(try #require(Beacon_V1_Value(json: "true")).kind == .boolValue(true))
        #expect(try #require(Beacon_V1_Value(json: "1")).kind == .intValue(1))
        #expect(try #require(Beacon_V1_Value(json: "1.5")).kind == .doubleValue(1.5))
        #expect(try #require(Beacon_V1_Value(json: "null")).kind == .nullValue(.nullValue))
        #expect(try #require(Beacon_V1_Value(json: "\"x\"")).kind == .stringValue("x"))
        #expect(Beacon_V1_Value(json: "not json") == nil)
        let map = try #require(Beacon_V1_Value(json: #"{"b":[1,false,"s"],"a":{"c":null}}"#))
        #expect(map.jsonText == #"{"a":{"c":null},"b":[1,false,"s"]}"#)
    }
}

@Suite(.timeLimit(.minutes(3)))
struct DiscoveryTests {
    @Test func clientsFindTheUserDaemonThenTheSystemOne() {
        let env = ["XDG_RUNTIME_DIR": "/run/user/1000"]
        #expect(WireEndpoint.clientRuntimeDirectory(environment: env, uid: 1000) { _ in false } == "/run/user/1000/beacon")
        #expect(WireEndpoint.clientRuntimeDirectory(environment: env, uid: 1000) { $0 == "/run/beacon/beacon.req" } == "/run/beacon")
        #expect(WireEndpoint.clientRuntimeDirectory(environment: env, uid: 1000) { _ in true } == "/run/user/1000/beacon")
        #expect(WireEndpoint.clientRuntimeDirectory(environment: [:], uid: 7) { _ in false } == "/tmp/beacon-7")
        #expect(WireEndpoint.clientRuntimeDirectory(environment: ["BEACON_RUNTIME_DIR": "/x"], uid: 7) { _ in true } == "/x")
    }
}
