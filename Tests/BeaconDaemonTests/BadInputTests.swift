import BeaconDaemon
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct BadInputTests {
    @Test func everyBadRequestGetsItsErrorAndChangesNothing() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        _ = try client.put("ok", .int(1))

        // Not a protobuf at all.
        try client.send(rawBody: [0xFF, 0xFF, 0xFF, 0xFF, 0x0F])
        let malformed = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(malformed.error.code == .malformed)
        // A valid message with no operation (or one from a future protocol).
        try client.send(rawBody: [])
        let empty = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(empty.id == 0 && empty.error.code == .unknownRequest)
        try client.send(rawBody: [0x08, 0x07, 0xFA, 0x3E, 0x00])  // id 7, unknown field 999
        let unknown = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(unknown.id == 7 && unknown.error.code == .unknownRequest)

        // A put whose string value is not UTF-8 (hand-encoded: no Swift string can hold it).
        try client.send(rawBody: [0x08, 0x09, 0x6A, 0x0A, 0x0A, 0x02, 0x6F, 0x6B, 0x12, 0x04, 0x2A, 0x02, 0xC3, 0x28])
        let badUTF8 = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(badUTF8.error.code == .malformed)

        expectRejection(.invalidKey) { _ = try client.put("bad key", .int(1)) }
        expectRejection(.invalidKey) { _ = try client.put("", .int(1)) }
        expectRejection(.invalidKey) { _ = try client.get("x..y") }
        expectRejection(.invalidKey) { _ = try client.snapshot(prefix: "!h") }
        expectRejection(.invalidValue) { _ = try client.put("k", Beacon_V1_Value()) }
        var deep = Beacon_V1_Value.int(1)
        for _ in 0...WireLimits.maxValueDepth { deep = .with { $0.listValue.items = [deep] } }
        expectRejection(.invalidValue) { _ = try client.put("k", deep) }
        let big = Beacon_V1_Value.with { $0.bytesValue = Data(count: WireLimits.maxValueBytes + 1) }
        expectRejection(.valueTooLarge) { _ = try client.put("k", big) }
        expectRejection(.versionConflict) { _ = try client.put("ok", .int(2), ifVersion: 5) }
        // A TTL past the end of time is refused, not added to the clock (it trapped).
        let forever = expectRejection(.invalidArgument) { _ = try client.put("k", .int(1), ttlMilliseconds: .max) }
        #expect(forever?.message.contains("ttl_ms") == true)
        expectRejection(.tooManyOperations) {
            _ = try client.transaction((0...WireLimits.maxTxnOps).map { putOp("k\($0)", .int(1)) })
        }
        expectRejection(.invalidArgument) { _ = try client.transaction([]) }
        expectRejection(.invalidArgument) { _ = try client.put("k", .int(1), writeID: Array(repeating: 1, count: 65)) }
        expectRejection(.invalidKey) { _ = try client.transaction([putOp("fine", .int(1)), putOp("not fine", .int(1))]) }
        expectRejection(.futureRevision) { _ = try client.delta(prefix: "", since: 99) }
        expectRejection(.futureRevision) { _ = try client.snapshot(prefix: "", revision: 99) }
        expectRejection(.futureRevision) { _ = try client.call(.compact(.with { $0.revision = 99 })) }
        // A history range above the head is empty, not an error (PROTOCOL.md §4.5).
        let beyond = try client.history("", exact: false, from: 99, to: 0)
        #expect(beyond.events.isEmpty && !beyond.more)
        // Keys only: no value is set.
        let keysOnly = try client.call(.list(.with { $0.prefix = "ok"; $0.keysOnly = true }))
        #expect(keysOnly.list.kvs.map(\.key) == ["ok"] && !keysOnly.list.kvs[0].hasValue)

        // Batches: empty, too long, nested, or holding a bad request.
        expectRejection(.invalidArgument) { _ = try client.batch([]) }
        expectRejection(.tooManyOperations) {
            _ = try client.batch((0...WireLimits.maxBatchRequests).map { _ in .ping(.init()) })
        }
        let nested = try client.batch([.batch(.with { $0.requests = [.with { $0.id = 1; $0.ping = .init() }] })])
        #expect(nested.map(\.error.code) == [.invalidArgument])
        let putOK = WireEncoder.putRequest(id: 41, key: "ok", encodedValue: try Beacon_V1_Value.int(5).serializedBytes())
        try client.send(rawBody: WireEncoder.batchRequest(id: 40, requests: [[0xFF, 0xFF, 0xFF], [], putOK]))
        let mixed = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(mixed.id == 40)
        #expect(mixed.batch.replies.map(\.error.code) == [.malformed, .unknownRequest, .unspecified])
        #expect(mixed.batch.replies[2].write.versions == [2], "the good write of a batch applies")
        // A batch the fast path does not read (an unknown field) is decoded and handled the same.
        try client.send(rawBody: WireEncoder.batchRequest(id: 42, requests: [putOK]) + [0xFA, 0x3E, 0x00])
        let decoded = try #require(try client.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(decoded.id == 42 && decoded.batch.replies.map(\.write.versions) == [[3]])

        // Nothing changed, and the daemon still serves.
        let stats = try client.stats()
        #expect(stats.headRevision == 3)
        #expect(stats.keys == 1)
        #expect(try client.get("ok").value.intValue == 5)
        #expect(try client.list("").map(\.key) == ["ok"])
        #expect(try client.put("k", .int(1), ttlMilliseconds: WireLimits.maxTTLMilliseconds).versions == [1], "the longest TTL is taken")
        await daemon.stop()
    }

    @Test func anOversizedMessageDropsOnlyThatConnection() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let flooder = try daemon.client()
        try flooder.send(rawBody: [UInt8](repeating: 0x0A, count: WireLimits.maxRequestBytes + 1))
        let honest = try daemon.client()
        #expect(try honest.put("k", .int(1)).revision == 1)
        await daemon.stop()
    }

    @Test func theExampleConfigurationParsesAndStatesTheDefaults() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../deploy/beacond.conf").standardized.path
        let text = try String(contentsOfFile: path, encoding: .utf8)
        // Every setting, uncommented.
        let setting = /^# [a-z_]+ = \S+$/
        let enabled = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.wholeMatch(of: setting) != nil ? String(line.dropFirst(2)) : String(line)
        }.joined(separator: "\n")
        var configuration = DaemonConfiguration(runtimeDirectory: "/run/beacon", stateDirectory: "/var/lib/beacon")
        let defaults = configuration
        try configuration.apply(fileContents: enabled, path: path)
        #expect(configuration.extraRequestEndpoints == ["tcp://127.0.0.1:7401"])
        #expect(configuration.extraPublishEndpoints == ["tcp://127.0.0.1:7402"])
        var upstream = DaemonConfiguration.UpstreamSettings(
            requestEndpoint: "tcp://10.0.0.1:7401", publishEndpoint: "tcp://10.0.0.1:7402",
            serverKey: "/etc/beacon/upstream.pub", keyFile: "/etc/beacon/relay.key")
        upstream.prefixes = ["arm."]
        #expect(configuration.upstream == upstream)
        var etcd = DaemonConfiguration.EtcdSettings(endpoints: ["https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"])
        etcd.certificateFile = "/etc/beacon/etcd-client.crt"
        etcd.keyFile = "/etc/beacon/etcd-client.key"
        etcd.authorityFile = "/etc/beacon/etcd-ca.crt"
        #expect(configuration.etcd == etcd)
        #expect(configuration.metricsListen == .tcp(host: "127.0.0.1", port: 9477))
        configuration.metricsListen = nil
        configuration.extraRequestEndpoints = []
        configuration.extraPublishEndpoints = []
        configuration.upstream = nil
        configuration.etcd = nil
        #expect(configuration == defaults, "the example's values are the embedded defaults")
    }

    @Test func theExampleRelayConfigurationParses() throws {
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../deploy/relay.conf").standardized.path
        var configuration = DaemonConfiguration(runtimeDirectory: "/run/beacon", stateDirectory: "/var/lib/beacon")
        try configuration.apply(fileContents: try String(contentsOfFile: path, encoding: .utf8), path: path)
        #expect(configuration.upstream?.requestEndpoint == "tcp://10.0.0.1:7401")
        #expect(configuration.upstream?.resolvedPublishEndpoint == "tcp://10.0.0.1:7402")
        #expect(configuration.access.rules.count == 1)
    }

    @Test func anUpstreamsPublishEndpointFollowsFromItsRequestEndpoint() {
        typealias Upstream = DaemonConfiguration.UpstreamSettings
        #expect(Upstream(requestEndpoint: "tcp://10.0.0.1:7401").resolvedPublishEndpoint == "tcp://10.0.0.1:7402")
        #expect(Upstream(requestEndpoint: "tcp://[::1]:9000").resolvedPublishEndpoint == "tcp://[::1]:9001")
        #expect(Upstream(requestEndpoint: "ipc:///run/beacon/beacon.req").resolvedPublishEndpoint == "ipc:///run/beacon/beacon.pub")
        #expect(Upstream(requestEndpoint: "tcp://host").resolvedPublishEndpoint == nil)
        var configuration = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")
        configuration.upstream = Upstream(requestEndpoint: "tcp://10.0.0.1:7401", serverKey: "/nonexistent.pub")
        #expect(throws: PolicyError.self, "a server key without a key file") { try configuration.validate() }
        var fresh = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")
        #expect(throws: DaemonConfiguration.FileError(path: "b.conf", line: 1, reason: "'upstream_key_file' needs an 'upstream = ENDPOINT' line before it")) {
            try fresh.apply(fileContents: "upstream_key_file = /k\n", path: "b.conf")
        }
    }

    @Test func aRelaysPrefixesAreListedOnOneLineOrManyAndNestedOnesFold() throws {
        var configuration = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")
        try configuration.apply(fileContents: """
            upstream = tcp://10.0.0.1:7401
            upstream_prefix = cam. arm.
            upstream_prefix = arm.joint.,lidar.
            """, path: "b.conf")
        #expect(configuration.upstream?.prefixes == ["cam.", "arm.", "arm.joint.", "lidar."])
        #expect(configuration.upstream?.carriedPrefixes == ["arm.", "cam.", "lidar."])
        configuration.upstream?.prefixes.append("")
        #expect(configuration.upstream?.carriedPrefixes == [""], "the empty prefix is every key")
        configuration.upstream?.prefixes = ["ok.", "bad..key"]
        #expect(throws: PolicyError.self) { try configuration.validate() }
    }

    @Test func configurationFileErrorsNameTheLine() throws {
        var configuration = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")
        try configuration.apply(fileContents: "# comment\nheartbeat_ms = 250\ndurability = full  # fsync\nretention_revisions = 0\n", path: "b.conf")
        #expect(configuration.heartbeatIntervalMilliseconds == 250)
        #expect(configuration.durability == .full)
        #expect(configuration.retention.revisions == nil)
        #expect(throws: DaemonConfiguration.FileError(path: "b.conf", line: 2, reason: "unknown setting 'colour'")) {
            try configuration.apply(fileContents: "\ncolour = blue\n", path: "b.conf")
        }
        #expect(throws: DaemonConfiguration.FileError.self) { try configuration.apply(fileContents: "heartbeat_ms = soon", path: "b.conf") }
        #expect(throws: DaemonConfiguration.FileError.self) { try configuration.apply(fileContents: "durability = maybe", path: "b.conf") }
        #expect(configuration.heartbeatIntervalMilliseconds == 250)  // unchanged by the failures
    }

    @Test func loopCPUIsAutoOffOrACPUThisProcessMayRunOn() throws {
        var configuration = DaemonConfiguration(runtimeDirectory: "/r", stateDirectory: "/s")
        #expect(configuration.loopCPU == .auto)
        try configuration.apply(fileContents: "loop_cpu = off\n", path: "b.conf")
        #expect(configuration.loopCPU == .off)
        try configuration.apply(fileContents: "loop_cpu = 0\n", path: "b.conf")
        #expect(configuration.loopCPU == .cpu(0))
        // The first CPU this process may run on (/proc/self/status: "Cpus_allowed_list:\t0-1").
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let list = try #require(status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }?.split(separator: "\t").last)
        let first = try #require(Int(list.prefix { $0.isNumber }))
        configuration.loopCPU = .cpu(first)
        try configuration.validate()
        for bad in ["fast", "-1", "1.5", "99999"] {
            #expect(throws: DaemonConfiguration.FileError(path: "b.conf", line: 1, reason: "'loop_cpu' is auto, off or a CPU number, not '\(bad)'")) {
                try configuration.apply(fileContents: "loop_cpu = \(bad)\n", path: "b.conf")
            }
        }
        configuration.loopCPU = .cpu(1023)
        let error = try #require(throws: PolicyError.self) { try configuration.validate() }
        #expect(error.description.hasPrefix("loop_cpu = 1023 is not a CPU this process may run on ("), "\(error)")
    }
}

extension WireClient {
    func list(_ prefix: String) throws(WireError) -> [Beacon_V1_KeyValue] {
        let reply = try call(.list(.with { $0.prefix = prefix }))
        guard case .list(let list) = reply.result else { return [] }
        return list.kvs
    }
}
