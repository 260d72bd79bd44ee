import BeaconProtocol
import Foundation
import SwiftProtobuf
import Testing

@Suite(.timeLimit(.minutes(3)))
struct FastPutTests {
    private func parse(_ request: Beacon_V1_Request) throws -> FastPut? {
        let bytes: [UInt8] = try request.serializedBytes()
        return bytes.withUnsafeBytes { FastPut.parse($0) }
    }

    @Test(arguments: [
        Beacon_V1_Value.with { $0.nullValue = .nullValue },
        .with { $0.boolValue = true },
        .with { $0.intValue = -42 },
        .with { $0.doubleValue = 2.5 },
        .with { $0.stringValue = "héllo" },
        .with { $0.bytesValue = Data([0, 1, 2]) },
        .with { $0.stringValue = "" },
    ])
    func scalarPutsParseToWhatSwiftProtobufDecodes(_ value: Beacon_V1_Value) throws {
        let request = Beacon_V1_Request.with {
            $0.id = 300
            $0.put = .with {
                $0.key = "net.wifi.ssid"
                $0.value = value
                $0.ifVersion = 0
                $0.createOnly = true
                $0.ttlMs = 1500
                $0.writeID = Data([7, 7])
            }
        }
        let put = try #require(try parse(request))
        #expect(put.id == 300)
        #expect(put.key == "net.wifi.ssid")
        #expect(try Beacon_V1_Value(serializedBytes: put.encodedValue) == value)
        #expect(put.encodedValue == (try value.serializedBytes() as [UInt8]))
        #expect(put.ifVersion == 0 && put.createOnly && put.ttlMilliseconds == 1500 && put.writeID == [7, 7])
    }

    @Test func everythingElseIsLeftToSwiftProtobuf() throws {
        #expect(try parse(.with { $0.id = 1; $0.put = .with { $0.key = "k"; $0.value.listValue.items = [.with { $0.intValue = 1 }] } }) == nil)
        #expect(try parse(.with { $0.id = 1; $0.put = .with { $0.key = "k"; $0.value.mapValue.entries = ["a": .with { $0.intValue = 1 }] } }) == nil)
        #expect(try parse(.with { $0.id = 1; $0.put = .with { $0.key = "k" } }) == nil)  // no value
        #expect(try parse(.with { $0.id = 1; $0.delete = .with { $0.key = "k" } }) == nil)
        #expect(try parse(.with { $0.id = 1; $0.get = .with { $0.key = "k" } }) == nil)
        // Invalid UTF-8 in a string value, a value with two fields, trailing garbage, truncation.
        let key: [UInt8] = [0x0A, 0x01, 0x6B]
        for value: [UInt8] in [[0x2A, 0x02, 0xC3, 0x28], [0x10, 0x01, 0x18, 0x02], [0x10, 0x01, 0xFF], [0x2A, 0x05, 0x61]] {
            let put = key + [0x12, UInt8(value.count)] + value
            let request: [UInt8] = [0x08, 0x01, 0x6A, UInt8(put.count)] + put
            #expect(request.withUnsafeBytes { FastPut.parse($0) } == nil, "\(value)")
        }
    }
}

extension FastPut: Equatable {
    public static func == (a: FastPut, b: FastPut) -> Bool {
        a.id == b.id && a.key == b.key && a.encodedValue == b.encodedValue && a.ifVersion == b.ifVersion
            && a.createOnly == b.createOnly && a.ttlMilliseconds == b.ttlMilliseconds && a.writeID == b.writeID
    }
}
