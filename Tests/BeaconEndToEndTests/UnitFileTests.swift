import Foundation
import Testing

private let systemdAnalyze = "/usr/bin/systemd-analyze"

/// The shipped unit, as `make install` writes it, checked by systemd's own tool.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: systemdAnalyze), "systemd-analyze is not installed"))
struct UnitFileTests {
    private func installedUnit() throws -> String {
        let dir = try temporaryDirectory()
        let unit = try String(contentsOfFile: "deploy/beacond.service", encoding: .utf8)
            .replacingOccurrences(of: "@BINDIR@", with: URL(fileURLWithPath: try binary("beacond")).deletingLastPathComponent().path)
        let path = dir + "/beacond.service"
        try unit.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    private func run(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: systemdAnalyze)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.runSerially()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test func theUnitVerifiesAndIsRatedWellBySystemdAnalyzeSecurity() throws {
        let unit = try installedUnit()
        let verify = try run(["verify", unit])
        #expect(verify.status == 0, "\(verify.output)")
        let security = try run(["security", "--offline=true", unit])
        let line = try #require(security.output.split(separator: "\n").first { $0.contains("Overall exposure level") })
        let score = try #require(line.split(separator: " ").compactMap { Double($0) }.first)
        #expect(score <= 2.0, "\(line)")
    }
}
