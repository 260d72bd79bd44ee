#if Etcd
import BeaconEtcd
#endif
import BeaconJournal
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// Everything `beacond` can be told; every field has an embedded default that works with no
/// configuration at all.
public struct DaemonConfiguration: Sendable, Equatable {
    /// Directory for the ipc sockets and the instance lock.
    public var runtimeDirectory: String
    /// Directory for the journal.
    public var stateDirectory: String
    /// Extra endpoints (such as `tcp://127.0.0.1:7401`) for the request socket, besides ipc.
    public var extraRequestEndpoints: [String] = []
    /// Extra endpoints for the publish socket, besides ipc.
    public var extraPublishEndpoints: [String] = []
    /// How often heartbeats go out; a subscriber detects a drop within one interval.
    public var heartbeatIntervalMilliseconds: UInt32 = 1000
    /// How long a session lives without a `KeepAlive` when a put creates it, and how long
    /// sessions found in the journal at start-up wait for their writers to renew them.
    public var sessionTTLMilliseconds: UInt64 = 10_000
    /// How commits are synced.
    public var durability: Durability = .normal
    /// How much history to keep.
    public var retention = RetentionPolicy()
    /// How often retention is applied, in seconds.
    public var compactionIntervalSeconds: UInt64 = 60
    /// ``compactionIntervalSeconds`` in milliseconds (saturating: never a trap, whatever was set).
    var compactionIntervalMilliseconds: UInt64 {
        let (product, overflow) = compactionIntervalSeconds.multipliedReportingOverflow(by: 1000)
        return overflow ? .max : product
    }
    /// Most requests read and committed as one group.
    public var maxBatch = 4096
    /// Publish socket high-water mark per subscriber (messages).
    public var publishHighWaterMark: Int32 = 100_000
    /// File mode of the ipc socket files.
    public var socketMode: UInt16 = 0o660
    /// How long a snapshot or delta request keeps its prefix sequenced without a subscription.
    public var prefixLeaseMilliseconds: UInt64 = 60_000
    /// Who may connect, read and write (`allow` lines); empty: everyone who can open the sockets.
    public var access = AccessPolicy()
    /// Limits per peer and on the journal.
    public var limits = DaemonLimits()
    /// A file holding the daemon's CURVE secret key (`beacon keygen`); tcp endpoints then use CURVE.
    public var curveSecretKeyFile: String?
    /// Lets tcp endpoints run without CURVE: no encryption, no authentication.
    public var tcpInsecure = false
    /// The CPU the loop thread and libzmq's I/O thread share (`loop_cpu`).
    public var loopCPU: LoopCPU = .auto
    /// Where the metrics endpoint listens (`metrics_listen`); `nil`: no endpoint.
    public var metricsListen: MetricsListen?

    /// The daemon's CURVE key pair, read from ``curveSecretKeyFile`` by ``validate()``.
    public var curveKeys: ZMQCurveKeyPair?
    /// The daemon this one relays (`upstream`): set, this daemon mirrors it and forwards writes.
    public var upstream: UpstreamSettings?

    /// How a relay reaches its upstream (`upstream`, `upstream_publish`, `upstream_server_key`,
    /// `upstream_key_file`).
    public struct UpstreamSettings: Sendable, Equatable {
        /// The upstream's request endpoint (`tcp://host:port` or `ipc://path`).
        public var requestEndpoint: String
        /// The upstream's publish endpoint; by default the next tcp port, or `beacon.pub` beside an ipc `beacon.req`.
        public var publishEndpoint: String?
        /// The upstream's CURVE public key, or a file holding it.
        public var serverKey: String?
        /// This relay's CURVE key file (`beacon keygen`); the upstream's rules name its public key.
        public var keyFile: String?
        /// The prefixes this relay carries (`upstream_prefix`, one or more); none: every key.
        public var prefixes: [String] = []
        /// The prefixes this relay carries, sorted, without any that lies under another:
        /// `[""]` for every key.
        public var carriedPrefixes: [String] {
            var carried: [String] = []
            for prefix in Set(prefixes).sorted() where !carried.contains(where: { prefix.isUnder($0) }) {
                carried.append(prefix)  // sorted: a prefix comes before those under it
            }
            return carried.isEmpty ? [""] : carried
        }
        /// The CURVE credentials read by ``DaemonConfiguration/validate()``.
        public var curve: CurveCredentials?

        /// A relay of the daemon at `requestEndpoint`.
        public init(requestEndpoint: String, publishEndpoint: String? = nil, serverKey: String? = nil, keyFile: String? = nil) {
            self.requestEndpoint = requestEndpoint
            self.publishEndpoint = publishEndpoint
            self.serverKey = serverKey
            self.keyFile = keyFile
        }

        /// The publish endpoint to connect to.
        public var resolvedPublishEndpoint: String? {
            publishEndpoint ?? WireEndpoint.publish(impliedBy: requestEndpoint)
        }

        mutating func validate() throws(PolicyError) {
            guard requestEndpoint.hasPrefix("tcp://") || requestEndpoint.hasPrefix("ipc://") else {
                throw PolicyError("upstream '\(requestEndpoint)' is neither tcp:// nor ipc://")
            }
            guard resolvedPublishEndpoint != nil else {
                throw PolicyError("upstream_publish is needed: no publish endpoint follows from '\(requestEndpoint)'")
            }
            for prefix in prefixes {
                if let problem = KeyPath.problem(prefix: prefix) { throw PolicyError("upstream_prefix '\(prefix)': \(problem)") }
            }
            curve = nil
            guard serverKey != nil || keyFile != nil else { return }
            guard let server = serverKey, let file = keyFile else {
                throw PolicyError("CURVE to the upstream needs both upstream_server_key and upstream_key_file")
            }
            do {
                curve = try CurveCredentials.load(serverKey: server, keyFile: file, serverKeySetting: "upstream_server_key",
                                                  keyFileSetting: "upstream_key_file")
            } catch {
                throw PolicyError(error.description)
            }
        }
    }

    /// The etcd cluster this daemon fronts (`etcd_endpoints`): set, etcd decides every write and
    /// the journal is a copy of what it holds under ``EtcdSettings/prefix``.
    public var etcd: EtcdSettings?

    /// How an etcd front reaches its cluster (`etcd_endpoints`, `etcd_prefix`, `etcd_cert`,
    /// `etcd_key`, `etcd_ca`).
    public struct EtcdSettings: Sendable, Equatable {
        /// The members' client URLs: `http://HOST:PORT`, `https://HOST:PORT`, `unix://PATH` or `unixs://PATH`.
        public var endpoints: [String]
        /// The part of etcd's key space the fronts own (`etcd_prefix`, default `beacon/`).
        public var prefix = "beacon/"
        /// A client certificate for a cluster that asks for one (PEM).
        public var certificateFile: String?
        /// Its private key (PEM).
        public var keyFile: String?
        /// The authority that signed the members' certificates (PEM); none: the system's.
        public var authorityFile: String?

        public init(endpoints: [String]) {
            self.endpoints = endpoints
        }

        func validate() throws(PolicyError) {
            guard !prefix.isEmpty, !prefix.contains("\0") else { throw PolicyError("etcd_prefix must be a non-empty string") }
            guard (certificateFile == nil) == (keyFile == nil) else { throw PolicyError("etcd_cert and etcd_key go together") }
            for file in [certificateFile, keyFile, authorityFile].compactMap({ $0 }) where !FileManager.default.isReadableFile(atPath: file) {
                throw PolicyError("etcd TLS file '\(file)' cannot be read")
            }
            #if Etcd
            do {
                _ = try EtcdEndpoint.list(parsing: endpoints.joined(separator: ","))
            } catch {
                throw PolicyError("etcd_endpoints: \(error.message)")
            }
            #else
            throw PolicyError(Self.notBuilt)
            #endif
        }

        /// What a build without etcd fronts says when asked to be one.
        static let notBuilt = "etcd_endpoints: this beacond was built without etcd fronts; build it with `make ETCD=1` "
            + "(swift build --traits Etcd)"
    }

    /// Every tcp endpoint this configuration binds.
    public var tcpEndpoints: [String] {
        (extraRequestEndpoints + extraPublishEndpoints).filter { $0.hasPrefix("tcp://") }
    }

    /// Checks what depends on several settings or on files, and reads the CURVE key:
    /// tcp endpoints need a CURVE key or `tcp_insecure = true`; `key:` rules need CURVE.
    /// - Throws: a reason for a person; the daemon refuses to start (or a reload) with it.
    public mutating func validate() throws(PolicyError) {
        if let path = curveSecretKeyFile {
            guard ZMQCurveKeyPair.isSupported else {
                throw PolicyError("curve_secret_key_file is set but this libzmq has no CURVE support")
            }
            let file: CurveKeyFile
            do {
                file = try CurveKeyFile(path: path)
            } catch {
                throw PolicyError("curve_secret_key_file \(path): \(error)")
            }
            guard let secret = file.secretKey, let keys = try? ZMQCurveKeyPair(secretKey: secret) else {
                throw PolicyError("curve_secret_key_file \(path) holds no valid secret key (make one with `beacon keygen`)")
            }
            curveKeys = keys
        } else {
            curveKeys = nil
        }
        if let endpoint = tcpEndpoints.first, curveKeys == nil, !tcpInsecure {
            throw PolicyError("\(endpoint) needs curve_secret_key_file (CURVE), or tcp_insecure = true to run tcp without authentication")
        }
        if curveKeys == nil, let rule = access.rules.first(where: { if case .key = $0.subject { true } else { false } }) {
            throw PolicyError("the rule for \(rule.subject) needs curve_secret_key_file: CURVE keys are only checked on CURVE endpoints")
        }
        if case .cpu(let cpu) = loopCPU, let problem = Self.loopCPUProblem(cpu) { throw PolicyError(problem) }
        if let problem = (extraRequestEndpoints + extraPublishEndpoints).lazy.compactMap(Self.endpointProblem).first {
            throw PolicyError(problem)
        }
        try upstream?.validate()
        if etcd != nil && upstream != nil {
            throw PolicyError("a daemon is either a relay (upstream) or an etcd front (etcd_endpoints), not both")
        }
        try etcd?.validate()
    }

    /// The journal file.
    public var journalPath: String { stateDirectory + "/journal.sqlite" }
    /// The request socket's ipc endpoint.
    public var requestEndpoint: String { WireEndpoint.request(inRuntimeDirectory: runtimeDirectory) }
    /// The publish socket's ipc endpoint.
    public var publishEndpoint: String { WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory) }

    /// A configuration with the given directories and defaults for the rest.
    public init(runtimeDirectory: String, stateDirectory: String) {
        self.runtimeDirectory = runtimeDirectory
        self.stateDirectory = stateDirectory
    }

    /// The default runtime directory: `$BEACON_RUNTIME_DIR`, systemd's `$RUNTIME_DIRECTORY`,
    /// `$XDG_RUNTIME_DIR/beacon`, or `/tmp/beacon-UID`, in that order.
    public static func defaultRuntimeDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let dir = environment["BEACON_RUNTIME_DIR"], !dir.isEmpty { return dir }
        if let dir = environment["RUNTIME_DIRECTORY"], !dir.isEmpty { return firstPath(dir) }
        return WireEndpoint.userRuntimeDirectory(environment: environment, uid: getuid())
    }

    /// The default state directory: `$BEACON_STATE_DIR`, systemd's `$STATE_DIRECTORY`,
    /// `$XDG_STATE_HOME/beacon`, or `~/.local/state/beacon`, in that order.
    public static func defaultStateDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let dir = environment["BEACON_STATE_DIR"], !dir.isEmpty { return dir }
        if let dir = environment["STATE_DIRECTORY"], !dir.isEmpty { return firstPath(dir) }
        if let dir = environment["XDG_STATE_HOME"], !dir.isEmpty { return dir + "/beacon" }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/beacon"
    }

    /// systemd passes several directories separated by ':'; Beacon uses the first.
    private static func firstPath(_ list: String) -> String {
        String(list.split(separator: ":").first ?? Substring(list))
    }

    /// A problem in a configuration file, with its line.
    public struct FileError: Error, Equatable, CustomStringConvertible {
        public var path: String
        public var line: Int
        public var reason: String
        /// Creates an error for `line` of `path`.
        public init(path: String, line: Int, reason: String) {
            self.path = path
            self.line = line
            self.reason = reason
        }
        public var description: String { "\(path):\(line): \(reason)" }
    }

    /// Applies the settings of a configuration file (`name = value` lines, `#` comments;
    /// see deploy/beacond.conf) on top of this configuration. Lines end in LF, CRLF or CR; a
    /// leading byte-order mark is ignored.
    /// - Throws: ``FileError`` naming the first bad line; the configuration is then unchanged.
    public mutating func apply(fileContents: String, path: String) throws(FileError) {
        var copy = self
        let text = fileContents.hasPrefix("\u{FEFF}") ? fileContents.dropFirst() : Substring(fileContents)
        let lines = text.split(omittingEmptySubsequences: false) { $0 == "\n" || $0 == "\r\n" || $0 == "\r" }
        for (index, rawLine) in lines.enumerated() {
            let fail = { (reason: String) in FileError(path: path, line: index + 1, reason: reason) }
            if let control = rawLine.unicodeScalars.first(where: { $0.properties.generalCategory == .control && $0 != "\t" }) {
                throw fail("control character U+\(String(control.value, radix: 16, uppercase: true)) in the line")
            }
            let trimmed = ConfigurationLine.strippingComment(String(rawLine))
            if trimmed.isEmpty { continue }
            guard let equals = trimmed.firstIndex(of: "=") else { throw fail("expected 'name = value'") }
            var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") { value = String(value.dropFirst().dropLast()) }
            do {
                try copy.apply(setting: trimmed[..<equals].trimmingCharacters(in: .whitespaces), value: value)
            } catch {
                throw fail(error.reason)
            }
        }
        self = copy
    }

    /// Applies one setting, as a configuration file's `name = value` line or a flag gives it:
    /// the same checks whichever it comes from.
    /// - Throws: ``SettingError`` saying why; the configuration is then unchanged.
    public mutating func apply(setting name: String, value: String) throws(SettingError) {
        var copy = self
        let setting = Setting(name: name, value: value)
        if let numeric = Self.numericSetting(named: name) {
            try numeric.apply(value, to: &copy)
        } else if try !copy.applyUpstream(setting), try !copy.applyEtcd(setting) {
            try copy.apply(setting)
        }
        self = copy
    }

    /// One `name = value` setting.
    private struct Setting {
        var name: String
        var value: String

        func fail(_ reason: String) -> SettingError { SettingError(reason) }
    }

    /// Why `endpoint` cannot be bound, if it cannot: it is neither `tcp://` nor `ipc://`.
    /// - Parameter endpoint: a request or publish endpoint.
    /// - Returns: the reason, for a person; `nil` for an endpoint of a kind the daemon binds.
    public static func endpointProblem(_ endpoint: String) -> String? {
        endpoint.hasPrefix("tcp://") || endpoint.hasPrefix("ipc://") ? nil : "endpoint '\(endpoint)' is neither tcp:// nor ipc://"
    }

    /// Applies a setting of the daemon itself: directories, endpoints, journal, access.
    private mutating func apply(_ setting: Setting) throws(SettingError) {
        let value = setting.value
        switch setting.name {
        case "runtime_dir", "state_dir":
            guard !value.isEmpty else { throw setting.fail("'\(setting.name)' needs a directory") }
            if setting.name == "runtime_dir" { runtimeDirectory = value } else { stateDirectory = value }
        case "request_endpoint", "publish_endpoint":
            let endpoints = value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            if let problem = endpoints.lazy.compactMap(Self.endpointProblem).first { throw setting.fail(problem) }
            if setting.name == "request_endpoint" { extraRequestEndpoints = endpoints } else { extraPublishEndpoints = endpoints }
        case "durability":
            guard let durability = Durability(rawValue: value) else { throw setting.fail("'durability' is 'normal' or 'full', not '\(value)'") }
            self.durability = durability
        case "allow":
            do {
                access.rules.append(try AccessPolicy.parseRule(value))
            } catch {
                throw setting.fail(error.description)
            }
        case "curve_secret_key_file": curveSecretKeyFile = value.isEmpty ? nil : value
        case "metrics_listen": metricsListen = value.isEmpty ? nil : try MetricsListen(parsing: value)
        case "tcp_insecure":
            guard let flag = Bool(value) else { throw setting.fail("'tcp_insecure' is true or false, not '\(value)'") }
            tcpInsecure = flag
        case "loop_cpu":
            guard let placement = LoopCPU(value) else { throw setting.fail("'loop_cpu' is auto, off or a CPU number, not '\(value)'") }
            if case .cpu(let cpu) = placement, let problem = Self.loopCPUProblem(cpu) { throw setting.fail(problem) }
            loopCPU = placement
        case "socket_mode":
            guard let mode = UInt16(value, radix: 8), mode <= 0o777 else {
                throw setting.fail("'socket_mode' is an octal mode from 0 to 0777 such as 0660, not '\(value)'")
            }
            socketMode = mode
        default:
            throw setting.fail("unknown setting '\(setting.name)'")
        }
    }

    /// Why the loop cannot run on `cpu`, if it cannot: it is not one this process may run on.
    static func loopCPUProblem(_ cpu: Int) -> String? {
        guard let allowed = try? ThreadPlacement.current().cpus else {
            return "loop_cpu = \(cpu): the CPUs this process may run on cannot be read"
        }
        guard allowed.contains(cpu) else {
            return "loop_cpu = \(cpu) is not a CPU this process may run on (\(allowed.map(String.init).joined(separator: ", ")))"
        }
        return nil
    }

    /// Applies an etcd front's setting (`etcd_endpoints` and what follows it); false if `setting` is not one.
    private mutating func applyEtcd(_ setting: Setting) throws(SettingError) -> Bool {
        let value = setting.value
        switch setting.name {
        case "etcd_endpoints":
            let endpoints = value.split { $0 == " " || $0 == "," }.map(String.init)
            if endpoints.isEmpty {
                etcd = nil
            } else {
                etcd = etcd ?? EtcdSettings(endpoints: endpoints)
                etcd!.endpoints = endpoints
            }
        case "etcd_prefix", "etcd_cert", "etcd_key", "etcd_ca":
            guard etcd != nil else { throw setting.fail("'\(setting.name)' needs an 'etcd_endpoints = URL,...' line before it") }
            let given: String? = value.isEmpty ? nil : value
            switch setting.name {
            case "etcd_prefix": etcd!.prefix = value.isEmpty ? "beacon/" : value
            case "etcd_cert": etcd!.certificateFile = given
            case "etcd_key": etcd!.keyFile = given
            default: etcd!.authorityFile = given
            }
        default:
            return false
        }
        return true
    }

    /// Applies a relay's setting (`upstream` and what follows it); false if `setting` is not one.
    private mutating func applyUpstream(_ setting: Setting) throws(SettingError) -> Bool {
        let value = setting.value
        switch setting.name {
        case "upstream":
            if value.isEmpty {
                upstream = nil
            } else {
                upstream = upstream ?? UpstreamSettings(requestEndpoint: value)
                upstream!.requestEndpoint = value
            }
        case "upstream_publish", "upstream_server_key", "upstream_key_file", "upstream_prefix":
            guard upstream != nil else { throw setting.fail("'\(setting.name)' needs an 'upstream = ENDPOINT' line before it") }
            let given: String? = value.isEmpty ? nil : value
            switch setting.name {
            case "upstream_publish": upstream!.publishEndpoint = given
            case "upstream_server_key": upstream!.serverKey = given
            case "upstream_prefix":
                // One or more, separated by spaces or commas; each line adds to the list.
                upstream!.prefixes += value.split { $0 == " " || $0 == "," }.map(String.init)
            default: upstream!.keyFile = given
            }
        default:
            return false
        }
        return true
    }
}

/// Where the daemon's loop thread and libzmq's I/O thread run. They hand each other every
/// request, reply and diff; on one CPU, scheduled as batch work, they do so without waking
/// another CPU each time, and libzmq sends what the loop queued in a few large writes.
public enum LoopCPU: Sendable, Equatable, CustomStringConvertible {
    /// The highest-numbered CPU the daemon may run on, chosen at start.
    case auto
    /// Wherever the kernel schedules them.
    case off
    /// This CPU; it must be one the daemon may run on.
    case cpu(Int)

    /// Parses `auto`, `off` or a CPU number.
    public init?(_ text: String) {
        switch text {
        case "auto": self = .auto
        case "off": self = .off
        default:
            guard let cpu = Int(text), ThreadPlacement.isRepresentable(cpu: cpu) else { return nil }
            self = .cpu(cpu)
        }
    }

    public var description: String {
        switch self {
        case .auto: "auto"
        case .off: "off"
        case .cpu(let cpu): "\(cpu)"
        }
    }
}
