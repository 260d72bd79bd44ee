import Foundation
import SwiftProtobuf

extension Beacon_V1_Value {
    /// A value from JSON text: objects become maps, arrays lists, integral numbers ints.
    /// - Returns: `nil` when `json` is not valid JSON.
    public init?(json: String) {
        guard let data = json.data(using: .utf8),
              let object = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
        else { return nil }
        self.init(jsonObject: object)
    }

    /// A value from an object that `JSONSerialization` produced.
    public init(jsonObject: Any) {
        self.init()
        switch jsonObject {
        case is NSNull:
            kind = .nullValue(.nullValue)
        case let number as NSNumber:
            if String(cString: number.objCType) == "c" {  // how Foundation marks JSON true/false
                kind = .boolValue(number.boolValue)
            } else if let int = Int64(exactly: number), !String(describing: number).contains(".") {
                kind = .intValue(int)
            } else {
                kind = .doubleValue(number.doubleValue)
            }
        case let string as String:
            kind = .stringValue(string)
        case let array as [Any]:
            var list = Beacon_V1_ListValue()
            list.items = array.map { Beacon_V1_Value(jsonObject: $0) }
            kind = .listValue(list)
        case let dictionary as [String: Any]:
            var map = Beacon_V1_MapValue()
            map.entries = dictionary.mapValues { Beacon_V1_Value(jsonObject: $0) }
            kind = .mapValue(map)
        default:
            kind = .stringValue(String(describing: jsonObject))
        }
    }

    /// The value as a JSON-compatible object (bytes become base64 strings).
    public var jsonObject: Any {
        switch kind {
        case nil, .nullValue: NSNull()
        case .boolValue(let bool): bool
        case .intValue(let int): int
        case .doubleValue(let double): double
        case .stringValue(let string): string
        case .bytesValue(let bytes): bytes.base64EncodedString()
        case .listValue(let list): list.items.map(\.jsonObject)
        case .mapValue(let map): map.entries.mapValues(\.jsonObject)
        }
    }

    /// The value as compact JSON text with sorted map keys.
    public var jsonText: String {
        let object = jsonObject
        guard let data = try? JSONSerialization.data(
            withJSONObject: object, options: [.fragmentsAllowed, .sortedKeys, .withoutEscapingSlashes])
        else { return "null" }
        return String(decoding: data, as: UTF8.self)
    }
}
