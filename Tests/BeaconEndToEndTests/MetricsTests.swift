import BeaconProtocol
import BeaconTestSupport
import BeaconWire
import Foundation
import Testing

/// Whether Prometheus's own text parser (Debian's python3-prometheus-client) is here.
let prometheusParserAvailable = runTool("/usr/bin/python3", ["-c", "import prometheus_client.parser"]) == 0

/// The metrics endpoint of a real daemon, read by a real scraper: `curl`, then Prometheus's own
/// parser (`prometheus_client`), so that what a scraper reads is what the tests read.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct MetricsTests {
    /// One sample: a metric's name, its labels and value.
    struct Sample: Hashable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// The `metrics http://…` line of the daemon's `beacond.endpoints`.
    static func metricsAddress(of daemon: DaemonProcess) throws -> String {
        let text = try String(contentsOfFile: daemon.runtimeDirectory + "/beacond.endpoints", encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("metrics ") }, "no metrics line in \(text)")
        return String(line.dropFirst("metrics ".count))
    }

    /// Scrapes `address` with curl and parses the answer with prometheus_client: every sample.
    static func scrape(_ address: String) throws -> [Sample] {
        let script = """
            import json, subprocess, sys
            from prometheus_client.parser import text_string_to_metric_families
            text = subprocess.run(["curl", "-sSf", "--max-time", "5", sys.argv[1] + "/metrics"], check=True,
                                  capture_output=True, text=True).stdout
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    print(json.dumps({"name": sample.name, "labels": sample.labels, "value": sample.value}))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script, address]
        let output = Pipe.forChild(), errors = Pipe.forChild()
        process.standardOutput = output
        process.standardError = errors
        try process.runSerially()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let problem = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.waitUntilExit(orKillAfterSeconds: 30))
        try #require(process.terminationStatus == 0, "the scrape failed: \(problem)")
        return try String(decoding: data, as: UTF8.self).split(separator: "\n").map { line in
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            return Sample(name: object["name"] as? String ?? "", labels: object["labels"] as? [String: String] ?? [:],
                          value: (object["value"] as? NSNumber)?.doubleValue ?? .nan)
        }
    }

    /// The value of the sample named `name` with `labels`, or nil.
    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { $0.name == name && $0.labels == labels }?.value
    }

    @Test("Counters and gauges move as writes, refusals and subscribers do; a histogram times commits",
          .enabled(if: prometheusParserAvailable, "needs python3-prometheus-client and curl (make deps)"))
    func aScrapeFollowsWritesRefusalsAndSubscribers() throws {
        let dir = try temporaryDirectory()
        try "metrics_listen = 127.0.0.1:0\n".write(toFile: dir + "/m.conf", atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--config", dir + "/m.conf"])
        defer { daemon.stop() }
        let address = try Self.metricsAddress(of: daemon)
        #expect(address.hasPrefix("http://127.0.0.1:") && !address.hasSuffix(":0"))
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let before = try Self.scrape(address)
        #expect(Self.value(before, "beacon_writes_total") == 0)
        #expect(Self.value(before, "beacon_refusals_total", ["code": "version_conflict"]) == 0)

        for index in 0..<50 { _ = try client.put("m.k\(index)", .with { $0.intValue = Int64(index) }) }
        for _ in 0..<3 { #expect(throws: WireError.self) { try client.put("m.k0", .with { $0.intValue = 9 }, ifVersion: 7) } }
        let subscribers = try (0..<2).map { _ in try WireClient(runtimeDirectory: daemon.runtimeDirectory) }
        for subscriber in subscribers { try subscriber.subscribe("m.") }

        // Recorded once a heartbeat (100 ms here): the scrape shows them soon after.
        var samples: [Sample] = []
        let moved = try waitUntil(seconds: 30) {
            samples = try Self.scrape(address)
            return Self.value(samples, "beacon_writes_total") == 50 && Self.value(samples, "beacon_subscriber_connections") == 2
                && Self.value(samples, "beacon_refusals_total", ["code": "version_conflict"]) == 3
        }
        #expect(moved, "the metrics did not follow: \(samples.filter { $0.name.hasPrefix("beacon_writes") || $0.name.hasPrefix("beacon_refusals") || $0.name.contains("connections") })")
        #expect(Self.value(samples, "beacon_head_revision") == 50)
        #expect(Self.value(samples, "beacon_keys") == 50)
        #expect((Self.value(samples, "beacon_commits_total") ?? 0) >= 1)
        #expect((Self.value(samples, "beacon_journal_bytes") ?? 0) > 0)
        #expect(Self.value(samples, "beacon_read_only") == 0)
        // Every commit timed: the histogram's count is the commits'.
        #expect(Self.value(samples, "beacon_commit_duration_seconds_count") == Self.value(samples, "beacon_commits_total"))
        #expect(samples.contains { $0.name == "beacon_commit_duration_seconds_bucket" && $0.labels["le"] == "+Inf" })
        #expect((Self.value(samples, "beacon_read_duration_seconds_count") ?? 0) >= 1)  // the subscribers' pings, the reads
    }

    @Test("A relay's metrics say whether its upstream is reachable and how far behind it is",
          .enabled(if: prometheusParserAvailable, "needs python3-prometheus-client and curl (make deps)"))
    func aRelaysMetricsFollowItsUpstream() throws {
        let dir = try temporaryDirectory()
        let primary = try DaemonProcess(runtimeDirectory: dir + "/primary-run", stateDirectory: dir + "/primary-state")
        defer { primary.stop() }
        let writer = try WireClient.patient(runtimeDirectory: primary.runtimeDirectory)
        for index in 0..<20 { _ = try writer.put("r.k\(index)", .with { $0.intValue = Int64(index) }) }
        let relay = try DaemonProcess(runtimeDirectory: dir + "/relay-run", stateDirectory: dir + "/relay-state", extraArguments: [
            "--upstream", "ipc://\(primary.runtimeDirectory)/beacon.req", "--metrics-listen", "127.0.0.1:0"])
        defer { relay.stop() }
        let address = try Self.metricsAddress(of: relay)
        var samples: [Sample] = []
        #expect(try waitUntil(seconds: 30) {
            samples = try Self.scrape(address)
            return Self.value(samples, "beacon_upstream_reachable") == 1 && Self.value(samples, "beacon_head_revision") == 20
                && Self.value(samples, "beacon_upstream_head_revision") == 20
        }, "the relay's metrics: \(samples.filter { $0.name.contains("upstream") || $0.name == "beacon_head_revision" })")
        #expect(Self.value(samples, "beacon_upstream_lag_revisions") == 0)
        // The primary gone: the relay says so, and how long it has not heard from it.
        primary.stop(signal: SIGKILL)
        #expect(try waitUntil(seconds: 30) {
            samples = try Self.scrape(address)
            return Self.value(samples, "beacon_upstream_reachable") == 0 && (Self.value(samples, "beacon_upstream_silent_seconds") ?? 0) > 0
        }, "the relay's metrics: \(samples.filter { $0.name.contains("upstream") })")
    }

    @Test("The endpoint answers only GET /metrics; a bad metrics_listen is refused")
    func theEndpointAnswersOnlyItsPath() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state",
                                       extraArguments: ["--metrics-listen", "unix:\(dir)/metrics.sock"])
        defer { daemon.stop() }
        #expect(try Self.metricsAddress(of: daemon) == "unix:\(dir)/metrics.sock")
        func curl(_ arguments: [String]) throws -> (status: Int32, output: String) {
            let run = try Process.runToEnd("/usr/bin/curl", ["-s", "--max-time", "5", "--unix-socket", dir + "/metrics.sock",
                                                             "-w", "%{http_code}"] + arguments, limitSeconds: 30)
            #expect(run.exitedInTime)
            return (run.status, run.stdout)
        }
        let metrics = try curl(["http://localhost/metrics"])
        #expect(metrics.output.hasSuffix("200") && metrics.output.contains("# TYPE beacon_writes_total counter"), "\(metrics.output.prefix(300))")
        #expect(try curl(["http://localhost/other"]).output.hasSuffix("404"))
        #expect(try curl(["-X", "POST", "http://localhost/metrics"]).output.hasSuffix("405"))
        // Plain HTTP is for loopback only.
        for bad in ["10.0.0.1:9100", "0.0.0.0:9100", "127.0.0.1:99999", "nowhere", "unix:relative.sock"] {
            let run = try Process.runToEnd(try binary("beacond"), ["--metrics-listen", bad, "--check-config", "--runtime-dir", dir + "/r2",
                                                                   "--state-dir", dir + "/s2"], limitSeconds: 30)
            #expect(run.exitedInTime)
            #expect(run.status == 64 && run.stderr.hasPrefix("beacond: --metrics-listen: 'metrics_listen'"), "\(bad): \(run.stderr)")
        }
    }
}
