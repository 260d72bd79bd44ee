import BeaconProtocol
import Testing

/// Key files and configuration lines with Z85 keys, which contain `#` — and may start with one.
@Suite(.timeLimit(.minutes(3)))
struct CurveKeyFileTests {
    static let startsWithHash = "#" + String(repeating: "a", count: 38) + "#"
    static let holdsHash = "ab#" + String(repeating: "c", count: 37)

    @Test func aKeyThatStartsWithOrHoldsAHashSignReadsBack() throws {
        for key in [Self.startsWithHash, Self.holdsHash] {
            let file = CurveKeyFile(publicKey: key, secretKey: key)
            #expect(try CurveKeyFile(parsing: file.text) == file, "\(key)")
        }
    }

    @Test func commentsStillEndLinesAndFillThem() throws {
        let text = "# a key pair\npublic = \(Self.startsWithHash)   # handed out\n  # secret below\nsecret = \(Self.holdsHash)\n"
        #expect(try CurveKeyFile(parsing: text) == CurveKeyFile(publicKey: Self.startsWithHash, secretKey: Self.holdsHash))
        #expect(ConfigurationLine.strippingComment("allow = key:\(Self.startsWithHash) read=*  # the box") == "allow = key:\(Self.startsWithHash) read=*")
        #expect(ConfigurationLine.strippingComment("  # only a comment") == "")
        #expect(ConfigurationLine.strippingComment("upstream_server_key = \(Self.startsWithHash)") == "upstream_server_key = \(Self.startsWithHash)")
    }
}
