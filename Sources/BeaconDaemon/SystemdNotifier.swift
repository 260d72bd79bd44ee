import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The systemd notify protocol, spoken by the daemon itself: one datagram per state change to
/// the `AF_UNIX` socket named by `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace).
///
/// Without `$NOTIFY_SOCKET` (not started by systemd with `Type=notify`) there is no notifier.
public final class SystemdNotifier: Sendable {
    private let address: [UInt8]
    private let socket: Int32
    /// How often systemd expects `WATCHDOG=1` (`$WATCHDOG_USEC`), when the watchdog is on for
    /// this process; send at least twice per interval.
    public let watchdogInterval: Duration?

    /// A notifier for the socket in `environment`, or `nil` when there is none.
    public init?(environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty, path.utf8.count < 108,
              path.hasPrefix("/") || path.hasPrefix("@") else { return nil }
        var bytes = Array(path.utf8)
        if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }  // abstract namespace
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        address = bytes
        socket = fd
        if let usec = environment["WATCHDOG_USEC"].flatMap(UInt64.init), usec > 0,
           environment["WATCHDOG_PID"].map({ Int32($0) == getpid() }) ?? true {
            watchdogInterval = .microseconds(usec)
        } else {
            watchdogInterval = nil
        }
    }

    deinit { close(socket) }

    /// Sends `assignments` (newline-separated `NAME=value` lines) in one datagram, without ever
    /// waiting: the daemon's loop sends these, and a socket whose reader stops reading would
    /// stop it. A datagram that finds the socket's queue full is dropped (a status line or a
    /// watchdog ping goes out again within its interval).
    /// - Returns: whether the datagram was sent.
    @discardableResult
    public func send(_ assignments: String) -> Bool {
        var storage = sockaddr_un()
        storage.sun_family = sa_family_t(AF_UNIX)
        let length = withUnsafeMutableBytes(of: &storage.sun_path) { path -> Int in
            path.copyBytes(from: address)
            return address.count
        }
        let addressLength = socklen_t(MemoryLayout<sa_family_t>.size + length + (address.first == 0 ? 0 : 1))
        let payload = Array(assignments.utf8)
        let sent = withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
                payload.withUnsafeBytes { sendto(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT), address, addressLength) }
            }
        }
        return sent == payload.count
    }

    /// The service is up (sockets bound, journal open), with a first status line.
    public func ready(status: String) { send("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())") }

    /// A status line for `systemctl status`.
    public func status(_ status: String) { send("STATUS=\(status)") }

    /// The watchdog keep-alive.
    public func watchdog() { send("WATCHDOG=1") }

    /// A reload (of the configuration) begins; send ``ready(status:)`` when it is done.
    public func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        send("RELOADING=1\nMONOTONIC_USEC=\(UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1000)")
    }

    /// A graceful stop begins.
    public func stopping() { send("STOPPING=1") }

    /// Runs `body`, a part of start-up that may take long (opening, checking or migrating a large
    /// journal takes seconds per million changes), while asking systemd every `interval` for
    /// three more intervals (`EXTEND_TIMEOUT_USEC=`), so that `TimeoutStartSec=` does not run
    /// out and kill the daemon in the middle. Each request carries `STATUS=`: `what` and the
    /// seconds so far.
    public func extendingStartTimeout<Result, Failure: Error>(
        _ what: String, every interval: Duration = .seconds(5), _ body: () throws(Failure) -> Result
    ) throws(Failure) -> Result {
        let done = DispatchSemaphore(value: 0)
        let stopped = DispatchSemaphore(value: 0)
        let microseconds = interval.components.seconds * 1_000_000 + interval.components.attoseconds / 1_000_000_000_000
        let started = ContinuousClock.now
        Thread.detachNewThread { [self] in
            while done.wait(timeout: .now() + .microseconds(Int(microseconds))) == .timedOut {
                let seconds = (ContinuousClock.now - started).components.seconds
                send("EXTEND_TIMEOUT_USEC=\(microseconds * 3)\nSTATUS=\(what) (\(seconds) s)")
            }
            stopped.signal()
        }
        defer {
            done.signal()
            stopped.wait()  // no extension after this returns
        }
        return try body()
    }
}
