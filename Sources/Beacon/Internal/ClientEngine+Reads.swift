import BeaconProtocol

/// A read on its way to the daemon (``BeaconClient/read(_:as:consistency:)`` and its kin).
struct ReadRequest: Sendable {
    var op: Beacon_V1_Request.OneOf_Op
    /// Called once, from the I/O thread, with the daemon's reply or why none came.
    var complete: @Sendable (Result<Beacon_V1_Reply, BeaconError>) -> Void
}

/// A read between its first send and its answer.
final class PendingRead {
    let request: ReadRequest
    /// After this, the read fails with `.unreachable`.
    let deadline: UInt64
    /// When to send it again if no reply came (reads may be repeated).
    var nextAttempt: UInt64

    init(request: ReadRequest, now: UInt64, timeout: UInt64, retry: UInt64) {
        self.request = request
        deadline = now + timeout
        nextAttempt = now + retry
    }
}

extension ClientEngine {
    func send(_ read: ReadRequest) {
        let id = nextID()
        pendingReads[id] = PendingRead(request: read, now: ClientEngine.now(), timeout: configuration.writeTimeoutMilliseconds,
                                       retry: configuration.requestTimeoutMilliseconds)
        sendRequest(id: id, read.op)
    }

    /// Takes the reply to a read; false when `reply` answers none.
    func handleRead(_ reply: Beacon_V1_Reply) -> Bool {
        guard let read = pendingReads.removeValue(forKey: reply.id) else { return false }
        if case .error(let error) = reply.result, error.code == .upstreamUnavailable, ClientEngine.now() < read.deadline {
            pendingReads[reply.id] = read  // a front or relay cut off for now: asked again at its next retry
            return true
        }
        read.request.complete(.success(reply))
        return true
    }

    /// Resends unanswered reads and fails those past their deadline.
    func serviceReads(now: UInt64) {
        if let refusal = requests.refusal {
            for read in pendingReads.values { read.request.complete(.failure(BeaconError(.permissionDenied, refusal.message))) }
            pendingReads.removeAll()
        }
        for (id, read) in pendingReads {
            if now >= read.deadline {
                pendingReads[id] = nil
                read.request.complete(.failure(BeaconError(
                    .unreachable, "no answer from beacond at \(configuration.requestEndpoint) within \(configuration.writeTimeoutMilliseconds) ms")))
            } else if now >= read.nextAttempt {
                read.nextAttempt = now + configuration.requestTimeoutMilliseconds
                sendRequest(id: id, read.request.op)
            }
        }
    }
}
