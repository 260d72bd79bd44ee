import BeaconZMQ
import Glibc

/// Proves, before each `WATCHDOG=1`, that libzmq still moves the daemon's messages: a token sent
/// at one watchdog tick over a private ipc connection (written and read by libzmq's I/O thread,
/// as every request, reply and publication is) must have arrived by the next. The loop running
/// proves nothing by itself: with the I/O thread blocked, the loop goes on polling sockets that
/// never become readable, and systemd must restart that daemon. Loop thread only.
final class ServingProbe {
    private let receiver: ZMQSocket
    private let sender: ZMQSocket
    /// Tokens sent and received since start.
    private var sent: UInt64 = 0
    private var received: UInt64 = 0
    /// When a token last arrived (or the probe started).
    private(set) var lastArrival: MonotonicTime

    /// Binds the receiving end at `path` (readable by this user only) and connects the sender.
    init(context: ZMQContext, path: String, now: MonotonicTime) throws(ZMQError) {
        unlink(path)
        receiver = try ZMQSocket(context, type: .pull, linger: 0)
        // Room for the handshake's commands and a token; anything larger drops its connection.
        try receiver.setMaxMessageSize(256)
        try receiver.setReceiveHighWaterMark(16)
        try receiver.bind("ipc://" + path)
        chmod(path, 0o600)
        sender = try ZMQSocket(context, type: .push, linger: 0)
        try sender.setSendHighWaterMark(16)
        try sender.connect("ipc://" + path)
        lastArrival = now
    }

    /// The socket the loop polls for arrivals (``drain(now:)``).
    var pollable: ZMQSocket { receiver }

    /// Takes the tokens that arrived.
    func drain(now: MonotonicTime) {
        while let frames = try? receiver.receiveMessage(flags: .dontWait) {
            if !frames.isEmpty { received += 1 }
            lastArrival = now
        }
    }

    /// At a watchdog tick: whether libzmq delivered the token of the last tick (true at the first
    /// tick); then sends the next one.
    func tick(now: MonotonicTime) -> Bool {
        drain(now: now)
        let delivered = received >= sent
        if (try? sender.send(ZMQMessage(bytes: [0]), flags: .dontWait)) == true { sent += 1 }
        return delivered
    }

    func close() {
        sender.close()
        receiver.close()
    }
}
