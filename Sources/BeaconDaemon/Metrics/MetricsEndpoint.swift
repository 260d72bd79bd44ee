import BeaconLocking
import Foundation
import Glibc
import Logging

/// Where the metrics endpoint listens (`metrics_listen`): a loopback tcp address, or a Unix
/// socket. Plain HTTP: never anything but loopback.
public enum MetricsListen: Sendable, Equatable, CustomStringConvertible {
    /// `127.0.0.1:PORT`, `localhost:PORT` or `[::1]:PORT`; port 0 (or `*`) lets the kernel choose.
    case tcp(host: String, port: UInt16)
    /// `unix:PATH`.
    case unixSocket(path: String)

    /// Parses `HOST:PORT` (a loopback host) or `unix:PATH`.
    /// - Throws: a reason for a person.
    public init(parsing text: String) throws(SettingError) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard path.hasPrefix("/"), path.utf8.count < 108 else {
                throw SettingError("'metrics_listen' unix:PATH needs an absolute path of under 108 bytes, not '\(path)'")
            }
            self = .unixSocket(path: path)
            return
        }
        guard let colon = text.lastIndex(of: ":") else {
            throw SettingError("'metrics_listen' is 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:PATH, not '\(text)'")
        }
        var host = String(text[..<colon])
        let portText = text[text.index(after: colon)...]
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard host == "localhost" || host == "::1" || Self.isLoopbackIPv4(host) else {
            throw SettingError("'metrics_listen' serves plain HTTP, so only on loopback (127.0.0.0/8, ::1, localhost) or unix:PATH, not '\(host)'")
        }
        guard let port = portText == "*" ? 0 : UInt16(portText) else {
            throw SettingError("'metrics_listen' needs a port from 0 to 65535 (0 or *: the kernel chooses), not '\(portText)'")
        }
        self = .tcp(host: host == "localhost" ? "127.0.0.1" : host, port: port)
    }

    private static func isLoopbackIPv4(_ host: String) -> Bool {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { UInt8($0) != nil }
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unixSocket(let path): "unix:\(path)"
        }
    }
}

/// The metrics endpoint: the few lines of HTTP/1.1 a Prometheus scraper needs, served from a
/// thread of its own, which owns the listening socket and each connection it accepts. `GET
/// /metrics` is answered with ``DaemonMetrics/exposition()``; anything else with 404 or 405.
/// One connection at a time, each with a two-second time limit to send its request and read
/// the answer: a slow scraper delays only the next scrape, never the daemon's loop.
final class MetricsEndpoint: @unchecked Sendable {  // its descriptors are set once; the thread owns them while it runs
    /// What the endpoint is bound to: `http://127.0.0.1:PORT` (the port the kernel gave) or `unix:PATH`.
    let boundAddress: String
    private let listener: Int32
    private let stopPipe: (read: Int32, write: Int32)
    /// Bound, then answering on its thread, then stopped.
    private enum State {
        case bound
        case running(Thread)
        case stopped
    }
    private let state = Locked(State.bound)
    private let unixPath: String?

    /// Binds `listen`; ``start(serving:logger:)`` starts answering.
    /// - Throws: ``DaemonError`` (`.startup`) when the address cannot be bound.
    init(listen: MetricsListen) throws(DaemonError) {
        func failure(_ what: String) -> DaemonError {
            DaemonError(.startup, "metrics_listen \(listen): \(what): \(String(cString: strerror(errno)))")
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw failure("pipe") }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        stopPipe = (fds[0], fds[1])
        let fd: Int32
        switch listen {
        case .tcp(let host, let port):
            let isIPv6 = host.contains(":")
            fd = socket(isIPv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw failure("socket") }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            let bound: Int32
            if isIPv6 {
                var address = sockaddr_in6()
                address.sin6_family = sa_family_t(AF_INET6)
                address.sin6_port = port.bigEndian
                inet_pton(AF_INET6, host, &address.sin6_addr)
                bound = Self.bind(fd, to: address)
            } else {
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = port.bigEndian
                inet_pton(AF_INET, host, &address.sin_addr)
                bound = Self.bind(fd, to: address)
            }
            guard bound == 0, Glibc.listen(fd, 16) == 0 else {
                let error = failure("bind")
                close(fd)
                throw error
            }
            var address = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let port = withUnsafeMutablePointer(to: &address) { pointer -> UInt16 in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { _ = getsockname(fd, $0, &length) }
                return isIPv6 ? pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
                    : pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
            }
            boundAddress = "http://" + (isIPv6 ? "[\(host)]" : host) + ":\(port)"
            unixPath = nil
        case .unixSocket(let path):
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw failure("socket") }
            unlink(path)  // a socket file a stopped daemon left
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            let bound = Self.bind(fd, to: address)
            guard bound == 0, Glibc.listen(fd, 16) == 0 else {
                let error = failure("bind")
                close(fd)
                throw error
            }
            boundAddress = "unix:\(path)"
            unixPath = path
        }
        listener = fd
    }

    deinit { stop() }

    /// `bind(2)` with a `sockaddr_in`, `sockaddr_in6` or `sockaddr_un`.
    private static func bind<Address>(_ fd: Int32, to address: Address) -> Int32 {
        withUnsafePointer(to: address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<Address>.size)) }
        }
    }

    /// Starts the endpoint's thread, answering with what `render` returns at each scrape.
    func start(serving render: @escaping @Sendable () -> [UInt8], logger: Logger) {
        let listener = self.listener, stop = stopPipe.read
        let started = Thread {
            nameCurrentThread("beacond-metrics")
            while true {
                var items = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: stop, events: Int16(POLLIN), revents: 0)]
                let ready = poll(&items, 2, -1)
                if ready < 0 && errno == EINTR { continue }
                guard ready > 0, items[1].revents == 0 else { return }
                let connection = accept(listener, nil, nil)
                guard connection >= 0 else { continue }
                _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
                Self.serve(connection, render: render, logger: logger)
                close(connection)
            }
        }
        let start = state.withLock { state -> Bool in
            guard case .bound = state else { return false }
            state = .running(started)
            return true
        }
        if start { started.start() }
    }

    /// Stops the thread, if it runs, and closes the socket (removing a Unix socket's file). Idempotent.
    func stop() {
        let before = state.withLock { state in defer { state = .stopped }; return state }
        switch before {
        case .stopped:
            return
        case .bound:
            break
        case .running(let running):
            var byte: UInt8 = 1
            _ = write(stopPipe.write, &byte, 1)
            while !running.isFinished { usleep(1000) }
        }
        close(listener)
        close(stopPipe.read)
        close(stopPipe.write)
        if let unixPath { unlink(unixPath) }
    }

    /// Whether `needle` occurs in `bytes` at or after `start`.
    private static func find(_ needle: [UInt8], in bytes: [UInt8], from start: Int) -> Bool {
        guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return false }
        for index in start...(bytes.count - needle.count) where bytes[index..<index + needle.count].elementsEqual(needle) { return true }
        return false
    }

    /// The longest request (line and headers) read.
    static let requestLimit = 8192

    /// Reads one request from `connection` and answers it.
    private static func serve(_ connection: Int32, render: () -> [UInt8], logger: Logger) {
        var limit = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        var request: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 2048)
        let end: [UInt8] = Array("\r\n\r\n".utf8)
        while request.count < requestLimit {
            let count = buffer.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            let searchFrom = max(request.count - 3, 0)
            request += buffer[..<count]
            if Self.find(end, in: request, from: searchFrom) { break }
        }
        let line = String(decoding: request.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }, as: UTF8.self)
        let words = line.split(separator: " ")
        let (status, type, body): (String, String, [UInt8])
        if words.count != 3 || !words[2].hasPrefix("HTTP/1.") {
            (status, type, body) = ("400 Bad Request", "text/plain", Array("a request line is METHOD PATH HTTP/1.1\n".utf8))
        } else if words[0] != "GET" && words[0] != "HEAD" {
            (status, type, body) = ("405 Method Not Allowed", "text/plain", Array("only GET /metrics\n".utf8))
        } else if words[1] != "/metrics" && !words[1].hasPrefix("/metrics?") {
            (status, type, body) = ("404 Not Found", "text/plain", Array("the metrics are at /metrics\n".utf8))
        } else {
            (status, type, body) = ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render())
        }
        var answer = Array("HTTP/1.1 \(status)\r\nContent-Type: \(type)\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n".utf8)
        if words.first != "HEAD" { answer += body }
        var sent = 0
        while sent < answer.count {
            let count = answer.withUnsafeBytes { send(connection, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                logger.debug("metrics scrape not answered whole", metadata: ["error": "\(String(cString: strerror(errno)))"])
                return
            }
            sent += count
        }
    }
}
