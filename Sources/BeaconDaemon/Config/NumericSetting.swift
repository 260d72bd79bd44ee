import BeaconProtocol

/// A whole-number setting of `beacond`: its name, the values it takes and where it lands in a
/// ``DaemonConfiguration``. One table (``DaemonConfiguration/numericSettings``) serves the
/// configuration file, the command line's flags and a reload alike, so that each refuses exactly
/// what the others refuse, and no accepted value can make the daemon's arithmetic trap.
public struct NumericSetting: Sendable {
    /// The name in a configuration file, such as `heartbeat_ms`.
    public let name: String
    /// The values it takes; anything else is refused with a reason naming them.
    public let range: ClosedRange<UInt64>
    /// What 0 means where it is in ``range`` and is not just the smallest amount (`"no limit"`).
    public let zeroMeans: String?
    /// The unit, for messages (`"ms"`, `"bytes"`, …); empty for a count.
    public let unit: String
    fileprivate let store: @Sendable (inout DaemonConfiguration, UInt64) -> Void

    fileprivate init(_ name: String, _ range: ClosedRange<UInt64>, unit: String = "", zeroMeans: String? = nil,
                     _ store: @escaping @Sendable (inout DaemonConfiguration, UInt64) -> Void) {
        self.name = name
        self.range = range
        self.unit = unit
        self.zeroMeans = zeroMeans
        self.store = store
    }

    /// Parses `text` as this setting's value and stores it in `configuration`.
    /// - Throws: ``SettingError`` saying which values the setting takes.
    func apply(_ text: String, to configuration: inout DaemonConfiguration) throws(SettingError) {
        guard let value = UInt64(text), range.contains(value) else {
            throw SettingError("'\(name)' is a whole number from \(range.lowerBound) to \(range.upperBound)"
                + (unit.isEmpty ? "" : " (\(unit))") + (zeroMeans.map { "; 0: \($0)" } ?? "") + ", not '\(text)'")
        }
        store(&configuration, value)
    }
}

/// Why one setting (a line of a configuration file, or a flag) was refused.
public struct SettingError: Error, Equatable, CustomStringConvertible {
    /// What is wrong, for a person.
    public var reason: String
    /// An error saying `reason`.
    public init(_ reason: String) { self.reason = reason }
    public var description: String { reason }
}

extension DaemonConfiguration {
    /// 100 years in seconds, the longest a key may live (PROTOCOL.md §8) and the most history kept by age.
    static let centurySeconds: UInt64 = 3_155_760_000
    /// 1 TiB: the most any byte bound may be set to.
    static let largestByteBound: UInt64 = 1 << 40

    /// Every whole-number setting, with its range. `deploy/beacond.conf` and `docs/DAEMON.md`
    /// list the same ranges.
    public static let numericSettings: [NumericSetting] = [
        NumericSetting("heartbeat_ms", 10...3_600_000, unit: "ms") { $0.heartbeatIntervalMilliseconds = UInt32($1) },
        NumericSetting("session_ttl_ms", 100...3_600_000, unit: "ms") { $0.sessionTTLMilliseconds = $1 },
        NumericSetting("retention_revisions", 0...1_000_000_000_000, zeroMeans: "no count limit") {
            $0.retention.revisions = $1 == 0 ? nil : $1
        },
        NumericSetting("retention_age_s", 0...centurySeconds, unit: "s", zeroMeans: "no age limit") {
            $0.retention.maxAgeMilliseconds = $1 == 0 ? nil : $1 * 1000
        },
        NumericSetting("compaction_interval_s", 1...2_592_000, unit: "s") { $0.compactionIntervalSeconds = $1 },
        NumericSetting("max_batch", 1...65_536) { $0.maxBatch = Int($1) },
        NumericSetting("publish_hwm", 0...10_000_000, unit: "messages", zeroMeans: "no limit") { $0.publishHighWaterMark = Int32($1) },
        NumericSetting("max_value_bytes", 0...UInt64(WireLimits.maxValueBytes), unit: "bytes", zeroMeans: "the protocol's limit") {
            $0.limits.maxValueBytes = $1 == 0 ? WireLimits.maxValueBytes : Int($1)
        },
        NumericSetting("writes_per_second", 0...10_000_000, zeroMeans: "no limit") { $0.limits.writesPerSecond = UInt32($1) },
        NumericSetting("write_burst", 0...10_000_000, zeroMeans: "writes_per_second") { $0.limits.writeBurst = UInt32($1) },
        NumericSetting("keys_per_peer", 0...UInt64(UInt32.max), zeroMeans: "no limit") { $0.limits.keysPerPeer = UInt32($1) },
        NumericSetting("pending_requests", 1...1_000_000) { $0.limits.pendingRequests = Int32($1) },
        NumericSetting("subscriptions_per_peer", 0...10_000_000, zeroMeans: "no limit") { $0.limits.subscriptionsPerPeer = UInt32($1) },
        NumericSetting("sessions_per_peer", 0...10_000_000, zeroMeans: "no limit") { $0.limits.sessionsPerPeer = UInt32($1) },
        NumericSetting("leases_per_peer", 0...10_000_000, zeroMeans: "no limit") { $0.limits.leasesPerPeer = UInt32($1) },
        NumericSetting("connections_per_peer", 0...1_000_000, zeroMeans: "no limit") { $0.limits.connectionsPerPeer = UInt32($1) },
        NumericSetting("max_journal_bytes", 0...(1 << 60), unit: "bytes", zeroMeans: "no limit") { $0.limits.maxJournalBytes = $1 },
        NumericSetting("reply_buffer_bytes", (1 << 20)...largestByteBound, unit: "bytes") { $0.limits.replyBufferBytes = Int($1) },
        NumericSetting("reply_buffer_peer_bytes", (1 << 20)...largestByteBound, unit: "bytes") { $0.limits.replyBufferPeerBytes = Int($1) },
        NumericSetting("reply_buffer_total_bytes", (1 << 20)...largestByteBound, unit: "bytes") { $0.limits.replyBufferTotalBytes = Int($1) },
        NumericSetting("publish_buffer_bytes", (1 << 20)...largestByteBound, unit: "bytes") { $0.limits.publishBufferBytes = Int($1) },
    ]

    /// The row of ``numericSettings`` named `name`.
    static func numericSetting(named name: String) -> NumericSetting? {
        numericSettings.first { $0.name == name }
    }
}
