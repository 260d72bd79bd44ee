import Foundation
import Testing

/// The rules the tests' own process handling keeps (``Pipe/forChild()``).
struct SpawnerRuleTests {
    /// A pipe a test made on its own thread could open while another test spawns an
    /// etcd member or a daemon, which then holds it open for as long as it runs: a test reading
    /// a tool's output to its end, or writing it 20 MB of input, waited for ever (the whole
    /// suite hung). Every pipe of the tests is made on the spawner's thread instead.
    @Test func noTestMakesAPipeButOnTheSpawnersThread() throws {
        let tests = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        var offenders: [String] = []
        guard let files = FileManager.default.enumerator(atPath: tests.path) else { return }
        for case let file as String in files where file.hasSuffix(".swift") && !file.hasSuffix("Spawner.swift") {
            let text = try String(contentsOf: tests.appendingPathComponent(file), encoding: .utf8)
            if text.contains(/\bPipe\(\)/) { offenders.append(file) }
        }
        #expect(offenders == [], "make pipes with Pipe.forChild()")
    }
}
