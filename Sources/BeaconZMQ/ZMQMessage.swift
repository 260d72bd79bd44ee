internal import CBeaconZMQ

/// One frame of a ZeroMQ message, owning a `zmq_msg_t`.
///
/// Received frames are read in place with ``withUnsafeBytes(_:)``; frames built from a byte
/// array hand the array's storage to libzmq without copying it.
public final class ZMQMessage {
    /// Only ever passed to libzmq by address, by the one thread using the frame: no dynamic
    /// exclusivity check (one per libzmq call otherwise).
    @exclusivity(unchecked) var raw = zmq_msg_t()

    /// An empty frame (also the buffer that ``ZMQSocket/receive(into:flags:)`` fills).
    public init() {
        zmq_msg_init(&raw)
    }

    /// A frame that owns `bytes` without copying them; libzmq releases them after sending.
    /// - Parameter released: called once libzmq holds the bytes no more (written to the
    ///   connection, dropped, or never sent), on whichever thread lets go of them last: often
    ///   libzmq's I/O thread.
    public init(bytes: [UInt8], released: (@Sendable () -> Void)? = nil) {
        if bytes.isEmpty {
            zmq_msg_init(&raw)
            released?()
            return
        }
        let box = Unmanaged.passRetained(ByteBox(bytes, released: released))
        let base = box.takeUnretainedValue().bytes.withUnsafeBufferPointer { UnsafeMutableRawPointer(mutating: $0.baseAddress!) }
        let rc = zmq_msg_init_data(&raw, base, bytes.count, { _, hint in
            Unmanaged<ByteBox>.fromOpaque(hint!).release()
        }, box.toOpaque())
        precondition(rc == 0, "zmq_msg_init_data cannot fail with a free function")
    }

    /// A frame holding a copy of `bytes`.
    public init(copying bytes: UnsafeRawBufferPointer) {
        zmq_msg_init_size(&raw, bytes.count)
        if let base = bytes.baseAddress, bytes.count > 0 {
            zmq_msg_data(&raw).copyMemory(from: base, byteCount: bytes.count)
        }
    }

    /// A frame holding the UTF-8 bytes of `string`.
    public convenience init(string: String) {
        self.init(bytes: Array(string.utf8))
    }

    deinit {
        zmq_msg_close(&raw)
    }

    /// The number of bytes in the frame.
    public var count: Int { zmq_msg_size(&raw) }

    /// Whether another frame of the same message follows this received frame.
    public var hasMore: Bool { zmq_msg_more(&raw) != 0 }

    /// Calls `body` with the frame's bytes, valid only for the call.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: zmq_msg_data(&raw), count: zmq_msg_size(&raw)))
    }

    /// A copy of the frame's bytes.
    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    /// The frame decoded as UTF-8 (invalid sequences repaired).
    public var string: String { withUnsafeBytes { String(decoding: $0, as: UTF8.self) } }

    /// For ipc peers, a metadata property of the connection ("User-Id", "Peer-Address", ...).
    public func metadata(_ property: String) -> String? {
        guard let value = zmq_msg_gets(&raw, property) else { return nil }
        return String(cString: value)
    }
}

/// Keeps a byte array alive while libzmq owns its storage, and says when libzmq let go of it.
private final class ByteBox {
    let bytes: [UInt8]
    let released: (@Sendable () -> Void)?

    init(_ bytes: [UInt8], released: (@Sendable () -> Void)?) {
        self.bytes = bytes
        self.released = released
    }

    deinit { released?() }
}
