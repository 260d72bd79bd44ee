import ArgumentParser
import BeaconDaemon
import BeaconJournal
import Foundation
import Logging
import ServiceLifecycle

@main
struct Beacond: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "beacond",
        abstract: "The Beacon daemon: owns signals, journals every change, publishes versioned diffs.",
        discussion: """
            With no options it runs on embedded defaults: sockets in $BEACON_RUNTIME_DIR, systemd's \
            $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR/beacon or /tmp/beacon-UID; the journal in \
            $BEACON_STATE_DIR, $STATE_DIRECTORY, $XDG_STATE_HOME/beacon or ~/.local/state/beacon.
            Flags override the configuration file, which overrides the defaults.

            Exit codes: 0 stopped cleanly; 64 usage error; 69 another beacond holds the runtime \
            directory or journal; 70 start-up failed (directories, sockets); 74 the journal cannot \
            be opened (corrupt, unwritable, too new); 78 invalid configuration file.
            """,
        version: BeaconVersion.string)

    @Option(name: .long, help: ArgumentHelp("Directory for the ipc sockets and the instance lock.", valueName: "dir"))
    var runtimeDir: String?

    @Option(name: .long, help: ArgumentHelp("Directory for the journal.", valueName: "dir"))
    var stateDir: String?

    @Option(name: .long, help: ArgumentHelp("Configuration file (name = value lines); see deploy/beacond.conf.", valueName: "file"))
    var config: String?

    @Option(name: .long, help: ArgumentHelp("Also bind the request socket here, e.g. tcp://127.0.0.1:7401 (repeatable).", valueName: "endpoint"))
    var requestEndpoint: [String] = []

    @Option(name: .long, help: ArgumentHelp("Also bind the publish socket here, e.g. tcp://127.0.0.1:7402 (repeatable).", valueName: "endpoint"))
    var publishEndpoint: [String] = []

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Heartbeat interval in milliseconds (gap detection bound), 10 to 3600000.", valueName: "ms"))
    var heartbeatMs: String?

    @Option(name: .long, help: ArgumentHelp("Commit durability: normal (survives kill -9) or full (survives power loss).", valueName: "mode"))
    var durability: String?

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Keep this many revisions of history (0: no count limit).", valueName: "n"))
    var retentionRevisions: String?

    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Most requests read and committed as one group, 1 to 65536.", valueName: "n"))
    var maxBatch: String?

    @Option(name: .long, help: ArgumentHelp("The CPU the loop and libzmq's I/O thread share: auto, off or a CPU number.", valueName: "cpu"))
    var loopCpu: String?

    @Option(name: .long, help: ArgumentHelp("Serve metrics for Prometheus here: 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:PATH (port 0: the kernel chooses).", valueName: "address"))
    var metricsListen: String?

    @Flag(name: .long, help: "Allow tcp endpoints without CURVE: no encryption, no authentication (logged as a warning).")
    var tcpInsecure = false

    @Option(name: .long, help: ArgumentHelp("Run as a relay of the daemon at this request endpoint, e.g. tcp://10.0.0.1:7401: mirror it, serve its clients here, forward writes.", valueName: "endpoint"))
    var upstream: String?

    @Option(name: .long, help: ArgumentHelp("The upstream's publish endpoint (default: the next tcp port, or beacon.pub beside an ipc beacon.req).", valueName: "endpoint"))
    var upstreamPublish: String?

    @Option(name: .long, help: ArgumentHelp("The upstream's CURVE public key, or a file holding it.", valueName: "key|file"))
    var upstreamServerKey: String?

    @Option(name: .long, help: ArgumentHelp("This relay's CURVE key file (beacon keygen); the upstream's rules name its public key.", valueName: "file"))
    var upstreamKeyFile: String?

    @Option(name: .long, help: ArgumentHelp("Carry only the keys under this prefix; repeat for several (default: every key).", valueName: "prefix"))
    var upstreamPrefix: [String] = []

    @Option(name: .long, help: ArgumentHelp("Run as a front of the etcd cluster with these client URLs (http://HOST:PORT, https://HOST:PORT, unix://PATH or unixs://PATH, comma-separated): etcd decides every write.", valueName: "urls"))
    var etcdEndpoints: String?

    @Option(name: .long, help: ArgumentHelp("The part of etcd's key space the fronts own (default: beacon/).", valueName: "prefix"))
    var etcdPrefix: String?

    @Option(name: .long, help: ArgumentHelp("A client certificate for a secured etcd cluster (PEM).", valueName: "file"))
    var etcdCert: String?

    @Option(name: .long, help: ArgumentHelp("The etcd client certificate's private key (PEM).", valueName: "file"))
    var etcdKey: String?

    @Option(name: .long, help: ArgumentHelp("The authority that signed the etcd members' certificates (PEM).", valueName: "file"))
    var etcdCa: String?

    @Flag(name: .long, help: "Check the configuration (file, flags, access rules, CURVE key) and exit: 0 valid, 78 invalid.")
    var checkConfig = false

    @Option(name: .long, help: ArgumentHelp("Log level: trace, debug, info, notice, warning, error, critical.", valueName: "level"))
    var logLevel: String = "info"

    func run() async throws {
        Journal.disableSQLiteMemoryStatistics()  // before any SQLite use
        guard let level = Logger.Level(rawValue: logLevel) else {
            Self.fail("beacond: --log-level: unknown level '\(logLevel)' (trace, debug, info, notice, warning, error, critical)", code: 64)
        }
        // Under systemd, stderr is the journal: lines carry their priority and no timestamp.
        let toJournal = JournalLogHandler.standardErrorIsJournal(environment: ProcessInfo.processInfo.environment)
        LoggingSystem.bootstrap { label in
            if toJournal {
                var handler = JournalLogHandler()
                handler.logLevel = level
                return handler
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "beacond")

        let configuration: DaemonConfiguration
        do {
            configuration = try loadConfiguration()
        } catch let error as FlagError {
            Self.fail("beacond: \(error)", code: 64)
        } catch let error as ConfigurationUnreadable {
            Self.fail("beacond: \(error)", code: 78)
        } catch {
            Self.fail("beacond: invalid configuration: \(error)", code: 78)
        }
        if checkConfig {
            print(Self.summary(of: configuration))
            return
        }
        if configuration.tcpInsecure, !configuration.tcpEndpoints.isEmpty {
            logger.warning("tcp endpoints run WITHOUT CURVE: anyone who reaches them can connect, and traffic is not encrypted",
                           metadata: ["endpoints": "\(configuration.tcpEndpoints.joined(separator: ","))"])
        }

        // Trapped before the server answers anyone: an early SIGHUP is then a queued reload,
        // not the end of the process.
        let reloadSignals = await ReloadSignals()
        let stopSignals = await StopSignals()
        let server: BeaconServer
        let notifier = SystemdNotifier()
        do {
            server = try BeaconServer(configuration: configuration, logger: logger)
            server.notifier = notifier
            try server.start()
        } catch {
            let code: Int32 = switch error.code {
            case .alreadyRunning: 69
            case .journal: 74
            default: 70
            }
            Self.fail("beacond: \(error.message)", code: code)
        }
        let group = ServiceGroup(configuration: .init(
            // The service also ends by itself on a stop signal trapped before the group ran: that
            // is a clean end, not a failure.
            services: [.init(service: BeaconDaemonService(server: server, notifier: notifier, logger: logger,
                                                          reloadSignals: reloadSignals, stopSignals: stopSignals) {
                try self.loadConfiguration()
            }, successTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        try await group.run()
    }

    /// The embedded defaults, then the configuration file, then the flags. Called at start and
    /// on SIGHUP (reload).
    /// - Throws: ``FlagError`` for bad flags; `DaemonConfiguration.FileError`, a read error or
    ///   `PolicyError` for the file.
    func loadConfiguration() throws -> DaemonConfiguration {
        var configuration = DaemonConfiguration(
            runtimeDirectory: DaemonConfiguration.defaultRuntimeDirectory(),
            stateDirectory: DaemonConfiguration.defaultStateDirectory())
        if let config {
            let text: String
            do {
                text = try String(contentsOfFile: config, encoding: .utf8)
            } catch {
                throw ConfigurationUnreadable(message: "cannot read configuration \(config): \(error.localizedDescription)")
            }
            try configuration.apply(fileContents: text, path: config)
        }
        let fromFile = configuration
        /// Applies a flag through the same checks as the file's setting `name`.
        func apply(_ flag: String, _ name: String, _ value: String?) throws(FlagError) {
            guard let value else { return }
            do {
                try configuration.apply(setting: name, value: value)
            } catch {
                throw FlagError("--\(flag): \(error.reason)")
            }
        }
        try apply("runtime-dir", "runtime_dir", runtimeDir)
        try apply("state-dir", "state_dir", stateDir)
        for endpoint in requestEndpoint + publishEndpoint {
            if let problem = DaemonConfiguration.endpointProblem(endpoint) { throw FlagError("--\(requestEndpoint.contains(endpoint) ? "request" : "publish")-endpoint: \(problem)") }
        }
        configuration.extraRequestEndpoints += requestEndpoint
        configuration.extraPublishEndpoints += publishEndpoint
        try apply("heartbeat-ms", "heartbeat_ms", heartbeatMs)
        try apply("durability", "durability", durability)
        try apply("max-batch", "max_batch", maxBatch)
        try apply("retention-revisions", "retention_revisions", retentionRevisions)
        try apply("loop-cpu", "loop_cpu", loopCpu)
        try apply("metrics-listen", "metrics_listen", metricsListen)
        if tcpInsecure { configuration.tcpInsecure = true }
        if upstream != nil && etcdEndpoints != nil {
            throw FlagError("--upstream and --etcd-endpoints: a daemon is either a relay or an etcd front, not both")
        }
        if let upstream {
            configuration.upstream = configuration.upstream ?? DaemonConfiguration.UpstreamSettings(requestEndpoint: upstream)
            configuration.upstream!.requestEndpoint = upstream
        }
        if upstreamPublish != nil || upstreamServerKey != nil || upstreamKeyFile != nil || !upstreamPrefix.isEmpty {
            guard configuration.upstream != nil else {
                throw FlagError("--upstream-publish, --upstream-server-key, --upstream-key-file and --upstream-prefix need --upstream")
            }
            if !upstreamPrefix.isEmpty { configuration.upstream!.prefixes = upstreamPrefix }
            if let upstreamPublish { configuration.upstream!.publishEndpoint = upstreamPublish }
            if let upstreamServerKey { configuration.upstream!.serverKey = upstreamServerKey }
            if let upstreamKeyFile { configuration.upstream!.keyFile = upstreamKeyFile }
        }
        if let etcdEndpoints {
            let endpoints = etcdEndpoints.split(separator: ",").map(String.init)
            configuration.etcd = configuration.etcd ?? DaemonConfiguration.EtcdSettings(endpoints: endpoints)
            configuration.etcd!.endpoints = endpoints
        }
        if etcdPrefix != nil || etcdCert != nil || etcdKey != nil || etcdCa != nil {
            guard configuration.etcd != nil else {
                throw FlagError("--etcd-prefix, --etcd-cert, --etcd-key and --etcd-ca need --etcd-endpoints")
            }
            if let etcdPrefix { configuration.etcd!.prefix = etcdPrefix }
            if let etcdCert { configuration.etcd!.certificateFile = etcdCert }
            if let etcdKey { configuration.etcd!.keyFile = etcdKey }
            if let etcdCa { configuration.etcd!.authorityFile = etcdCa }
        }
        do {
            try configuration.validate()
        } catch {
            // What the file alone passes and the flags break is a bad flag (64), not a bad file (78).
            var fileAlone = fromFile
            if (try? fileAlone.validate()) != nil { throw FlagError("flags: \(error)") }
            throw error
        }
        return configuration
    }
    /// What `--check-config` prints about a valid configuration.
    static func summary(of configuration: DaemonConfiguration) -> String {
        var lines = ["configuration valid", "runtime_dir = \(configuration.runtimeDirectory)",
                     "state_dir = \(configuration.stateDirectory)"]
        if configuration.access.isEnabled {
            for rule in configuration.access.rules {
                lines.append("allow \(rule.subject): read \(rule.rights.read), write \(rule.rights.write)")
            }
        } else {
            lines.append("no allow rules: every peer that can open the sockets may read and write every key")
        }
        if let upstream = configuration.upstream {
            lines.append("relay of \(upstream.requestEndpoint)\(upstream.carriedPrefixes == [""] ? "" : ", keys under " + upstream.carriedPrefixes.map { "'\($0)'" }.joined(separator: ", ")) (publish \(upstream.resolvedPublishEndpoint ?? "?"), "
                + (upstream.curve == nil ? "no CURVE)" : "CURVE as \(upstream.curve!.keys.publicKey))"))
        }
        if let etcd = configuration.etcd {
            lines.append("front of etcd \(etcd.endpoints.joined(separator: ",")), keys under '\(etcd.prefix)'"
                + (etcd.certificateFile.map { ", client certificate \($0)" } ?? ""))
        }
        if let keys = configuration.curveKeys { lines.append("CURVE public key = \(keys.publicKey)") }
        return lines.joined(separator: "\n")
    }

    /// A flag's value that the settings' checks refused: a usage error (exit 64).
    struct FlagError: Error, CustomStringConvertible {
        var message: String
        init(_ message: String) { self.message = message }
        var description: String { message }
    }

    struct ConfigurationUnreadable: Error, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    static func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        Foundation.exit(code)
    }
}
