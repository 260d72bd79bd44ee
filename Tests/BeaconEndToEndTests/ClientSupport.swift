import Beacon
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// A client whose updates are applied on its own serial queue, with helpers to read its signals
/// there and to wait for a condition on them.
final class TestClient: @unchecked Sendable {
    let queue: DispatchQueue
    let client: BeaconClient

    init(runtimeDirectory: String, configure: (inout BeaconConfiguration) -> Void = { _ in }) throws {
        queue = DispatchQueue(label: "test-client")
        var configuration = BeaconConfiguration(runtimeDirectory: runtimeDirectory)
        configuration.delivery = .queue(queue)
        configuration.requestTimeout = .milliseconds(300)
        // A write is re-sent every 300 ms until answered; a starved machine may take long to answer
        // thousands at once, and no test here waits out a write's timeout.
        configuration.writeTimeout = .seconds(120)
        configure(&configuration)
        client = try BeaconClient(configuration: configuration)
    }

    /// Runs `body` on the delivery queue (where the signals live).
    func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        try queue.sync(execute: body)
    }

    /// Waits until `condition` (evaluated on the delivery queue) holds; records an issue on timeout.
    @discardableResult
    func wait(timeout: Duration = .seconds(30), _ what: String = "", sourceLocation: SourceLocation = #_sourceLocation,
              until condition: () -> Bool) async -> Bool {
        // Checked once more after the deadline: a test that sleeps may be resumed long after it
        // (the suite's blocking tests can hold every thread of the pool), with the condition met.
        if await pollUntil(within: timeout, every: .milliseconds(10), { queue.sync(execute: condition) }) { return true }
        Issue.record("timed out waiting \(what)", sourceLocation: sourceLocation)
        return false
    }
}

/// A value shared with effects that run on the delivery queue.
final class Recorder<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Value] = []

    func append(_ value: Value) { lock.withLock { values.append(value) } }
    var all: [Value] { lock.withLock { values } }
}

/// A `beacon-client-probe` process: a separate client whose output lines the test reads.
final class ProbeProcess: @unchecked Sendable {
    let process = Process()
    private let input = Pipe.forChild()
    private let output = Pipe.forChild()
    private let lock = NSLock()
    private var received: [String] = []
    private var partial = Data()
    private let readerFinished = DispatchSemaphore(value: 0)

    init(runtimeDirectory: String, prefix: String, highWaterMark: Int32? = nil, pair: (String, String)? = nil,
         sessionKey: String? = nil, bundles: Bool = true) throws {
        process.executableURL = URL(fileURLWithPath: try binary("beacon-client-probe"))
        var arguments = ["--runtime-dir", runtimeDirectory, "--prefix", prefix]
        if let highWaterMark { arguments += ["--hwm", "\(highWaterMark)"] }
        if let pair { arguments += ["--pair", pair.0, pair.1] }
        if let sessionKey { arguments += ["--session-key", sessionKey] }
        if !bundles { arguments.append("--no-bundles") }
        process.arguments = arguments
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.runSerially()
        // A thread of its own reads until end of file (a readability handler may run after the
        // pipe is closed, and Foundation traps when it then reads).
        let handle = output.fileHandleForReading
        Thread.detachNewThread { [self] in
            while let data = readSome(handle) { take(data) }
            readerFinished.signal()
        }
    }

    private func take(_ data: Data) {
        lock.withLock {
            partial.append(data)
            while let newline = partial.firstIndex(of: 0x0A) {
                received.append(String(decoding: partial[partial.startIndex..<newline], as: UTF8.self))
                partial.removeSubrange(partial.startIndex...newline)
            }
        }
    }

    /// Every line printed so far.
    var lines: [String] { lock.withLock { received } }

    /// The probe's mirror, connection state and repair, resync and bundle counts, freshly asked for.
    func dump() async throws -> (state: [String: Int], connection: String, repairs: Int, resyncs: Int, bundles: Int) {
        let before = lines.filter { $0.hasPrefix("S ") }.count
        input.fileHandleForWriting.write(Data("dump\n".utf8))
        for _ in 0..<500 {
            let answers = lines.filter { $0.hasPrefix("S ") }
            if answers.count > before {
                let fields = answers[before].split(separator: " ")
                let state = try JSONSerialization.jsonObject(with: Data(fields[1].utf8)) as? [String: Int] ?? [:]
                return (state, String(fields[2]), Int(fields[3]) ?? -1, Int(fields[4]) ?? -1, Int(fields[5]) ?? -1)
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        throw ProbeError(message: "the probe did not answer dump")
    }

    /// Waits until the probe's mirror satisfies `condition`.
    func waitForState(timeout: Duration = .seconds(30), _ condition: ([String: Int], String) -> Bool) async throws -> Bool {
        try await pollUntil(within: timeout, every: .milliseconds(50)) {
            let dump = try await dump()
            return condition(dump.state, dump.connection)
        }
    }

    /// History lines as (revision, key, value or nil for deletions).
    var history: [(revision: UInt64, key: String, value: Int?)] {
        lines.compactMap { line in
            let fields = line.split(separator: " ")
            guard fields.count == 4, fields[0] == "H", let revision = UInt64(fields[1]) else { return nil }
            return (revision, String(fields[2]), Int(fields[3]))
        }
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        process.waitUntilExit()
        _ = readerFinished.wait(timeout: .now() + 10)
    }

    struct ProbeError: Error { let message: String }
}

/// The daemon's live keys under `prefix` with integer values.
func daemonState(_ client: WireClient, prefix: String) throws -> [String: Int] {
    var state: [String: Int] = [:]
    for kv in try client.snapshot(prefix: prefix).kvs { state[kv.key] = Int(kv.value.intValue) }
    return state
}

/// Every change under `prefix` in the daemon's journal after `revision`, in order.
func daemonHistory(_ client: WireClient, prefix: String, after revision: UInt64 = 0) throws -> [(revision: UInt64, key: String, value: Int?)] {
    var events: [(revision: UInt64, key: String, value: Int?)] = []
    var since = revision
    while true {
        let page = try client.delta(prefix: prefix, since: since)
        for event in page.events {
            events.append((event.revision, event.change.key, event.change.kind == .put ? Int(event.change.value.intValue) : nil))
        }
        since = page.revision
        if !page.more { return events }
    }
}

/// The bytes a pipe has now, waiting for some; nil at end of file or on an error.
func readSome(_ handle: FileHandle) -> Data? {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let count = buffer.withUnsafeMutableBytes { read(handle.fileDescriptor, $0.baseAddress, $0.count) }
        if count < 0 && errno == EINTR { continue }
        return count > 0 ? Data(buffer[0..<count]) : nil
    }
}
