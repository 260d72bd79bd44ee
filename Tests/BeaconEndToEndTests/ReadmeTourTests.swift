import Foundation
import Testing
import BeaconTestSupport

/// README.md's five-minute tour, run by bash as written (after its two build lines, which the
/// suite has done) on a fresh state, then again on the same state: the first run succeeds line
/// by line; the second succeeds too, but for the lines that cannot succeed twice, and those say
/// why in one line.
@Suite(.timeLimit(.minutes(4)), .offThePool)
struct ReadmeTourTests {
    /// The tour's lines, without the build lines (`swift build`, `export PATH=…`).
    static func tourLines() throws -> [String] {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        let tour = try #require(text.range(of: "## Five-minute tour"), "README.md has no tour")
        let body = text[tour.upperBound...]
        let start = try #require(body.range(of: "```sh\n"))
        let end = try #require(body[start.upperBound...].range(of: "```"))
        return body[start.upperBound..<end.lowerBound].split(separator: "\n").map(String.init)
            .filter { !$0.hasPrefix("swift build") && !$0.hasPrefix("export PATH") && !$0.hasPrefix(" ") }
    }

    struct TourRun {
        /// Each line's exit status (0 for a line that starts a background job), in order.
        var statuses: [(line: String, status: Int32)]
        var stderr: String
    }

    /// Runs the tour in `directory` (its home, runtime directory and working directory there).
    static func runTour(_ lines: [String], in directory: String) throws -> TourRun {
        var script = "set -m\n"  // job control: `kill %1` names the tour's jobs
        for (index, line) in lines.enumerated() { script += "\(line)\necho \"$? \(index)\" >&3\n" }
        let scriptPath = directory + "/tour.sh"
        try script.write(toFile: scriptPath, atomically: true, encoding: .utf8)
        let statusPath = directory + "/statuses-\(UUID().uuidString)"
        let bash = Process()
        bash.executableURL = URL(fileURLWithPath: "/bin/bash")
        bash.arguments = ["-c", "exec 3>\(statusPath); exec bash \(scriptPath)"]
        bash.currentDirectoryURL = URL(fileURLWithPath: directory + "/work")
        let bin = URL(fileURLWithPath: try binary("beacon")).deletingLastPathComponent().path
        bash.environment = ["PATH": "\(bin):/usr/bin:/bin", "HOME": directory + "/home", "XDG_RUNTIME_DIR": directory + "/xdg",
                            "LANG": "C.UTF-8"]
        bash.standardOutput = FileHandle.nullDevice
        let stderr = Pipe.forChild()
        bash.standardError = stderr
        bash.standardInput = FileHandle.nullDevice
        try bash.runSerially()
        let errors = stderr.fileHandleForReading.readDataToEndOfFile()
        #expect(bash.waitUntilExit(orKillAfterSeconds: 120), "the tour did not finish")
        let recorded = try String(contentsOfFile: statusPath, encoding: .utf8).split(separator: "\n").compactMap { record in
            let fields = record.split(separator: " ")
            return fields.count == 2 ? (Int(fields[1]) ?? -1, Int32(fields[0]) ?? -1) : nil
        }
        return TourRun(statuses: recorded.map { (lines[$0.0], $0.1) }, stderr: String(decoding: errors, as: UTF8.self))
    }

    @Test func theTourRunsOnAFreshStateAndAgainOnTheSameOne() throws {
        let lines = try Self.tourLines()
        #expect(lines.first?.hasPrefix("beacond &") == true && lines.count > 20, "\(lines)")
        let dir = try temporaryDirectory()
        for sub in ["home", "work"] { try FileManager.default.createDirectory(atPath: dir + "/" + sub, withIntermediateDirectories: true) }
        try FileManager.default.createDirectory(atPath: dir + "/xdg", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])

        let first = try Self.runTour(lines, in: dir)
        #expect(first.statuses.count == lines.count, "the tour stopped early: \(first.statuses.count) of \(lines.count) lines ran\n\(first.stderr)")
        for (line, status) in first.statuses {
            #expect(status == 0, "on a fresh state, `\(line)` exited \(status)\n\(first.stderr)")
        }
        #expect(FileManager.default.fileExists(atPath: dir + "/home/.local/state/beacon/journal.sqlite"), "the journal is not where the tour says")

        // Again on the same state: a key that exists now, and a backup file that exists now.
        let second = try Self.runTour(lines, in: dir)
        #expect(second.statuses.count == lines.count, "the second tour stopped early\n\(second.stderr)")
        let failed = second.statuses.filter { $0.status != 0 }
        #expect(failed.map { String($0.line.prefix(24)) } == ["beacon set net.mtu 1500 ", "beacon backup journal-co"], "\(failed)")
        #expect(failed.map(\.status) == [3, 64])
        #expect(second.stderr.contains("beacon: key 'net.mtu' is at version "), "\(second.stderr)")
        #expect(second.stderr.contains("journal-copy.sqlite exists; use --force to replace it"), "\(second.stderr)")
    }
}
