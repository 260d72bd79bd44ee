import BeaconProtocol
import Foundation

/// Decodes `Decodable` Swift values from Beacon's wire values (`beacon.v1.Value`).
///
/// Maps become keyed containers, lists unkeyed ones. Integers convert between widths when the
/// number fits; a double with no fractional part decodes as an integer and an integer decodes
/// as a double, so JSON written from a shell (`beacon set k 3`) reads as `Double` too. `Data`
/// decodes from bytes; `Date` from a double of seconds since 1970.
struct ValueDecoder {
    func decode<T: Decodable>(_ type: T.Type, from value: Beacon_V1_Value) throws -> T {
        if let fast = Self.decodeScalar(type, from: value) { return fast }
        return try T(from: ValueDecoding(value: value, codingPath: []))
    }

    /// The common scalar types without building a decoder (and without a dynamic cast: the
    /// type is compared first, so the bit cast is to the same type).
    private static func decodeScalar<T>(_ type: T.Type, from value: Beacon_V1_Value) -> T? {
        switch value.kind {
        case .stringValue(let string) where T.self == String.self:
            return unsafeBitCast(string, to: T.self)
        case .intValue(let int) where T.self == Int.self:
            guard let exact = Int(exactly: int) else { return nil }
            return unsafeBitCast(exact, to: T.self)
        case .intValue(let int) where T.self == Int64.self:
            return unsafeBitCast(int, to: T.self)
        case .doubleValue(let double) where T.self == Double.self:
            return unsafeBitCast(double, to: T.self)
        case .boolValue(let bool) where T.self == Bool.self:
            return unsafeBitCast(bool, to: T.self)
        default:
            return nil
        }
    }
}

private struct ValueDecoding: Decoder {
    let value: Beacon_V1_Value
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .mapValue(let map) = value.kind else { throw mismatch([String: Int].self) }
        return KeyedDecodingContainer(KeyedValues<Key>(entries: map.entries, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .listValue(let list) = value.kind else { throw mismatch([Int].self) }
        return UnkeyedValues(items: list.items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleValue(value: value, codingPath: codingPath) }

    func mismatch(_ type: Any.Type) -> DecodingError {
        DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(type), found \(value.kindName)"))
    }
}

extension Beacon_V1_Value {
    /// The name of the value's kind, for error messages.
    var kindName: String {
        switch kind {
        case nil: "nothing"
        case .nullValue: "null"
        case .boolValue: "a bool"
        case .intValue: "an int"
        case .doubleValue: "a double"
        case .stringValue: "a string"
        case .bytesValue: "bytes"
        case .listValue: "a list"
        case .mapValue: "a map"
        }
    }

    var isNull: Bool {
        if case .nullValue = kind { return true }
        return kind == nil
    }
}

private struct IndexKey: CodingKey {
    var stringValue: String { "\(intValue!)" }
    var intValue: Int?
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

private struct SingleValue: SingleValueDecodingContainer {
    let value: Beacon_V1_Value
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { value.isNull }

    func decode(_ type: Bool.Type) throws -> Bool {
        guard case .boolValue(let bool) = value.kind else { throw mismatch(type) }
        return bool
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .stringValue(let string) = value.kind else { throw mismatch(type) }
        return string
    }

    func decode(_ type: Double.Type) throws -> Double {
        switch value.kind {
        case .doubleValue(let double): return double
        case .intValue(let int): return Double(int)
        default: throw mismatch(type)
        }
    }

    func decode(_ type: Float.Type) throws -> Float { Float(try decode(Double.self)) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        if T.self == Data.self {
            guard case .bytesValue(let bytes) = value.kind else { throw mismatch(type) }
            return bytes as! T
        }
        if T.self == Date.self {
            return Date(timeIntervalSince1970: try decode(Double.self)) as! T
        }
        return try T(from: ValueDecoding(value: value, codingPath: codingPath))
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    private func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        switch value.kind {
        case .intValue(let int):
            if let exact = T(exactly: int) { return exact }
        case .doubleValue(let double):
            if let exact = T(exactly: double) { return exact }
        default:
            break
        }
        throw DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(type), found \(value.kindName) that does not fit"))
    }

    private func mismatch(_ type: Any.Type) -> DecodingError {
        DecodingError.typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(type), found \(value.kindName)"))
    }
}

private struct KeyedValues<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let entries: [String: Beacon_V1_Value]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { entries.keys.compactMap { Key(stringValue: $0) } }

    func contains(_ key: Key) -> Bool { entries[key.stringValue] != nil }

    private func entry(_ key: Key) throws -> Beacon_V1_Value {
        guard let value = entries[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no entry \"\(key.stringValue)\""))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { try entry(key).isNull }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try SingleValue(value: entry(key), codingPath: codingPath + [key]).decode(type)
    }

    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try single(key).decode(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try single(key).decode(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try single(key).decode(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try single(key).decode(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try single(key).decode(type) }

    private func single(_ key: Key) throws -> SingleValue { SingleValue(value: try entry(key), codingPath: codingPath + [key]) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ValueDecoding(value: entry(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoding(value: entry(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        ValueDecoding(value: entries["super"] ?? .init(), codingPath: codingPath)
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        ValueDecoding(value: try entry(key), codingPath: codingPath + [key])
    }
}

private struct UnkeyedValues: UnkeyedDecodingContainer {
    let items: [Beacon_V1_Value]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(items: [Beacon_V1_Value], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    private mutating func next(_ type: Any.Type) throws -> (Beacon_V1_Value, [any CodingKey]) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "the list has only \(items.count) items"))
        }
        defer { currentIndex += 1 }
        return (items[currentIndex], codingPath + [IndexKey(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, items[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, path) = try next(type)
        return try SingleValue(value: value, codingPath: path).decode(type)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (value, path) = try next([String: Int].self)
        return try ValueDecoding(value: value, codingPath: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (value, path) = try next([Int].self)
        return try ValueDecoding(value: value, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (value, path) = try next(Any.self)
        return ValueDecoding(value: value, codingPath: path)
    }
}
