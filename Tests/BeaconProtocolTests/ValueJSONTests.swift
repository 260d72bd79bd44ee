import BeaconProtocol
import Foundation
import Testing

@Suite("ValueJSON: text that reads back as the same value, every type kept", .timeLimit(.minutes(3)))
struct ValueJSONTests {
    private func value(_ build: (inout Beacon_V1_Value) -> Void) -> Beacon_V1_Value {
        var value = Beacon_V1_Value()
        build(&value)
        return value
    }

    @Test("Every kind of value prints and parses back unchanged")
    func roundTrips() throws {
        let samples: [Beacon_V1_Value] = [
            value { $0.nullValue = .nullValue },
            value { $0.boolValue = true },
            value { $0.intValue = 0 },
            value { $0.intValue = .min },
            value { $0.intValue = .max },
            value { $0.doubleValue = 1 },
            value { $0.doubleValue = -0.0 },
            value { $0.doubleValue = 0.1 },
            value { $0.doubleValue = 1e300 },
            value { $0.doubleValue = .leastNonzeroMagnitude },
            value { $0.doubleValue = .infinity },
            value { $0.doubleValue = -.infinity },
            value { $0.stringValue = "" },
            value { $0.stringValue = "quote \" backslash \\ slash / newline \n tab \t nul \u{0} bell \u{7} é 😀" },
            value { $0.bytesValue = Data() },
            value { $0.bytesValue = Data((0...255).map { UInt8($0) }) },
            value {
                $0.listValue = .with { list in
                    list.items = [value { $0.intValue = 1 }, value { $0.doubleValue = 1 }, value { $0.stringValue = "1" }]
                }
            },
            value {
                $0.mapValue = .with { map in
                    map.entries = ["$bytes": value { $0.stringValue = "a map, not bytes" }]
                }
            },
            value {
                $0.mapValue = .with { map in
                    map.entries = ["$map": value { $0.mapValue = .with { $0.entries = ["$double": value { $0.stringValue = "NaN" }] } }]
                }
            },
            value {
                $0.mapValue = .with { map in
                    map.entries = ["b": value { $0.bytesValue = Data([1]) }, "a": value { $0.listValue = .init() }]
                }
            },
        ]
        for sample in samples {
            let text = ValueJSON.text(sample)
            #expect(try ValueJSON.parse(text) == sample, "\(text)")
        }
        #expect(try ValueJSON.parse(#"{"$double":"NaN"}"#).doubleValue.isNaN)
    }

    @Test("Integers stay ints and numbers with a fraction or exponent doubles; doubles print with one")
    func numberTypes() throws {
        #expect(try ValueJSON.parse("1").kind == .intValue(1))
        #expect(try ValueJSON.parse("-0").kind == .intValue(0))
        #expect(try ValueJSON.parse("1.0").kind == .doubleValue(1))
        #expect(try ValueJSON.parse("1e2").kind == .doubleValue(100))
        #expect(ValueJSON.text(value { $0.doubleValue = 2 }) == "2.0")
        #expect(ValueJSON.text(value { $0.doubleValue = 1e20 }) == "1e+20")
        #expect(ValueJSON.text(value { $0.intValue = 2 }) == "2")
    }

    @Test("Bad text is refused with where; a number too large is out of range, never a string")
    func errors() throws {
        for bad in ["", "{", #"{"a":1"#, "[1,]", "01", "1.", "-", "tru", #""\x""#, "\"a\u{1}\"", #""\ud800""#, "[1] 2",
                    #"{"$bytes":"*"}"#, #"{"$double":"1"}"#, #"{"$map":1}"#, String(repeating: "[", count: 100)] {
            #expect(throws: ValueJSON.ParseError.self, "\(bad)") { try ValueJSON.parse(bad) }
        }
        do {
            _ = try ValueJSON.parse("12345678901234567890")
            Issue.record("parsed")
        } catch {
            #expect(error.isOutOfRange)
        }
        #expect(throws: ValueJSON.ParseError.self) { try ValueJSON.parseLenient("99999999999999999999") }
        #expect(throws: ValueJSON.ParseError.self) { try ValueJSON.parseLenient(#"{"a":1"#) }
        #expect(throws: ValueJSON.ParseError.self) { try ValueJSON.parseLenient(#""open"#) }
        #expect(try ValueJSON.parseLenient("1.2.3").kind == .stringValue("1.2.3"))
        #expect(try ValueJSON.parseLenient("hello world").kind == .stringValue("hello world"))
        #expect(try ValueJSON.parseLenient(" 42 ").kind == .intValue(42))
    }
}
