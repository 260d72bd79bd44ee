import BeaconDaemon
import BeaconJournal
import Testing

/// Every whole-number setting takes exactly the values of its documented range, from a file and
/// as a flag would give it; line endings and stray control characters never turn a file into
/// something other than what its lines say.
struct ConfigurationRangeTests {
    static let base = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")

    /// 0, -1, the maximum, the maximum + 1 and 2^64 - 1 of each setting: accepted exactly when in range.
    @Test(arguments: DaemonConfiguration.numericSettings.map(\.name))
    func everyNumericSettingTakesItsRangeAndNothingElse(name: String) throws {
        let setting = try #require(DaemonConfiguration.numericSettings.first { $0.name == name })
        let upper = setting.range.upperBound
        let values: [(text: String, accepted: Bool)] = [
            ("0", setting.range.contains(0)), ("-1", false), (String(upper), true),
            (String(upper + 1), false), (String(UInt64.max), false), (String(setting.range.lowerBound), true),
            ("1e3", false), ("", false), ("ten", false),
        ]
        for (text, accepted) in values {
            var configuration = Self.base
            if accepted {
                try configuration.apply(fileContents: "\(name) = \(text)\n", path: "c.conf")
                #expect(configuration != Self.base || text == "\(Self.defaultValue(of: name, in: Self.base))" || setting.zeroMeans != nil,
                        "\(name) = \(text) changed nothing")
                var viaFlag = Self.base
                try viaFlag.apply(setting: name, value: text)
                #expect(viaFlag == configuration, "\(name) = \(text): the flag's path and the file's disagree")
            } else {
                let error = try #require(throws: DaemonConfiguration.FileError.self, "\(name) = '\(text)' was accepted") {
                    try configuration.apply(fileContents: "\(name) = \(text)\n", path: "c.conf")
                }
                #expect(error.line == 1)
                #expect(error.reason.contains("'\(name)' is a whole number from \(setting.range.lowerBound) to \(upper)"), "\(error)")
                #expect(configuration == Self.base, "a refused file changed the configuration")
                #expect(throws: SettingError.self) { try configuration.apply(setting: name, value: text) }
            }
        }
    }

    /// What a setting holds in `configuration`, as its file line writes it (only for the check
    /// that an accepted value lands somewhere).
    static func defaultValue(of name: String, in configuration: DaemonConfiguration) -> String {
        switch name {
        case "heartbeat_ms": "\(configuration.heartbeatIntervalMilliseconds)"
        case "session_ttl_ms": "\(configuration.sessionTTLMilliseconds)"
        case "retention_revisions": "\(configuration.retention.revisions ?? 0)"
        case "retention_age_s": "\((configuration.retention.maxAgeMilliseconds ?? 0) / 1000)"
        case "compaction_interval_s": "\(configuration.compactionIntervalSeconds)"
        case "max_batch": "\(configuration.maxBatch)"
        case "publish_hwm": "\(configuration.publishHighWaterMark)"
        case "max_value_bytes": "\(configuration.limits.maxValueBytes)"
        case "writes_per_second": "\(configuration.limits.writesPerSecond)"
        case "write_burst": "\(configuration.limits.writeBurst)"
        case "keys_per_peer": "\(configuration.limits.keysPerPeer)"
        case "pending_requests": "\(configuration.limits.pendingRequests)"
        case "subscriptions_per_peer": "\(configuration.limits.subscriptionsPerPeer)"
        case "sessions_per_peer": "\(configuration.limits.sessionsPerPeer)"
        case "leases_per_peer": "\(configuration.limits.leasesPerPeer)"
        case "connections_per_peer": "\(configuration.limits.connectionsPerPeer)"
        case "max_journal_bytes": "\(configuration.limits.maxJournalBytes)"
        case "reply_buffer_bytes": "\(configuration.limits.replyBufferBytes)"
        case "reply_buffer_peer_bytes": "\(configuration.limits.replyBufferPeerBytes)"
        case "reply_buffer_total_bytes": "\(configuration.limits.replyBufferTotalBytes)"
        case "publish_buffer_bytes": "\(configuration.limits.publishBufferBytes)"
        default: "?"
        }
    }

    @Test func theLargestValuesMakeNoArithmeticTrap() throws {
        var configuration = Self.base
        try configuration.apply(fileContents: DaemonConfiguration.numericSettings.map { "\($0.name) = \($0.range.upperBound)" }
            .joined(separator: "\n"), path: "c.conf")
        #expect(configuration.retention.maxAgeMilliseconds == 3_155_760_000_000)
        #expect(configuration.compactionIntervalSeconds == 2_592_000)
        #expect(configuration.limits.replyBufferBytes == 1 << 40)
    }

    /// "0 turns a limit off" holds for every limit that takes 0 — `subscriptions_per_peer` and
    /// `max_value_bytes` were refused.
    @Test func zeroTurnsTheLimitsOff() throws {
        var configuration = Self.base
        try configuration.apply(fileContents: "subscriptions_per_peer = 0\nmax_value_bytes = 0\nwrites_per_second = 0\n", path: "c.conf")
        #expect(configuration.limits.subscriptionsPerPeer == 0)
        #expect(configuration.limits.maxValueBytes == 1 << 20)  // the protocol's own limit
        #expect(configuration.limits.writesPerSecond == 0)
    }

    /// A CRLF file was one long line: `state_dir` took the rest of the file, and the bad settings
    /// after it went unseen.
    @Test func crlfAndCRLinesAreLinesAndABadOneIsNamed() throws {
        var configuration = Self.base
        #expect(throws: DaemonConfiguration.FileError(path: "c.conf", line: 2, reason: "'durability' is 'normal' or 'full', not 'bogus'")) {
            try configuration.apply(fileContents: "state_dir = /x\r\ndurability = bogus\r\nheartbeat_ms = 50\r\n", path: "c.conf")
        }
        try configuration.apply(fileContents: "state_dir = /x\r\nheartbeat_ms = 50\r\n", path: "c.conf")
        #expect(configuration.stateDirectory == "/x")
        #expect(configuration.heartbeatIntervalMilliseconds == 50)
        var classicMac = Self.base
        try classicMac.apply(fileContents: "state_dir = /y\rheartbeat_ms = 60\r", path: "c.conf")
        #expect(classicMac.stateDirectory == "/y")
        #expect(classicMac.heartbeatIntervalMilliseconds == 60)
        var withMark = Self.base
        try withMark.apply(fileContents: "\u{FEFF}heartbeat_ms = 70\n", path: "c.conf")
        #expect(withMark.heartbeatIntervalMilliseconds == 70)
    }

    @Test func controlCharactersAndEmptyDirectoriesAreRefusedWithTheirLine() throws {
        var configuration = Self.base
        #expect(throws: DaemonConfiguration.FileError(path: "c.conf", line: 2, reason: "control character U+0 in the line")) {
            try configuration.apply(fileContents: "heartbeat_ms = 50\nstate_dir = /x\0y\n", path: "c.conf")
        }
        #expect(throws: DaemonConfiguration.FileError(path: "c.conf", line: 1, reason: "control character U+1B in the line")) {
            try configuration.apply(fileContents: "runtime_dir = /r\u{1B}[2J\n", path: "c.conf")
        }
        #expect(throws: DaemonConfiguration.FileError(path: "c.conf", line: 1, reason: "'state_dir' needs a directory")) {
            try configuration.apply(fileContents: "state_dir =\n", path: "c.conf")
        }
        // A tab is white space, as before.
        try configuration.apply(fileContents: "heartbeat_ms\t=\t80\n", path: "c.conf")
        #expect(configuration.heartbeatIntervalMilliseconds == 80)
    }

    @Test func endpointsAreCheckedWhereTheyAreWritten() throws {
        var configuration = Self.base
        #expect(throws: DaemonConfiguration.FileError(path: "c.conf", line: 1, reason: "endpoint 'udp://127.0.0.1:5' is neither tcp:// nor ipc://")) {
            try configuration.apply(fileContents: "request_endpoint = ipc:///tmp/x, udp://127.0.0.1:5\n", path: "c.conf")
        }
        #expect(throws: SettingError("endpoint 'udp://x' is neither tcp:// nor ipc://")) {
            try configuration.apply(setting: "publish_endpoint", value: "udp://x")
        }
    }
}
