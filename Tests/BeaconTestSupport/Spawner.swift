import Foundation
import BeaconLocking

/// Starts every process the tests run, one at a time, from one thread that lives as long as the
/// test process, each under `setpriv --pdeathsig KILL`: the kernel kills it when that thread, and
/// so the test process, ends. A test process that crashed or was killed left `beacond`s running
/// that held `swift test`'s output pipes open, and `swift test` waited for them for ever.
///
/// Its children start with no signal blocked.
///
/// One at a time also because Foundation on Linux watches a child's exit through a socket pair
/// whose child end must be closed everywhere but in the child; spawned from several threads at
/// once, an end can stay open in this process or leak into a sibling, and `waitUntilExit()` then
/// waits forever for a child that has exited (swift-corelibs-foundation#4795).
final class Spawner: @unchecked Sendable {
    static let shared = Spawner()
    private let condition = NSCondition()
    private var jobs: [() -> Void] = []

    private init() {
        let thread = Thread { [unowned self] in
            // Children inherit the signal mask of the thread that starts them, and this one's
            // creator may be a dispatch worker, which blocks nearly every signal: a `beacon watch`
            // started so could not be stopped with SIGTERM.
            var none = sigset_t()
            sigemptyset(&none)
            pthread_sigmask(SIG_SETMASK, &none, nil)
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
        thread.name = "test-spawner"
        thread.start()
    }

    /// Runs `body` on the spawner's thread and returns what it returned.
    func run<T>(_ body: @escaping () throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var result: Result<T, Error>?
        condition.lock()
        jobs.append {
            result = Result { try body() }
            done.signal()
        }
        condition.signal()
        condition.unlock()
        done.wait()
        return try result!.get()
    }
}

private let setpriv = "/usr/bin/setpriv"

extension Pipe {
    /// A pipe for a child's standard input or output, made on the spawner's thread. Foundation
    /// keeps a child from inheriting this process's descriptors by listing the open ones just
    /// before it spawns; a pipe another thread opens in that moment goes to the child (an etcd
    /// member, a daemon) and stays open there as long as it runs, so whoever waits for that
    /// pipe's end (a test reading a tool's output to EOF, or writing its input) waits for ever.
    /// Made here, no pipe opens while a child is being spawned. Tests make every pipe so.
    public static func forChild() -> Pipe {
        try! Spawner.shared.run { Pipe() }  // the body does not throw
    }
}

extension Process {
    /// Waits for the process to exit; kills it (SIGKILL) if it has not after `seconds`.
    /// - Returns: whether it exited by itself.
    @discardableResult
    public func waitUntilExit(orKillAfterSeconds seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        let exited = !isRunning
        if !exited { kill(processIdentifier, SIGKILL) }
        waitUntilExit()
        return exited
    }

    /// Runs `executable` to its end through the tests' spawner (in `directory`, if given).
    /// - Returns: its exit status and what it printed, standard output and error together.
    public static func runToEnd(_ executable: String, _ arguments: [String],
                                in directory: String? = nil) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let output = Pipe.forChild()
        process.standardOutput = output
        process.standardError = output
        try process.runSerially()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    /// What a tool run to its end printed, and how it ended.
    public struct Outcome: Sendable {
        public var status: Int32
        public var stdout: String
        public var stderr: String
        /// Whether it exited by itself within its limit (otherwise it was killed).
        public var exitedInTime: Bool
    }

    /// Runs `executable` to its end through the tests' spawner, its output and errors apart; one
    /// still running after `limitSeconds` is killed (`exitedInTime` false): a test never waits on
    /// it for ever.
    public static func runToEnd(_ executable: String, _ arguments: [String], limitSeconds: Double) throws -> Outcome {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = Pipe.forChild(), errors = Pipe.forChild()
        process.standardOutput = output
        process.standardError = errors
        try process.runSerially()
        // Both read while it runs, so that neither pipe fills and holds it up.
        let texts = Locked(["", ""])
        let readers = DispatchGroup()
        for (index, pipe) in [output, errors].enumerated() {
            readers.enter()
            Thread.detachNewThread {
                let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                texts.withLock { $0[index] = text }
                readers.leave()
            }
        }
        let exited = process.waitUntilExit(orKillAfterSeconds: limitSeconds)
        readers.wait()
        let (stdout, stderr) = texts.withLock { ($0[0], $0[1]) }
        return Outcome(status: process.terminationStatus, stdout: stdout, stderr: stderr, exitedInTime: exited)
    }

    /// `run()` through the tests' spawner: killed when the test process ends.
    public func runSerially() throws {
        if FileManager.default.isExecutableFile(atPath: setpriv), let executable = executableURL?.path {
            if executable == setpriv {
                arguments = ["--pdeathsig", "KILL"] + (arguments ?? [])
            } else {
                arguments = ["--pdeathsig", "KILL", "--", executable] + (arguments ?? [])
                executableURL = URL(fileURLWithPath: setpriv)
            }
        }
        let process = self
        try Spawner.shared.run { try process.run() }
    }
}
