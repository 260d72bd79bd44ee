import BeaconProtocol
import Foundation

/// Encodes `Encodable` Swift values as Beacon wire values (`beacon.v1.Value`): structs and
/// dictionaries become maps, arrays lists, `Data` bytes, `Date` a double of seconds since 1970.
struct ValueEncoder {
    func encode<T: Encodable>(_ value: T) throws -> Beacon_V1_Value {
        let root = EncodedNode()
        try root.encode(value, codingPath: [])
        return root.value
    }
}

/// One value being built; containers hold their children by reference until the end.
private final class EncodedNode {
    enum Shape { case empty, scalar, map, list }

    private var shape = Shape.empty
    private var scalar = Beacon_V1_Value()
    private var entries: [String: EncodedNode] = [:]
    private var items: [EncodedNode] = []

    var value: Beacon_V1_Value {
        var result = Beacon_V1_Value()
        switch shape {
        case .empty: result.kind = .nullValue(.nullValue)
        case .scalar: return scalar
        case .map:
            var map = Beacon_V1_MapValue()
            map.entries = entries.mapValues(\.value)
            result.kind = .mapValue(map)
        case .list:
            var list = Beacon_V1_ListValue()
            list.items = items.map(\.value)
            result.kind = .listValue(list)
        }
        return result
    }

    func set(_ kind: Beacon_V1_Value.OneOf_Kind) {
        shape = .scalar
        scalar.kind = kind
    }

    func encode<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        switch value {
        case let data as Data: set(.bytesValue(data))
        case let date as Date: set(.doubleValue(date.timeIntervalSince1970))
        case let string as String: set(.stringValue(string))
        case let int as Int: set(.intValue(Int64(int)))
        case let double as Double: set(.doubleValue(double))
        case let bool as Bool: set(.boolValue(bool))
        default: try value.encode(to: ValueEncoding(node: self, codingPath: codingPath))
        }
    }

    func makeMap() {
        if shape != .map { shape = .map; entries = [:] }
    }

    func child(forKey key: String) -> EncodedNode {
        makeMap()
        if let node = entries[key] { return node }
        let node = EncodedNode()
        entries[key] = node
        return node
    }

    func makeList() {
        if shape != .list { shape = .list; items = [] }
    }

    func appendChild() -> EncodedNode {
        makeList()
        let node = EncodedNode()
        items.append(node)
        return node
    }

    var listCount: Int { items.count }
}

private struct ValueEncoding: Encoder {
    let node: EncodedNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        node.makeMap()
        return KeyedEncodingContainer(KeyedNodes<Key>(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        node.makeList()
        return UnkeyedNodes(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleNode(node: node, codingPath: codingPath) }
}

private struct SingleNode: SingleValueEncodingContainer {
    let node: EncodedNode
    let codingPath: [any CodingKey]

    func encodeNil() { node.set(.nullValue(.nullValue)) }
    func encode(_ value: Bool) { node.set(.boolValue(value)) }
    func encode(_ value: String) { node.set(.stringValue(value)) }
    func encode(_ value: Double) { node.set(.doubleValue(value)) }
    func encode(_ value: Float) { node.set(.doubleValue(Double(value))) }
    func encode(_ value: Int) { node.set(.intValue(Int64(value))) }
    func encode(_ value: Int8) { node.set(.intValue(Int64(value))) }
    func encode(_ value: Int16) { node.set(.intValue(Int64(value))) }
    func encode(_ value: Int32) { node.set(.intValue(Int64(value))) }
    func encode(_ value: Int64) { node.set(.intValue(value)) }
    func encode(_ value: UInt) throws { try unsigned(value) }
    func encode(_ value: UInt8) { node.set(.intValue(Int64(value))) }
    func encode(_ value: UInt16) { node.set(.intValue(Int64(value))) }
    func encode(_ value: UInt32) { node.set(.intValue(Int64(value))) }
    func encode(_ value: UInt64) throws { try unsigned(value) }

    private func unsigned<T: FixedWidthInteger>(_ value: T) throws {
        guard let int = Int64(exactly: value) else {
            throw EncodingError.invalidValue(value, .init(codingPath: codingPath, debugDescription: "\(value) does not fit a signed 64-bit int"))
        }
        node.set(.intValue(int))
    }

    func encode<T: Encodable>(_ value: T) throws { try node.encode(value, codingPath: codingPath) }
}

private struct KeyedNodes<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodedNode
    let codingPath: [any CodingKey]

    func encodeNil(forKey key: Key) { node.child(forKey: key.stringValue).set(.nullValue(.nullValue)) }

    func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try node.child(forKey: key.stringValue).encode(value, codingPath: codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoding(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }

    func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        ValueEncoding(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superEncoder() -> any Encoder { ValueEncoding(node: node.child(forKey: "super"), codingPath: codingPath) }

    func superEncoder(forKey key: Key) -> any Encoder {
        ValueEncoding(node: node.child(forKey: key.stringValue), codingPath: codingPath + [key])
    }
}

private struct UnkeyedNodes: UnkeyedEncodingContainer {
    let node: EncodedNode
    let codingPath: [any CodingKey]
    var count: Int { node.listCount }

    func encodeNil() { node.appendChild().set(.nullValue(.nullValue)) }

    func encode<T: Encodable>(_ value: T) throws { try node.appendChild().encode(value, codingPath: codingPath) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        ValueEncoding(node: node.appendChild(), codingPath: codingPath).container(keyedBy: keyType)
    }

    func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        ValueEncoding(node: node.appendChild(), codingPath: codingPath).unkeyedContainer()
    }

    func superEncoder() -> any Encoder { ValueEncoding(node: node.appendChild(), codingPath: codingPath) }
}
