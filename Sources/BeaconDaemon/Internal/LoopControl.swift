import BeaconLocking
import BeaconZMQ
import Synchronization

/// What other threads use to reach the loop: stop it, hand it a reloaded configuration, wake it,
/// and wait until it has finished. Everything else of the daemon is the loop thread's.
final class LoopControl: Sendable {
    private enum FinishState {
        case running
        case waiting([CheckedContinuation<Void, Never>])
        case finished
    }

    /// Wakes the loop's poll (a stop, a reload, a finished commit).
    let wake: WakePipe
    private let stopFlag = Atomic<Bool>(false)
    private let started = Atomic<Bool>(false)
    private let pendingReload = Locked<DaemonConfiguration?>(nil)
    private let finishState = Locked<FinishState>(.running)

    init() throws(ZMQError) {
        wake = try WakePipe()
    }

    /// Whether the loop was started.
    var isStarted: Bool { started.load(ordering: .acquiring) }

    /// The loop was started.
    func markStarted() { started.store(true, ordering: .releasing) }

    /// Whether the loop is to stop at the end of its pass.
    var isStopRequested: Bool { stopFlag.load(ordering: .relaxed) }

    /// Asks the loop to stop, from any thread (or the loop itself, after a fault).
    func requestStop() {
        stopFlag.store(true, ordering: .sequentiallyConsistent)
        wake.wake()
    }

    /// Hands the loop a configuration to apply (the last one handed wins).
    func requestReload(_ configuration: DaemonConfiguration) {
        pendingReload.withLock { $0 = configuration }
        wake.wake()
    }

    /// The configuration handed since the last call, if any (loop thread).
    func takeReload() -> DaemonConfiguration? {
        pendingReload.withLock { pending in defer { pending = nil }; return pending }
    }

    /// The loop has finished and closed everything: whoever waits goes on.
    func finish() {
        let waiting = finishState.withLock { state -> [CheckedContinuation<Void, Never>] in
            defer { state = .finished }
            if case .waiting(let list) = state { return list }
            return []
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Waits until ``finish()``.
    func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = finishState.withLock { state -> Bool in
                switch state {
                case .finished: return true
                case .running: state = .waiting([continuation]); return false
                case .waiting(var list): list.append(continuation); state = .waiting(list); return false
                }
            }
            if resumeNow { continuation.resume() }
        }
    }
}
