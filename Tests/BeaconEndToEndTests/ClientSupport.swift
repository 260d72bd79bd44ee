import Beacon
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
        configure(&configuration)
        client = try BeaconClient(configuration: configuration)
    }

    /// Runs `body` on the delivery queue (where the signals live).
    func onQueue<T>(_ body: () throws -> T) rethrows -> T {
        try queue.sync(execute: body)
    }

    /// Waits until `condition` (evaluated on the delivery queue) holds; records an issue on timeout.
    @discardableResult
    func wait(timeout: Duration = .seconds(10), _ what: String = "", sourceLocation: SourceLocation = #_sourceLocation,
              until condition: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if queue.sync(execute: condition) { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
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
