import BeaconLocking
import Foundation
import Testing

@Suite("The package's lock", .timeLimit(.minutes(3)))
struct LockedTests {
    /// Four threads contend for one lock around a plain array. Under `make test-race` this
    /// stops the run if ThreadSanitizer cannot see the lock's hand-offs, as it cannot see the
    /// standard library's `Mutex` when a waiter sleeps on its futex.
    @Test func contendedHandOffsAreSeenByTheRaceChecker() {
        let items = Locked<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        for thread in 0..<4 {
            Thread.detachNewThread {
                for i in 0..<20_000 { items.withLock { $0.append(thread * 20_000 + i) } }
                done.signal()
            }
        }
        for _ in 0..<4 { done.wait() }
        #expect(items.withLock { Set($0) } == Set(0..<80_000))
    }

    /// The standard library's `Mutex` is not used anywhere in the package (see above).
    @Test func noSourceFileUsesTheStandardLibrarysMutex() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        var offenders: [String] = []
        for folder in ["Sources", "Tests", "Benchmarks/Sources"] {
            guard let files = FileManager.default.enumerator(atPath: root.appendingPathComponent(folder).path) else { continue }
            for case let file as String in files where file.hasSuffix(".swift") {
                let text = try String(contentsOf: root.appendingPathComponent(folder).appendingPathComponent(file), encoding: .utf8)
                if text.contains(/\bMutex\s*[<(]/) { offenders.append(folder + "/" + file) }
            }
        }
        #expect(offenders == [])
    }
}
