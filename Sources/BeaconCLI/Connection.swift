import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

struct Connection: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The daemon's runtime directory (holds its ipc sockets).", valueName: "dir"))
    var runtimeDir: String?

    @Option(name: .long, help: ArgumentHelp("Request endpoint, e.g. tcp://127.0.0.1:7401 (overrides --runtime-dir).", valueName: "endpoint"))
    var endpoint: String?

    @Option(name: .long, help: ArgumentHelp("Publish endpoint, e.g. tcp://127.0.0.1:7402 (with --endpoint; default: the one it implies, beacon.pub beside an ipc beacon.req or the next tcp port).", valueName: "endpoint"))
    var pubEndpoint: String?

    // Unconditional: `--timeout -5` is a bad value, not a missing one.
    @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Milliseconds to wait for the daemon.", valueName: "ms"))
    var timeout: Int = 5000

    @Option(name: .long, help: ArgumentHelp("The daemon's CURVE public key, or a file holding it, for tcp endpoints ($BEACON_SERVER_KEY).", valueName: "key|file"))
    var serverKey: String?

    @Option(name: .long, help: ArgumentHelp("This client's CURVE key file from `beacon keygen`, for tcp endpoints ($BEACON_KEY_FILE).", valueName: "file"))
    var keyFile: String?

    @Flag(name: .long, help: "Print JSON lines instead of text.")
    var json = false

    func validate() throws {
        if timeout < 1 { throw ValidationError("--timeout must be at least 1 ms") }
    }

    /// CURVE credentials from the options or the environment; `nil` when none are given. Half
    /// of them, or a key that does not load, ends the command as a usage error (64).
    func curveCredentials() throws(CommandFailure) -> CurveCredentials? {
        let environment = ProcessInfo.processInfo.environment
        let server = serverKey ?? environment["BEACON_SERVER_KEY"]
        let file = keyFile ?? environment["BEACON_KEY_FILE"]
        guard server != nil || file != nil else { return nil }
        guard let server, let file else {
            throw CommandFailure("beacon: CURVE needs both --server-key and --key-file (or $BEACON_SERVER_KEY and $BEACON_KEY_FILE)", code: ExitCode32.usage)
        }
        do {
            return try CurveCredentials.load(serverKey: server, keyFile: file, serverKeySetting: "--server-key", keyFileSetting: "--key-file")
        } catch {
            throw CommandFailure("beacon: \(error.description)", code: ExitCode32.usage)
        }
    }

    var runtimeDirectory: String {
        if let runtimeDir { return runtimeDir }
        return WireEndpoint.clientRuntimeDirectory(environment: ProcessInfo.processInfo.environment, uid: getuid()) {
            FileManager.default.fileExists(atPath: $0)
        }
    }

    /// The options every command takes, by name, and whether each takes a value.
    static let sharedOptions: [String: Bool] = [
        "--runtime-dir": true, "--endpoint": true, "--pub-endpoint": true, "--timeout": true,
        "--server-key": true, "--key-file": true, "--json": false,
    ]

    /// `arguments` with the connection options given before the command moved after it, where
    /// the command's parser reads them: `beacon --runtime-dir D get k` is `beacon get k
    /// --runtime-dir D`.
    static func hoistingOptions(_ arguments: [String]) -> [String] {
        var hoisted: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            let name = String(argument.prefix { $0 != "=" })
            guard let takesValue = sharedOptions[name] else { break }
            hoisted.append(argument)
            index += 1
            if takesValue && !argument.contains("=") && index < arguments.count {
                hoisted.append(arguments[index])
                index += 1
            }
        }
        guard !hoisted.isEmpty, index < arguments.count else { return arguments }
        return Array(arguments[index...]) + hoisted
    }

    /// The command's client: made on first use and kept, so that a command that asks many times
    /// (history pages, backup chunks, bench samples) connects once. A command runs once per process.
    func client() throws -> WireClient {
        if let cached = commandClient.client { return cached }
        let made = try makeClient()
        commandClient.client = made
        return made
    }

    /// A client for a ``ResumableWriter``: one that does not reconnect by itself, made anew
    /// for each connection. A daemon absent now is an error to retry, not a reason to exit.
    func writerClient() throws(WireError) -> WireClient {
        let environment = ProcessInfo.processInfo.environment
        if let endpoint = endpoint ?? environment["BEACON_ENDPOINT"].nonEmpty {
            return try WireClient(requestEndpoint: endpoint, publishEndpoint: publishEndpoint(for: endpoint, environment: environment),
                                  // Checked, as every command's, by client() first.
                                  curve: (try? curveCredentials()) ?? nil, requestTimeoutMilliseconds: 1000, reconnects: false)
        }
        return try WireClient(requestEndpoint: WireEndpoint.request(inRuntimeDirectory: runtimeDirectory),
                              publishEndpoint: WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory),
                              requestTimeoutMilliseconds: 1000, reconnects: false)
    }

    /// `--pub-endpoint`, else `$BEACON_PUB_ENDPOINT` (set and not empty), else the one `endpoint` implies
    /// (`WireEndpoint.publish(impliedBy:)`); empty when none: a command that subscribes then says so.
    private func publishEndpoint(for endpoint: String, environment: [String: String]) -> String {
        pubEndpoint ?? environment["BEACON_PUB_ENDPOINT"].nonEmpty ?? WireEndpoint.publish(impliedBy: endpoint) ?? ""
    }

    private func makeClient() throws -> WireClient {
        let environment = ProcessInfo.processInfo.environment
        do {
            if let endpoint = endpoint ?? environment["BEACON_ENDPOINT"].nonEmpty {
                let publishEndpoint = publishEndpoint(for: endpoint, environment: environment)
                for candidate in [endpoint, publishEndpoint] where !candidate.isEmpty {
                    if let problem = WireEndpoint.problem(endpoint: candidate) { throw CommandFailure("beacon: \(problem)", code: ExitCode32.usage) }
                }
                return try WireClient(requestEndpoint: endpoint, publishEndpoint: publishEndpoint, curve: curveCredentials())
            }
            let directory = runtimeDirectory
            let socket = directory + "/" + WireEndpoint.requestSocketName
            guard FileManager.default.fileExists(atPath: socket) else {
                throw CommandFailure("beacon: no daemon at \(directory) (no socket \(socket)); is beacond running? (--runtime-dir, $BEACON_RUNTIME_DIR)",
                    code: ExitCode32.unavailable)
            }
            guard !unixSocketRefusesConnections(atPath: socket) else {
                throw CommandFailure("beacon: no daemon listens at \(socket) (the file is left from a daemon that was killed); is beacond running?",
                    code: ExitCode32.unavailable)
            }
            return try WireClient(runtimeDirectory: directory)
        } catch let error as WireError {
            throw failure(error)
        }
    }

    /// Applies one write exactly once: with a write id, sent again on a new connection when the
    /// daemon stops or restarts meanwhile (``ResumableWriter``). A refusal, or no daemon within
    /// `--timeout`, ends the command with one line on stderr and the documented exit code.
    func write(_ op: Beacon_V1_Request.OneOf_Op) throws -> Beacon_V1_WriteReply {
        _ = try client()  // the same checks as every command first
        let outcomes: [ResumableWriter.Outcome]
        do {
            let writer = try ResumableWriter(window: 1, patienceMilliseconds: timeout, connect: writerClient)
            outcomes = try writer.submit(op, line: 1) + writer.finish()
        } catch {
            throw CommandFailure("beacon: \(error); the write may or may not have been applied",
                code: error.reason == .refused ? ExitCode32.permissionDenied : ExitCode32.unavailable)
        }
        switch outcomes.first {
        case .committed(_, let reply)?: return reply
        case .refused(_, let error)?: throw failure(WireError(kind: .rejected, message: error.message, reply: error))
        case nil: throw CommandFailure("beacon: no answer to the write", code: ExitCode32.unavailable)
        }
    }

    /// Runs `body`, turning wire errors into one line on stderr and the documented exit code.
    func run<T>(_ body: (WireClient) throws(WireError) -> T) throws -> T {
        let client = try self.client()
        do {
            return try body(client)
        } catch {
            throw failure(error)
        }
    }

    /// Calls `body` for every journaled change of a key (`exact`) or prefix in a revision range,
    /// in order, a page of history at a time; the next page is asked for before `body` sees this
    /// one, so that the daemon reads it meanwhile.
    func forEachChange(of prefix: String, exact: Bool, from: UInt64, to: UInt64, _ body: (Beacon_V1_Event) throws -> Void) throws {
        var from = from
        // Asked from a compacted revision: what is kept is shown instead (the state of each key
        // at the compaction point, then every change after), with a line on stderr saying so.
        let compacted = from == 0 ? 0 : try run { (client) throws(WireError) in try client.ping(timeoutMilliseconds: timeout) }.compactedRevision
        if from > 0 && from <= compacted {
            warn("beacon: changes through revision \(compacted) were compacted; showing what is kept from revision \(compacted) on "
                 + "(the state of each key then, and every change after)")
            from = 0
        }
        func ask(from start: UInt64) throws -> UInt64 {
            try run { (client) throws(WireError) in
                try client.send(.history(.with {
                    $0.prefix = prefix; $0.exact = exact; $0.fromRevision = start; $0.toRevision = to
                }))
            }
        }
        var asked = try ask(from: from)
        while true {
            let reply = try run { (client) throws(WireError) in try client.awaitReply(to: asked, timeoutMilliseconds: timeout) }
            guard case .events(let page) = reply.result else {
                throw failure(WireError(kind: .malformedReply, message: "the daemon answered a History request with something else"))
            }
            if page.more { asked = try ask(from: page.revision + 1) }
            try page.events.forEach(body)
            guard page.more else { return }
        }
    }

    /// Exits unless the daemon serves consistent reads: a relay or front built before them would
    /// answer from its copy alone. A plain daemon's reads all are consistent.
    func requireConsistentReads() throws {
        let reply = try run { (client) throws(WireError) in try client.call(.ping(.init()), timeoutMilliseconds: timeout) }
        guard case .ping(let ping) = reply.result, !ping.consistentReads, ping.hasUpstream else { return }
        throw CommandFailure("beacon: beacond \(ping.daemonVersion) mirrors \(ping.upstream.endpoint) and cannot serve a consistent read; "
            + "read without --consistent, or at its upstream", code: ExitCode32.daemonError)
    }

    /// The failure `error` ends a command with.
    func failure(_ error: WireError) -> CommandFailure {
        let code: Int32
        switch error.kind {
        case .timeout, .transport, .connectionLost: code = ExitCode32.unavailable
        case .malformedReply: code = ExitCode32.daemonError
        case .refused: code = ExitCode32.permissionDenied
        case .rejected:
            switch error.reply?.code {
            case .permissionDenied: code = ExitCode32.permissionDenied
            case .notFound: code = ExitCode32.notFound
            case .versionConflict, .alreadyExists: code = ExitCode32.conflict
            case .invalidKey, .invalidValue, .valueTooLarge, .invalidArgument, .tooManyOperations: code = ExitCode32.invalidInput
            default: code = ExitCode32.daemonError
            }
        }
        return CommandFailure("beacon: \(error.message)", code: code)
    }

    func print(_ object: [String: Any], text: String) throws(CommandFailure) {
        try writeLine(json ? jsonLine(object) : text)
    }

    /// Prints one change: its record with `--json`, else a line of text.
    func print(_ event: Beacon_V1_Event) throws(CommandFailure) {
        try writeLine(json ? eventJSONLine(event) : eventText(event))
    }
}

/// The client `Connection.client()` made for this process's command, used by the command's
/// one thread only.
private final class CommandClient: @unchecked Sendable {
    var client: WireClient?
}

private let commandClient = CommandClient()

extension Optional<String> {
    /// The string, unless it is empty: an environment variable set to nothing counts as unset.
    fileprivate var nonEmpty: String? { self.flatMap { $0.isEmpty ? nil : $0 } }
}
