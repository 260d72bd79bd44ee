import BeaconWire
import Foundation

// Minimal clients for the peers the comparison runs against, speaking their wire protocols
// directly over a Unix stream socket: the same thin, blocking client code drives every system,
// so that the figures are the servers' and not the client libraries'.

struct PeerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A connected Unix stream socket with a read buffer.
final class StreamConnection {
    private let descriptor: Int32
    private var buffer: [UInt8] = []
    private var position = 0
    private var chunk = [UInt8](repeating: 0, count: 65_536)

    init(path: String) throws {
        guard let address = UnixSocketAddress(path: path) else { throw PeerError("socket path too long: \(path)") }
        descriptor = address.connectStream()
        guard descriptor >= 0 else { throw PeerError("connect \(path): \(String(cString: strerror(errno)))") }
    }

    deinit { close(descriptor) }

    func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress! + offset, bytes.count - offset) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw PeerError("write: \(String(cString: strerror(errno)))") }
            offset += written
        }
    }

    private func fill() throws {
        if position > 0 {
            buffer.removeSubrange(0..<position)
            position = 0
        }
        let count = chunk.withUnsafeMutableBytes { Glibc.read(descriptor, $0.baseAddress!, $0.count) }
        guard count > 0 else { throw PeerError(count == 0 ? "connection closed by the server" : "read: \(String(cString: strerror(errno)))") }
        buffer.append(contentsOf: chunk[0..<count])
    }

    func readByte() throws -> UInt8 {
        while position >= buffer.count { try fill() }
        defer { position += 1 }
        return buffer[position]
    }

    func read(count: Int) throws -> ArraySlice<UInt8> {
        while buffer.count - position < count { try fill() }
        defer { position += count }
        return buffer[position..<position + count]
    }

    /// Bytes up to CRLF, without it.
    func readLine() throws -> ArraySlice<UInt8> {
        var scanned = 0  // relative to position: fill() moves the unread bytes to the front
        while true {
            while position + scanned + 1 < buffer.count {
                let index = position + scanned
                if buffer[index] == 0x0D && buffer[index + 1] == 0x0A {
                    defer { position = index + 2 }
                    return buffer[position..<index]
                }
                scanned += 1
            }
            try fill()
        }
    }
}

/// MQTT 3.1.1 (what Mosquitto speaks): connect, QoS 1 publish with PUBACK, subscribe.
final class MQTTConnection {
    private let connection: StreamConnection
    private var nextPacketID: UInt16 = 0

    init(path: String, clientID: String) throws {
        connection = try StreamConnection(path: path)
        // CONNECT: protocol "MQTT" level 4, clean session, no keep-alive.
        try connection.write(Self.packet(0x10, [0, 4] + Array("MQTT".utf8) + [4, 0x02, 0, 0] + Self.string(clientID)))
        let (type, body) = try readPacket()
        guard type >> 4 == 2, body.count == 2, body[body.startIndex + 1] == 0 else { throw PeerError("MQTT connection refused") }
    }

    /// Publishes with QoS 1, retained, without waiting for the PUBACK.
    func publish(topic: String, payload: [UInt8]) throws {
        nextPacketID = nextPacketID == UInt16.max ? 1 : nextPacketID + 1
        try connection.write(Self.packet(0x33, Self.string(topic) + [UInt8(nextPacketID >> 8), UInt8(nextPacketID & 0xFF)] + payload))
    }

    /// Waits for the next PUBACK.
    func awaitAcknowledgement() throws {
        let (type, _) = try readPacket()
        guard type >> 4 == 4 else { throw PeerError("expected PUBACK, got packet type \(type >> 4)") }
    }

    func subscribe(filter: String) throws {
        try connection.write(Self.packet(0x82, [0, 1] + Self.string(filter) + [1]))
        let (type, body) = try readPacket()
        guard type >> 4 == 9, body.last.map({ $0 < 0x80 }) == true else { throw PeerError("MQTT subscription refused") }
    }

    /// The next message's payload, acknowledging QoS 1 deliveries.
    func receive() throws -> ArraySlice<UInt8> {
        while true {
            let (type, body) = try readPacket()
            guard type >> 4 == 3 else { continue }
            let qos = (type >> 1) & 3
            let topicLength = Int(body[body.startIndex]) << 8 | Int(body[body.startIndex + 1])
            var offset = body.startIndex + 2 + topicLength
            if qos > 0 {
                try connection.write([0x40, 2, body[offset], body[offset + 1]])
                offset += 2
            }
            return body[offset...]
        }
    }

    private func readPacket() throws -> (UInt8, ArraySlice<UInt8>) {
        let type = try connection.readByte()
        var length = 0, shift = 0
        while true {
            let byte = try connection.readByte()
            length |= Int(byte & 0x7F) << shift
            if byte & 0x80 == 0 { break }
            shift += 7
        }
        return (type, try connection.read(count: length))
    }

    private static func string(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        return [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)] + bytes
    }

    private static func packet(_ type: UInt8, _ body: [UInt8]) -> [UInt8] {
        var length = body.count
        var header = [type]
        repeat {
            var byte = UInt8(length & 0x7F)
            length >>= 7
            if length > 0 { byte |= 0x80 }
            header.append(byte)
        } while length > 0
        return header + body
    }
}

/// RESP (what Redis speaks): pipelined commands, replies, and pattern subscriptions.
final class RedisConnection {
    private let connection: StreamConnection

    init(path: String) throws {
        connection = try StreamConnection(path: path)
    }

    /// Sends one command without waiting for its reply.
    func send(_ arguments: [[UInt8]]) throws {
        var bytes = Array("*\(arguments.count)\r\n".utf8)
        for argument in arguments {
            bytes += Array("$\(argument.count)\r\n".utf8)
            bytes += argument
            bytes += [0x0D, 0x0A]
        }
        try connection.write(bytes)
    }

    /// Reads one reply; throws on an error reply.
    @discardableResult
    func reply() throws -> [ArraySlice<UInt8>] {
        let line = try connection.readLine()
        guard let kind = line.first else { throw PeerError("empty RESP line") }
        let rest = line.dropFirst()
        switch kind {
        case UInt8(ascii: "+"), UInt8(ascii: ":"): return [rest]
        case UInt8(ascii: "-"): throw PeerError("redis: \(String(decoding: rest, as: UTF8.self))")
        case UInt8(ascii: "$"):
            let length = Int(String(decoding: rest, as: UTF8.self)) ?? -1
            guard length >= 0 else { return [] }
            let body = try connection.read(count: length + 2)
            return [body.dropLast(2)]
        case UInt8(ascii: "*"):
            let count = Int(String(decoding: rest, as: UTF8.self)) ?? 0
            return try (0..<max(count, 0)).flatMap { _ in try reply() }
        default: throw PeerError("unexpected RESP type \(kind)")
        }
    }

    /// The next message's payload after PSUBSCRIBE.
    func receiveMessage() throws -> ArraySlice<UInt8> {
        while true {
            let parts = try reply()
            if parts.count == 4, parts[0].elementsEqual("pmessage".utf8) { return parts[3] }
            if parts.count == 3, parts[0].elementsEqual("message".utf8) { return parts[2] }
        }
    }
}
