import BeaconProtocol

/// A write between its first send and its completion.
final class PendingWrite {
    let id: UInt64
    let request: WriteRequest
    /// After this, the write fails with `.unreachable` (or, once committed, completes anyway).
    let deadline: UInt64
    /// When to send it again if no reply came (same request id, same write id).
    var nextAttempt: UInt64
    /// The daemon's answer, once it came.
    var result: WriteResult?
    var repliedAt: UInt64 = 0
    var repairAsked = false

    init(id: UInt64, request: WriteRequest, now: UInt64, timeout: UInt64, retry: UInt64) {
        self.id = id
        self.request = request
        deadline = now + timeout
        nextAttempt = now + retry
    }
}

extension ClientEngine {
    /// Sends writes in order: one alone as itself, several as batches of at most
    /// `WireLimits.maxBatchRequests`, each write keeping its own id and reply.
    func send(_ requests: [WriteRequest]) {
        guard !requests.isEmpty else { return }
        let now = ClientEngine.now()
        let writes = requests.map { request in
            let write = PendingWrite(id: nextID(), request: request, now: now, timeout: configuration.writeTimeoutMilliseconds,
                                     retry: configuration.requestTimeoutMilliseconds)
            pendingWrites[write.id] = write
            return write
        }
        if writes.count == 1 {
            sendRequest(id: writes[0].id, writes[0].request.op)
        } else {
            for start in stride(from: 0, to: writes.count, by: WireLimits.maxBatchRequests) {
                let chunk = writes[start..<min(start + WireLimits.maxBatchRequests, writes.count)]
                // The batch's own id is no write's: its reply is unpacked into theirs.
                sendRequest(id: nextID(), .batch(.with {
                    $0.requests = chunk.map { write in .with { $0.id = write.id; $0.op = write.request.op } }
                }))
            }
        }
        if requests.contains(where: \.bindsSession) && nextKeepAlive == 0 { keepSessionAlive(now: now) }  // sets the session's time to live
    }

    /// A reply that is not the one a blocking call waits for: a write's, or a batch of them.
    /// A batch the daemon refused as a whole leaves its writes to be sent again one by one when
    /// their retry is due.
    func handle(_ reply: Beacon_V1_Reply) {
        if handleRead(reply) { return }  // a read's reply, a batch of them too
        if case .batch(let batch) = reply.result {
            for inner in batch.replies { handle(inner) }
            return
        }
        guard let write = pendingWrites.removeValue(forKey: reply.id) else { return }  // a late duplicate
        switch reply.result {
        case .write(let committed):
            write.result = WriteResult(revision: committed.revision, versions: committed.versions, replayed: committed.replayed)
            write.repliedAt = ClientEngine.now()
            awaitingMirror.append(write)  // completed by the loop's next serviceWrites
        case .error(let error) where error.code == .upstreamUnavailable && ClientEngine.now() < write.deadline:
            // A relay that cannot reach its upstream now: the same write (same write id, so at
            // most once) is sent again at its next retry, until its deadline.
            pendingWrites[write.id] = write
        case .error(let error):
            write.request.complete(.failure(BeaconError(reply: error, operationCount: write.request.keys.count)))
        default:
            write.request.complete(.failure(BeaconError(.rejected, "the daemon answered a write with \(String(describing: reply.result))")))
        }
    }

    /// While the daemon refuses this peer's connection, fails every write waiting for a reply
    /// with the refusal: no reply will come.
    func failWritesWhileRefused() {
        guard let refusal = requests.refusal, !pendingWrites.isEmpty else { return }
        for write in pendingWrites.values {
            write.request.complete(.failure(BeaconError(.permissionDenied, refusal.message, key: write.request.keys.first)))
        }
        pendingWrites.removeAll()
    }

    /// Resends unanswered writes, fails those past their deadline, and completes committed ones
    /// whose mirrors caught up.
    func serviceWrites(now: UInt64) {
        failWritesWhileRefused()
        for write in pendingWrites.values {
            if now >= write.deadline {
                pendingWrites[write.id] = nil
                write.request.complete(.failure(BeaconError(
                    .unreachable,
                    "no reply from beacond at \(configuration.requestEndpoint) within \(configuration.writeTimeoutMilliseconds) ms; the write may not have been committed (is beacond running?)",
                    key: write.request.keys.first)))
            } else if now >= write.nextAttempt {
                write.nextAttempt = now + configuration.requestTimeoutMilliseconds
                sendRequest(id: write.id, write.request.op)  // the write id makes the retry idempotent
            }
        }
        completeCaughtUpWrites()
    }

    /// Read-your-writes: a committed write completes once every mirror that follows one of its
    /// keys holds its revision, so the completion runs after the graph applied it.
    private func completeCaughtUpWrites() {
        guard !awaitingMirror.isEmpty else { return }
        let now = ClientEngine.now()
        var toRepair: [String] = []
        awaitingMirror.removeAll { write in
            guard let result = write.result else { return true }
            let caughtUp = write.request.keys.allSatisfy { mirrors.hasReleased(result.revision, forKey: $0) }
            if caughtUp || now >= write.deadline {
                let complete = write.request.complete
                post(.completion { complete(.success(result)) })
                return true
            }
            if !write.repairAsked && now >= write.repliedAt + 100 {
                // The diffs should have come before the reply; fetch them instead of waiting.
                write.repairAsked = true
                for key in write.request.keys { toRepair.append(contentsOf: mirrors.lagging(key, behind: result.revision)) }
            }
            return false
        }
        for prefix in toRepair { mirrors.repair(prefix) }
    }
}

