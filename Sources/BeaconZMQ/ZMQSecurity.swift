internal import CBeaconZMQ

/// A CURVE key pair (RFC 26), each key as 40 characters of Z85 text.
public struct ZMQCurveKeyPair: Sendable, Equatable {
    /// The public key, shared with peers.
    public var publicKey: String
    /// The secret key, kept by its owner only.
    public var secretKey: String

    /// A new random key pair.
    /// - Throws: ``ZMQError`` when libzmq was built without CURVE.
    public static func generate() throws(ZMQError) -> ZMQCurveKeyPair {
        var publicKey = [CChar](repeating: 0, count: 41)
        var secretKey = [CChar](repeating: 0, count: 41)
        try zmqCall("zmq_curve_keypair") { zmq_curve_keypair(&publicKey, &secretKey) }
        return ZMQCurveKeyPair(publicKey: Self.text(publicKey), secretKey: Self.text(secretKey))
    }

    /// The key pair whose secret key is `secretKey`.
    /// - Throws: ``ZMQError`` (`EINVAL`) when `secretKey` is not a Z85 CURVE key.
    public init(secretKey: String) throws(ZMQError) {
        guard Self.isValidKey(secretKey) else { throw ZMQError(code: EINVAL, operation: "zmq_curve_public") }
        var publicKey = [CChar](repeating: 0, count: 41)
        try zmqCall("zmq_curve_public") { zmq_curve_public(&publicKey, secretKey) }
        self.init(publicKey: Self.text(publicKey), secretKey: secretKey)
    }

    /// A key pair from both keys.
    public init(publicKey: String, secretKey: String) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Whether `key` is 40 characters of Z85 that decode to a 32-byte key.
    public static func isValidKey(_ key: String) -> Bool {
        guard key.utf8.count == 40 else { return false }
        var decoded = [UInt8](repeating: 0, count: 32)
        return zmq_z85_decode(&decoded, key) != nil
    }

    /// The Z85 text of a 32-byte binary key (as a ZAP request carries it), or `nil`.
    public static func z85(_ key: [UInt8]) -> String? {
        guard key.count == 32 else { return nil }
        var text = [CChar](repeating: 0, count: 41)
        guard zmq_z85_encode(&text, key, key.count) != nil else { return nil }
        return Self.text(text)
    }

    /// Whether this libzmq supports CURVE (it was built with libsodium or tweetnacl).
    public static var isSupported: Bool { zmq_has("curve") != 0 }

    private static func text(_ buffer: [CChar]) -> String {
        String(decoding: buffer.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension ZMQSocket {
    /// Asks the ZAP handler (RFC 27) to authenticate peers of later binds under `domain`; with
    /// the NULL mechanism (ipc) a domain is what makes libzmq ask it at all. An empty domain
    /// turns that off for later binds.
    public func setZAPDomain(_ domain: String) throws(ZMQError) {
        // Bind the handler before the sockets it guards: libzmq 4.3 lets peers in when no
        // handler listens (ZMQ_ZAP_ENFORCE_DOMAIN is a draft option).
        try setOption(ZMQ_ZAP_DOMAIN, bytes: Array(domain.utf8))
    }

    /// Makes later binds CURVE servers with `secretKey` (Z85); clients must know its public key.
    public func enableCurveServer(secretKey: String) throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVER, 1)
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: Array(secretKey.utf8))
    }

    /// Makes later binds and connects use no security mechanism (ZMTP NULL) again.
    public func disableCurve() throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVER, 0)
    }

    /// Makes later connects CURVE clients of the server with public key `serverKey`,
    /// authenticating with `keys`.
    public func enableCurveClient(serverKey: String, keys: ZMQCurveKeyPair) throws(ZMQError) {
        try setOption(ZMQ_CURVE_SERVERKEY, bytes: Array(serverKey.utf8))
        try setOption(ZMQ_CURVE_PUBLICKEY, bytes: Array(keys.publicKey.utf8))
        try setOption(ZMQ_CURVE_SECRETKEY, bytes: Array(keys.secretKey.utf8))
    }

    /// XPUB only: subscriptions are passed to the application and take effect only when it
    /// calls ``addSubscription(_:)`` for them (for the peer whose message it read last).
    public func setXPubManual(_ on: Bool) throws(ZMQError) { try setOption(ZMQ_XPUB_MANUAL, on ? 1 : 0) }

    /// XPUB in manual mode: subscribes the peer of the subscription message read last to `topic`.
    public func addSubscription(_ topic: [UInt8]) throws(ZMQError) { try setOption(ZMQ_SUBSCRIBE, bytes: topic) }

    /// XPUB in manual mode: removes `topic` from the peer of the message read last.
    public func removeSubscription(_ topic: [UInt8]) throws(ZMQError) { try setOption(ZMQ_UNSUBSCRIBE, bytes: topic) }
}

/// The endpoint libzmq asks for authentication (RFC 27).
public enum ZAP {
    /// Where a ZAP handler binds, in the context of the sockets it serves.
    public static let endpoint = "inproc://zeromq.zap.01"
}
