import Foundation

/// Stops the process `pid` (SIGSTOP) and returns once every one of its threads has stopped.
///
/// Linux stops a process's threads one by one after `kill` has returned: a thread that was
/// running may still answer a request meanwhile (seen on this machine's VMs, under load). A test
/// that needs the process frozen waits for it here.
/// - Returns: whether every thread stopped within 30 s.
@discardableResult
public func freeze(_ pid: pid_t) -> Bool {
    guard kill(pid, SIGSTOP) == 0 else { return false }
    let deadline = Date().addingTimeInterval(30)
    while Date() < deadline {
        if everyThreadStopped(pid) { return true }
        usleep(1_000)
    }
    return everyThreadStopped(pid)
}

/// Lets a process stopped by ``freeze(_:)`` go on (SIGCONT).
public func thaw(_ pid: pid_t) {
    kill(pid, SIGCONT)
}

/// Whether each thread of `pid` is in state `T` (stopped) or `t` (traced), as `/proc` tells it.
private func everyThreadStopped(_ pid: pid_t) -> Bool {
    guard let threads = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"), !threads.isEmpty else {
        return false
    }
    return threads.allSatisfy { thread in
        // `pid (name) S …`: the state follows the last parenthesis (a name may hold one).
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(after: close)...].drop { $0 == " " }.first
        return state == "T" || state == "t"
    }
}
