import BeaconLocking
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Synchronization

/// The daemon a flooder abuses, and what it needs to reach it.
struct FloodTarget: Sendable {
    let runtimeDirectory: String
    let daemonPID: Int32
    /// The CURVE request and publish ports.
    let port: Int
    let publishPort: Int
    /// The flooder's CURVE identity: a peer whose rule grants `flood.` only.
    let credentials: CurveCredentials
    /// The configuration file and its text, for the abuse that makes the administrator reload.
    let configurationPath: String
    let configuration: String

    var requestEndpoint: String { "tcp://127.0.0.1:\(port)" }
    var publishEndpoint: String { "tcp://127.0.0.1:\(publishPort)" }
}

/// What a flooder sent, and how much of it the daemon accepted or refused.
struct FloodCounts: Sendable {
    var sent = 0
    var accepted = 0
    var refused = 0
}

/// One abusive peer, run on its own thread until told to stop.
struct Flooder {
    let abuse: FloodBench.Abuse
    let target: FloodTarget

    func run(until stop: borrowing Atomic<Bool>) -> FloodCounts {
        switch abuse {
        case .writes, .writesLimited, .keepAlives, .leases: return pipelinedRequests(inFlight: 1000, until: stop)
        case .largeRequests: return pipelinedRequests(inFlight: 64, until: stop)
        case .connections: return heldConnections(until: stop)
        case .churnDuringReloads: return churnDuringReloads(until: stop)
        case .largeSubscriptions: return subscriptions(topicBytes: 1000, perConnection: 20_000, connections: 4, until: stop)
        case .manySubscriptions: return subscriptions(topicBytes: 8, perConnection: 1_000_000, connections: 1, until: stop)
        case .unreadReplies: return unreadLists(connections: 1, batches: 20, listsPerBatch: 8, until: stop)
        case .unreadRepliesManyConnections: return unreadLists(connections: 20, batches: 1, listsPerBatch: 2, until: stop)
        case .unreadBatchedReads:
            return unreadLists(prefix: "flood.app.", keysOnly: true, connections: 20, batches: 3, listsPerBatch: 256, until: stop)
        case .unreadPublications: return unreadPublications(until: stop)
        case .unreadSmallPublications: return unreadSmallPublications(subscribers: 48, until: stop)
        }
    }

    private func client() -> WireClient? {
        try? WireClient(requestEndpoint: target.requestEndpoint, publishEndpoint: target.publishEndpoint, curve: target.credentials)
    }

    /// A CURVE socket of `type` connected to `endpoint` as the flooder.
    private func socket(_ context: ZMQContext, _ type: ZMQSocketType, _ endpoint: String, receiveHighWaterMark: Int32 = 1000) -> ZMQSocket? {
        guard let socket = try? ZMQSocket(context, type: type, linger: 0) else { return nil }
        try? socket.setReceiveHighWaterMark(receiveHighWaterMark)
        try? socket.enableCurveClient(serverKey: target.credentials.serverKey, keys: target.credentials.keys)
        try? socket.connect(endpoint)
        return socket
    }

    /// Writes, new sessions, new prefixes' snapshots, or puts of 15 MiB values (refused: over
    /// `max_value_bytes`, but each read whole first), `inFlight` at once.
    private func pipelinedRequests(inFlight: Int, until stop: borrowing Atomic<Bool>) -> FloodCounts {
        guard let wire = client() else { return FloodCounts() }
        let large = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 3, count: 15 << 20) }
        var counts = FloodCounts()
        while !stop.load(ordering: .relaxed) {
            while counts.sent - counts.accepted - counts.refused < inFlight {
                let index = counts.sent
                let op: Beacon_V1_Request.OneOf_Op
                switch abuse {
                case .keepAlives: op = .keepAlive(.with { $0.session = Data("flood-\(index)".utf8); $0.ttlMs = 3_600_000 })
                case .leases: op = .snapshot(.with { $0.prefix = "flood.p\(index)."; $0.limit = 1 })
                case .largeRequests: op = .put(.with { $0.key = "flood.large"; $0.value = large })
                default: op = .put(.with { $0.key = "flood.k\(index % 1000)"; $0.value.intValue = Int64(index) })
                }
                guard (try? wire.send(op)) != nil else { break }
                counts.sent += 1
            }
            while let reply = try? wire.receiveReply(timeoutMilliseconds: 0) {
                if case .error = reply.result { counts.refused += 1 } else { counts.accepted += 1 }
            }
        }
        return counts
    }

    /// Raw connections to the CURVE port that never handshake, each held until 1,100 are open
    /// (more than the daemon's 1,024 descriptors), then renewed.
    private func heldConnections(until stop: borrowing Atomic<Bool>) -> FloodCounts {
        var counts = FloodCounts()
        var held: [Int32] = []
        while !stop.load(ordering: .relaxed) {
            if held.count >= 1100 { close(held.removeFirst()) }
            let fd = connectLoopbackTCP(port: UInt16(target.port))
            counts.sent += 1
            if fd >= 0 { held.append(fd); counts.accepted += 1 } else { counts.refused += 1 }
        }
        for fd in held { close(fd) }
        return counts
    }

    /// Two threads connect plain unix sockets to the publish socket and close them at once,
    /// while the administrator changes a rule and reloads (SIGHUP) every 50 ms, which opens the
    /// publish socket anew: the pattern that once hung the daemon for good.
    private func churnDuringReloads(until stop: borrowing Atomic<Bool>) -> FloodCounts {
        let address = UnixSocketAddress(path: target.runtimeDirectory + "/" + WireEndpoint.publishSocketName)!
        let done = Atomic<Bool>(false)
        let churned = Locked(0)
        let churners = (0..<2).map { _ in
            Thread {
                var count = 0
                while !done.load(ordering: .relaxed) {
                    let fd = address.connectStream()
                    if fd >= 0 { close(fd) }
                    count += 1
                }
                churned.withLock { $0 += count }
            }
        }
        churners.forEach { $0.start() }
        var reloads = 0
        while !stop.load(ordering: .relaxed) {
            let rules = target.configuration + "\nallow = uid:\(60_000 + reloads % 2) read=flood.\n"
            try? rules.write(toFile: target.configurationPath, atomically: true, encoding: .utf8)
            kill(target.daemonPID, SIGHUP)
            reloads += 1
            usleep(50_000)
        }
        done.store(true, ordering: .relaxed)
        while churners.contains(where: { !$0.isFinished }) { usleep(10_000) }
        return FloodCounts(sent: churned.withLock { $0 }, accepted: reloads, refused: 0)
    }

    /// SUB sockets each sending `perConnection` subscriptions to ever new topics of `topicBytes`
    /// bytes (under `flood.`, which the flooder may read), closed and opened anew once sent.
    private func subscriptions(topicBytes: Int, perConnection: Int, connections: Int, until stop: borrowing Atomic<Bool>) -> FloodCounts {
        let done = Atomic<Bool>(false)
        let sent = Locked(0)
        let target = target
        let threads = (0..<connections).map { thread in
            Thread {
                guard let context = try? ZMQContext() else { return }
                var count = 0
                while !done.load(ordering: .relaxed) {
                    guard let subscriber = Flooder(abuse: abuse, target: target).socket(context, .sub, target.publishEndpoint) else { break }
                    for index in 0..<perConnection where !done.load(ordering: .relaxed) {
                        let topic = Self.topic(thread: thread, index: count + index, bytes: topicBytes)
                        guard (try? subscriber.subscribe(topic)) != nil else { break }
                    }
                    count += perConnection
                    subscriber.close()
                }
                sent.withLock { $0 += count }
            }
        }
        threads.forEach { $0.start() }
        while !stop.load(ordering: .relaxed) { usleep(10_000) }
        done.store(true, ordering: .relaxed)
        while threads.contains(where: { !$0.isFinished }) { usleep(10_000) }
        return FloodCounts(sent: sent.withLock { $0 })
    }

    /// A topic of `bytes` bytes, distinct for each thread and index: under `flood.` padded with
    /// dots where it fits; else the index's own bytes (a topic the flooder may not read).
    private static func topic(thread: Int, index: Int, bytes: Int) -> [UInt8] {
        let name = Array("flood.\(thread).\(index)".utf8)
        if bytes >= name.count { return name + [UInt8](repeating: 0x2E, count: bytes - name.count) }
        return withUnsafeBytes(of: (UInt64(thread) << 56 | UInt64(index)).bigEndian) { Array($0.prefix(bytes)) }
    }

    /// `connections` connections whose libzmq takes in one reply and then reads nothing more,
    /// each sending `batches` batches of `listsPerBatch` 2 MB Lists; all opened anew every 0.5 s.
    private func unreadLists(prefix: String = "flood.big.", keysOnly: Bool = false, connections: Int, batches: Int, listsPerBatch: Int,
                             until stop: borrowing Atomic<Bool>) -> FloodCounts {
        guard let context = try? ZMQContext() else { return FloodCounts() }
        let list = Beacon_V1_Request.with { $0.list = .with { $0.prefix = prefix; $0.keysOnly = keysOnly } }
        let batch = (try? Beacon_V1_Request.with { $0.batch = .with { $0.requests = Array(repeating: list, count: listsPerBatch) } }
            .serializedBytes() as [UInt8]) ?? []
        var counts = FloodCounts()
        while !stop.load(ordering: .relaxed) {
            let dealers = (0..<connections).compactMap { _ in socket(context, .dealer, target.requestEndpoint, receiveHighWaterMark: 1) }
            for dealer in dealers {
                for _ in 0..<batches where (try? dealer.send(batch, flags: .dontWait)) == true { counts.sent += listsPerBatch }
            }
            usleep(500_000)
            dealers.forEach { $0.close() }
        }
        return counts
    }

    /// 1 MiB writes, 8 in flight, while the flooder's own subscriber to them reads nothing.
    private func unreadPublications(until stop: borrowing Atomic<Bool>) -> FloodCounts {
        guard let wire = client(), let context = try? ZMQContext(),
              let subscriber = socket(context, .sub, target.publishEndpoint, receiveHighWaterMark: 1) else { return FloodCounts() }
        try? subscriber.subscribe(Array("flood.".utf8))
        usleep(300_000)
        let value = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 1, count: 1_000_000) }
        var counts = FloodCounts()
        while !stop.load(ordering: .relaxed) {
            while counts.sent - counts.accepted - counts.refused < 8 {
                guard (try? wire.send(.put(.with { $0.key = "flood.v\(counts.sent % 10)"; $0.value = value }))) != nil else { break }
                counts.sent += 1
            }
            while let reply = try? wire.receiveReply(timeoutMilliseconds: 1) {
                if case .error = reply.result { counts.refused += 1 } else { counts.accepted += 1 }
            }
        }
        subscriber.close()
        return counts
    }

    /// Small puts, 1,000 in flight, while `subscribers` connections subscribed to them read
    /// nothing (libzmq on this side takes one message each, then the kernel's queues fill).
    private func unreadSmallPublications(subscribers count: Int, until stop: borrowing Atomic<Bool>) -> FloodCounts {
        guard let wire = client(), let context = try? ZMQContext() else { return FloodCounts() }
        let subscribers = (0..<count).compactMap { _ in socket(context, .sub, target.publishEndpoint, receiveHighWaterMark: 1) }
        for subscriber in subscribers { try? subscriber.subscribe(Array("flood.s.".utf8)) }
        usleep(300_000)
        var counts = FloodCounts()
        while !stop.load(ordering: .relaxed) {
            while counts.sent - counts.accepted - counts.refused < 1000 {
                let value = Beacon_V1_Value.with { $0.intValue = Int64(counts.sent) }
                guard (try? wire.send(.put(.with { $0.key = "flood.s.k\(counts.sent % 100)"; $0.value = value }))) != nil else { break }
                counts.sent += 1
            }
            while let reply = try? wire.receiveReply(timeoutMilliseconds: 1) {
                if case .error = reply.result { counts.refused += 1 } else { counts.accepted += 1 }
            }
        }
        for subscriber in subscribers { subscriber.close() }
        return counts
    }
}
