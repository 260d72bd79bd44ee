internal import CBeaconZMQ
#if canImport(Glibc)
import Glibc
#endif

/// An error reported by libzmq: the failing operation and its `errno` code.
public struct ZMQError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The `errno` value libzmq reported.
    public var code: Int32
    /// The operation that failed, such as `"zmq_bind(ipc:///run/beacon/req)"`.
    public var operation: String

    /// Creates an error for `operation` with `code`.
    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// libzmq's text for `code`.
    public var message: String { String(cString: zmq_strerror(code)) }

    public var description: String { "\(operation): \(message) (errno \(code))" }

    /// The operation would have blocked (`EAGAIN`): nothing to receive, or the queue is full.
    public var wouldBlock: Bool { code == EAGAIN }

    /// The context was terminated (`ETERM`); the socket must be closed.
    public var contextTerminated: Bool { code == ETERM }

    /// The peer is unreachable for a ROUTER with `ROUTER_MANDATORY` (`EHOSTUNREACH`).
    public var hostUnreachable: Bool { code == EHOSTUNREACH }
}

/// Runs one libzmq call, retrying on `EINTR`, and throws on `-1`.
@discardableResult
@inline(__always)
func zmqCall(_ operation: @autoclosure () -> String, _ body: () -> Int32) throws(ZMQError) -> Int32 {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = zmq_errno()
        if code == EINTR { continue }
        throw ZMQError(code: code, operation: operation())
    }
}
