import Foundation
import Testing

/// The suite's one way to wait: for a condition, checked every few milliseconds, never for a
/// time. Every waiting helper of the tests is one of these with its condition.

/// Checks `condition` every 5 ms until it holds or `seconds` pass, and once more then: a test
/// resumed late (a loaded machine) still sees a condition met meanwhile.
/// - Returns: whether it held.
public func waitUntil(seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return true }
        usleep(5_000)
    }
    return try condition()
}

/// ``waitUntil(seconds:_:)``, recording an issue that names `what` when it never holds.
@discardableResult
public func eventually(_ what: String, seconds: Double = 10, sourceLocation: SourceLocation = #_sourceLocation,
                       _ condition: () throws -> Bool) rethrows -> Bool {
    if try waitUntil(seconds: seconds, condition) { return true }
    Issue.record("not within \(seconds) s: \(what)", sourceLocation: sourceLocation)
    return false
}

/// ``waitUntil(seconds:_:)`` from async code: the task sleeps between checks, so that no thread
/// of the shared pool is held while it waits.
public func pollUntil(within timeout: Duration, every interval: Duration = .milliseconds(5),
                      _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}
