import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// Exit codes of `beacon` (also listed in `beacon --help`).
enum ExitCode32 {
    static let notFound: Int32 = 1
    static let conflict: Int32 = 3
    static let usage: Int32 = 64
    static let invalidInput: Int32 = 65
    static let unavailable: Int32 = 69
    static let daemonError: Int32 = 70
    static let cannotCreate: Int32 = 73
    static let outputClosed: Int32 = 74
    static let permissionDenied: Int32 = 77
}

@main
struct Beacon: ParsableCommand {
    /// A closed pipe is an error to report, not a signal to die of.
    static func main() {
        signal(SIGPIPE, SIG_IGN)
        // Swift makes every argument a string, replacing bytes that are not UTF-8: a key or value
        // would be stored other than it was given. Such an argument is refused instead.
        for index in 1..<Int(CommandLine.argc) {
            guard let argument = CommandLine.unsafeArgv[index], String(validatingCString: argument) == nil else { continue }
            die("beacon: argument \(index) is not valid UTF-8; keys and text values are UTF-8 (raw bytes: --type bytes with base64, or with - from standard input)",
                code: ExitCode32.invalidInput)
        }
        do {
            var command = try parseAsRoot(Connection.hoistingOptions(Array(CommandLine.arguments.dropFirst())))
            try command.run()
        } catch {
            exit(withError: error)
        }
    }

    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "Read, write and watch Beacon signals from a shell.",
        discussion: """
            Finds the daemon like every Beacon client: --endpoint/--pub-endpoint (or \
            $BEACON_ENDPOINT/$BEACON_PUB_ENDPOINT), else --runtime-dir, else $BEACON_RUNTIME_DIR, \
            else the first of $XDG_RUNTIME_DIR/beacon (or /tmp/beacon-UID) and /run/beacon \
            (systemd) that holds the daemon's socket. With no socket there, a command fails at \
            once with exit code 69. Connection options and --json may also come before the \
            command: beacon --runtime-dir D get k.

            Exit codes: 0 ok; 1 key not found; 3 version conflict or key exists; 64 usage; \
            65 invalid key or value (for pub: some lines were refused); 69 daemon unreachable; \
            70 other daemon error; 74 output closed (a pipe closed mid-stream); 77 refused by the \
            daemon's access policy (connection or request).
            """,
        version: "0.1.0",
        subcommands: [Set.self, Get.self, Delete.self, List.self, Pub.self, Txn.self, Backup.self, Watch.self, History.self, Replay.self, Stats.self, Top.self, Ping.self, Bench.self, Keygen.self])
}

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
    func curveCredentials() -> CurveCredentials? {
        let environment = ProcessInfo.processInfo.environment
        let server = serverKey ?? environment["BEACON_SERVER_KEY"]
        let file = keyFile ?? environment["BEACON_KEY_FILE"]
        guard server != nil || file != nil else { return nil }
        guard let server, let file else {
            die("beacon: CURVE needs both --server-key and --key-file (or $BEACON_SERVER_KEY and $BEACON_KEY_FILE)", code: ExitCode32.usage)
        }
        do {
            return try CurveCredentials.load(serverKey: server, keyFile: file, serverKeySetting: "--server-key", keyFileSetting: "--key-file")
        } catch {
            die("beacon: \(error.description)", code: ExitCode32.usage)
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
                                  curve: curveCredentials(), requestTimeoutMilliseconds: 1000, reconnects: false)
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
                    if let problem = WireEndpoint.problem(endpoint: candidate) { die("beacon: \(problem)", code: ExitCode32.usage) }
                }
                return try WireClient(requestEndpoint: endpoint, publishEndpoint: publishEndpoint, curve: curveCredentials())
            }
            let directory = runtimeDirectory
            let socket = directory + "/" + WireEndpoint.requestSocketName
            guard FileManager.default.fileExists(atPath: socket) else {
                die("beacon: no daemon at \(directory) (no socket \(socket)); is beacond running? (--runtime-dir, $BEACON_RUNTIME_DIR)",
                    code: ExitCode32.unavailable)
            }
            guard !unixSocketRefusesConnections(atPath: socket) else {
                die("beacon: no daemon listens at \(socket) (the file is left from a daemon that was killed); is beacond running?",
                    code: ExitCode32.unavailable)
            }
            return try WireClient(runtimeDirectory: directory)
        } catch {
            fail(error)
        }
    }

    /// Applies one write exactly once: with a write id, sent again on a new connection when the
    /// daemon stops or restarts meanwhile (``ResumableWriter``). A refusal, or no daemon within
    /// `--timeout`, ends the command with one line on stderr and the documented exit code.
    func write(_ op: Beacon_V1_Request.OneOf_Op) -> Beacon_V1_WriteReply {
        _ = try! client()  // the same checks as every command first
        let outcomes: [ResumableWriter.Outcome]
        do {
            let writer = try ResumableWriter(window: 1, patienceMilliseconds: timeout, connect: writerClient)
            outcomes = try writer.submit(op, line: 1) + writer.finish()
        } catch {
            die("beacon: \(error); the write may or may not have been applied",
                code: error.reason == .refused ? ExitCode32.permissionDenied : ExitCode32.unavailable)
        }
        switch outcomes.first {
        case .committed(_, let reply)?: return reply
        case .refused(_, let error)?: fail(WireError(kind: .rejected, message: error.message, reply: error))
        case nil: die("beacon: no answer to the write", code: ExitCode32.unavailable)
        }
    }

    /// Runs `body`, turning wire errors into one line on stderr and the documented exit code.
    func run<T>(_ body: (WireClient) throws(WireError) -> T) -> T {
        let client = try! self.client()
        do {
            return try body(client)
        } catch {
            fail(error)
        }
    }

    /// Calls `body` for every journaled change of a key (`exact`) or prefix in a revision range,
    /// in order, a page of history at a time; the next page is asked for before `body` sees this
    /// one, so that the daemon reads it meanwhile.
    func forEachChange(of prefix: String, exact: Bool, from: UInt64, to: UInt64, _ body: (Beacon_V1_Event) -> Void) {
        var from = from
        // Asked from a compacted revision: what is kept is shown instead (the state of each key
        // at the compaction point, then every change after), with a line on stderr saying so.
        let compacted = from == 0 ? 0 : run { (client) throws(WireError) in try client.ping(timeoutMilliseconds: timeout) }.compactedRevision
        if from > 0 && from <= compacted {
            warn("beacon: changes through revision \(compacted) were compacted; showing what is kept from revision \(compacted) on "
                 + "(the state of each key then, and every change after)")
            from = 0
        }
        func ask(from start: UInt64) -> UInt64 {
            run { (client) throws(WireError) in
                try client.send(.history(.with {
                    $0.prefix = prefix; $0.exact = exact; $0.fromRevision = start; $0.toRevision = to
                }))
            }
        }
        var asked = ask(from: from)
        while true {
            let reply = run { (client) throws(WireError) in try client.awaitReply(to: asked, timeoutMilliseconds: timeout) }
            guard case .events(let page) = reply.result else {
                fail(WireError(kind: .malformedReply, message: "the daemon answered a History request with something else"))
            }
            if page.more { asked = ask(from: page.revision + 1) }
            page.events.forEach(body)
            guard page.more else { return }
        }
    }

    /// Exits unless the daemon serves consistent reads: a relay or front built before them would
    /// answer from its copy alone. A plain daemon's reads all are consistent.
    func requireConsistentReads() {
        let reply = run { (client) throws(WireError) in try client.call(.ping(.init()), timeoutMilliseconds: timeout) }
        guard case .ping(let ping) = reply.result, !ping.consistentReads, ping.hasUpstream else { return }
        die("beacon: beacond \(ping.daemonVersion) mirrors \(ping.upstream.endpoint) and cannot serve a consistent read; "
            + "read without --consistent, or at its upstream", code: ExitCode32.daemonError)
    }

    func fail(_ error: WireError) -> Never {
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
        die("beacon: \(error.message)", code: code)
    }

    func print(_ object: [String: Any], text: String) {
        writeLine(json ? jsonLine(object) : text)
    }

    /// Prints one change: its record with `--json`, else a line of text.
    func print(_ event: Beacon_V1_Event) {
        writeLine(json ? eventJSONLine(event) : eventText(event))
    }
}

/// The client `Connection.client()` made for this process's command, used by the command's
/// one thread only.
private final class CommandClient: @unchecked Sendable {
    var client: WireClient?
}

private let commandClient = CommandClient()

/// Lists the keys under `prefix` and prints them: `KEY = VALUE` (aligned on a terminal), or the
/// values alone.
func printKeys(under prefix: String, connection: Connection, valuesOnly: Bool = false, consistent: Bool = false) {
    if consistent { connection.requireConsistentReads() }
    let reply = connection.run { (client) throws(WireError) in
        try client.call(.list(.with { $0.prefix = prefix; $0.consistent = consistent }), timeoutMilliseconds: connection.timeout)
    }
    guard case .list(let list) = reply.result else { die("beacon: unexpected reply", code: ExitCode32.daemonError) }
    let width = alignedKeyWidth(list.kvs)
    for kv in list.kvs {
        connection.print(keyValueObject(kv), text: valuesOnly ? kv.value.jsonText : keyValueText(kv, keyWidth: width))
    }
}

/// A progress line on standard error, rewritten in place at most five times a second, and only
/// when standard error is a terminal.
struct ProgressLine {
    let isShown = isatty(STDERR_FILENO) == 1
    private var lastShown = ContinuousClock.now

    mutating func show(_ text: @autoclosure () -> String) {
        guard isShown, ContinuousClock.now - lastShown > .milliseconds(200) else { return }
        lastShown = ContinuousClock.now
        warnWithoutNewline("\r" + text())
    }

    /// Erases the line.
    func clear() {
        if isShown { warnWithoutNewline("\r\u{1B}[K") }
    }
}

/// Writes all of `text` to `descriptor`, retrying after signals; `false` when the descriptor
/// no longer takes output (a closed pipe), with `errno` saying why.
func writeAll(_ text: String, to descriptor: Int32) -> Bool {
    let bytes = Array(text.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress! + offset, $0.count - offset) }
        if written < 0 {
            if errno == EINTR { continue }
            return false
        }
        offset += written
    }
    return true
}

/// Writes one line to standard output at once; a reader that went away (a closed pipe) ends
/// the command with one line on stderr and exit code 74 instead of a SIGPIPE.
func writeLine(_ line: String) {
    if !writeAll(line + "\n", to: STDOUT_FILENO) {
        die("beacon: output closed (\(String(cString: strerror(errno))))", code: ExitCode32.outputClosed)
    }
}

/// Writes `text` (whole lines) to standard output and empties it; exits like ``writeLine(_:)``.
func writeText(_ text: inout String) {
    guard !text.isEmpty else { return }
    if !writeAll(text, to: STDOUT_FILENO) {
        die("beacon: output closed (\(String(cString: strerror(errno))))", code: ExitCode32.outputClosed)
    }
    text.removeAll(keepingCapacity: true)
}

/// Writes one line to standard error. A reader that went away ends the command with exit code
/// 74, like a closed standard output: there is no one left to tell.
func warn(_ message: String) {
    if !writeAll(message + "\n", to: STDERR_FILENO) {
        exit(ExitCode32.outputClosed)
    }
}

/// Writes `text` to standard error as it is (progress lines that rewrite themselves); errors
/// are ignored.
func warnWithoutNewline(_ text: String) {
    _ = writeAll(text, to: STDERR_FILENO)
}

/// Whether standard output is a pipe or socket whose reader has gone, or a terminal that hung
/// up: `poll` says so without anything being written.
func standardOutputIsClosed() -> Bool {
    var item = pollfd(fd: STDOUT_FILENO, events: 0, revents: 0)
    return poll(&item, 1, 0) == 1 && item.revents & Int16(POLLERR | POLLHUP) != 0
}

func die(_ message: String, code: Int32) -> Never {
    warn(message)
    exit(code)
}

/// One JSON object per line, keys sorted; signal values by `ValueJSON`'s rules, so that they
/// read back with their types.
func jsonLine(_ object: [String: Any]) -> String {
    var output = ""
    appendJSON(object, to: &output)
    return output
}

private func appendJSON(_ any: Any, to output: inout String) {
    switch any {
    case let value as Beacon_V1_Value: ValueJSON.write(value, to: &output)
    case let string as String: ValueJSON.writeString(string, to: &output)
    case let bool as Bool: output += bool ? "true" : "false"
    case let int as Int: output += String(int)
    case let int as Int64: output += String(int)
    case let int as UInt64: output += String(int)
    case let int as UInt32: output += String(int)
    case let int as Int32: output += String(int)
    case let double as Double: output += double.isFinite ? String(double) : "null"
    case let object as [String: Any]:
        output += "{"
        for (index, key) in object.keys.sorted().enumerated() {
            if index > 0 { output += "," }
            ValueJSON.writeString(key, to: &output)
            output += ":"
            appendJSON(object[key]!, to: &output)
        }
        output += "}"
    case let array as [Any]:
        output += "["
        for (index, item) in array.enumerated() {
            if index > 0 { output += "," }
            appendJSON(item, to: &output)
        }
        output += "]"
    default:
        ValueJSON.writeString(String(describing: any), to: &output)
    }
}

/// The record of a key's current value, in the shape of a change: `op` is `put`, `revision` the
/// revision that wrote the value and `timestamp_ms` its commit time.
func keyValueObject(_ kv: Beacon_V1_KeyValue) -> [String: Any] {
    var object: [String: Any] = ["key": kv.key, "op": "put", "revision": kv.modRevision, "value": kv.value,
                                 "version": kv.version, "create_revision": kv.createRevision, "mod_revision": kv.modRevision]
    if kv.modTimeMs != 0 { object["timestamp_ms"] = kv.modTimeMs }  // 0 from a daemon that predates it
    if let remaining = remainingTTL(kv) {
        object["ttl_ms"] = remaining
    }
    return object
}

/// The width that aligns the keys of `kvs` when standard output is a terminal (at most 40
/// columns); 0 otherwise, so that scripts read one space on each side of `=`.
func alignedKeyWidth(_ kvs: [Beacon_V1_KeyValue]) -> Int {
    guard isatty(STDOUT_FILENO) == 1 else { return 0 }
    return min(40, kvs.map(\.key.count).max() ?? 0)
}

/// Milliseconds until a key with a TTL expires (0 once due), or `nil` for a key without one.
func remainingTTL(_ kv: Beacon_V1_KeyValue) -> UInt64? {
    guard kv.expiresAtMs > 0 else { return nil }
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    let nowMilliseconds = UInt64(now.tv_sec) * 1000 + UInt64(now.tv_nsec) / 1_000_000
    return kv.expiresAtMs > nowMilliseconds ? kv.expiresAtMs - nowMilliseconds : 0
}

/// `KEY = VALUE` for text output, with the time left for a key with a TTL; the key padded to
/// `keyWidth` columns (aligned output on a terminal).
func keyValueText(_ kv: Beacon_V1_KeyValue, keyWidth: Int = 0) -> String {
    let padding = String(repeating: " ", count: max(0, keyWidth - kv.key.count))
    let base = "\(kv.key)\(padding) = \(kv.value.jsonText)"
    guard let remaining = remainingTTL(kv) else { return base }
    return base + " (expires in \(String(format: "%.1f", Double(remaining) / 1000)) s)"
}

/// A change's `--json` record (docs/CLI.md), keys sorted as `jsonLine` sorts them, written
/// directly: commands print one per change of a range.
func eventJSONLine(_ event: Beacon_V1_Event) -> String {
    let change = event.change
    var output = "{\"key\":"
    ValueJSON.writeString(change.key, to: &output)
    output += change.kind == .put ? ",\"op\":\"put\"" : change.kind == .delete ? ",\"op\":\"delete\"" : ",\"op\":\"expire\""
    output += ",\"part\":\(event.part),\"parts\":\(event.parts),\"revision\":\(event.revision)"
    if event.timestampMs != 0 { output += ",\"timestamp_ms\":\(event.timestampMs)" }
    if change.kind == .put {
        output += ",\"value\":"
        ValueJSON.write(change.value, to: &output)
    }
    output += ",\"version\":\(change.version)}"
    return output
}

func eventText(_ event: Beacon_V1_Event) -> String {
    switch event.change.kind {
    case .put: "\(event.revision) \(event.change.key) = \(event.change.value.jsonText) (v\(event.change.version))"
    case .delete: "\(event.revision) \(event.change.key) deleted"
    default: "\(event.revision) \(event.change.key) expired"
    }
}

extension Beacon {
    struct Set: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Write a value (JSON if it parses as JSON, else a string).")
        @OptionGroup var connection: Connection
        @Argument(help: "The key, e.g. net.wifi.ssid.") var key: String
        @Argument(help: "The value: JSON (1, 1.0, true, {\"a\":1}) or any other text as a string; - reads it from standard input.") var value: String
        @Option(name: .long, help: ArgumentHelp("Force the type: json, string, int, double, bool, null, bytes (base64; raw with -).", valueName: "type")) var type: String?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Write only if the key is at this version (0: absent).", valueName: "n")) var ifVersion: UInt64?
        @Flag(name: .long, help: "Write only if the key does not exist.") var create = false
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Delete the key after this many milliseconds.", valueName: "ms")) var ttl: UInt64 = 0

        func run() throws {
            let fromInput = value == "-"
            let raw: [UInt8]
            if fromInput {
                // A value is at most 1 MiB; its text (JSON, base64) somewhat more.
                guard let read = StandardInput.all(limit: 4 * WireLimits.maxValueBytes) else {
                    die("beacon: standard input is longer than \(4 * WireLimits.maxValueBytes) bytes; a value is at most \(WireLimits.maxValueBytes) bytes",
                        code: ExitCode32.invalidInput)
                }
                raw = read
            } else {
                raw = Array(value.utf8)
            }
            guard var text = String(validating: raw, as: UTF8.self) ?? (type == "bytes" ? "" : nil) else {
                die("beacon: standard input is not valid UTF-8; text values are UTF-8 (raw bytes: --type bytes)",
                    code: ExitCode32.invalidInput)
            }
            if fromInput && type != "string" && text.hasSuffix("\n") { text.removeLast() }
            let parsed: Beacon_V1_Value?
            switch type {
            case nil:
                do {
                    parsed = try ValueJSON.parseLenient(text)
                } catch {
                    die("beacon: '\(text)' is not valid JSON: \(error) (--type string stores the text as it is)",
                        code: ExitCode32.invalidInput)
                }
            case "json":
                do {
                    parsed = try ValueJSON.parse(text)
                } catch {
                    die("beacon: '\(text)' is not valid JSON: \(error)", code: ExitCode32.invalidInput)
                }
            case "string": parsed = .with { $0.stringValue = text }
            case "int": parsed = Int64(text).map { v in .with { $0.intValue = v } }
            case "double": parsed = Double(text).flatMap { v in v.isFinite ? .with { $0.doubleValue = v } : nil }
            case "bool": parsed = Bool(text).map { v in .with { $0.boolValue = v } }
            case "null": parsed = text == "null" || text.isEmpty ? .with { $0.nullValue = .nullValue } : nil
            case "bytes":
                let bytes = fromInput ? Data(raw) : Data(base64Encoded: text)
                parsed = bytes.map { v in .with { $0.bytesValue = v } }
            default: die("beacon: unknown --type '\(type!)' (json, string, int, double, bool, null, bytes)", code: ExitCode32.usage)
            }
            guard let parsed else { die("beacon: '\(text)' is not a valid \(type ?? "value")", code: ExitCode32.invalidInput) }
            let reply = connection.write(.put(.with {
                $0.key = key
                $0.value = parsed
                if let ifVersion { $0.ifVersion = ifVersion }
                $0.createOnly = create
                $0.ttlMs = ttl
            }))
            connection.print(["key": key, "revision": reply.revision, "version": reply.versions.first ?? 0],
                             text: "\(key) = \(parsed.jsonText) at revision \(reply.revision) (version \(reply.versions.first ?? 0))")
        }
    }

    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the values of keys, or of every key under a prefix.",
            discussion: """
                One key prints its value alone; several, or --prefix, print KEY = VALUE lines. A key \
                that does not exist is named on stderr and the others still print; the exit code is \
                then 1.
                """)
        @OptionGroup var connection: Connection
        @Argument(help: "Keys, or prefixes with --prefix.") var keys: [String]
        @Flag(name: .long, help: "Print every key under each argument.") var prefix = false
        @Flag(name: .long, help: "Print values alone, one per line, also for several keys.") var printValueOnly = false
        @Flag(name: .long, help: ArgumentHelp("See every write acknowledged anywhere before the read, at every etcd front too (a front asks etcd first).",
                                              discussion: "A front asks etcd first, a relay its upstream; a plain daemon's reads are all consistent."))
        var consistent = false
        func validate() throws {
            if keys.isEmpty { throw ValidationError("give at least one key") }
        }
        func run() throws {
            if prefix {
                for prefix in keys {
                    printKeys(under: prefix, connection: connection, valuesOnly: printValueOnly, consistent: consistent)
                }
                return
            }
            if consistent { connection.requireConsistentReads() }
            var missing = 0
            let client = try connection.client()
            for key in keys {
                do {
                    let kv = try client.get(key, consistent: consistent, timeoutMilliseconds: connection.timeout)
                    connection.print(keyValueObject(kv), text: keys.count == 1 || printValueOnly ? kv.value.jsonText : keyValueText(kv))
                } catch where error.reply?.code == .notFound {
                    warn("beacon: \(error.message)")
                    missing += 1
                } catch {
                    connection.fail(error)
                }
            }
            if missing > 0 { throw ExitCode(ExitCode32.notFound) }
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a key, or every key under a prefix.",
            discussion: """
                With --prefix, the keys under the prefix are deleted in one transaction, at one \
                revision, each on condition that it has not changed since it was listed (a key that \
                changed meanwhile makes it list and try again). A transaction holds at most \
                1,024 operations: more keys are deleted in transactions of 1,024, in key order, \
                each at a revision of its own (a reader may see part of the prefix gone meanwhile); \
                if it is interrupted, run it again to delete the rest.
                """,
            aliases: ["del", "rm"])
        @OptionGroup var connection: Connection
        @Argument(help: "The key, or the prefix with --prefix.") var key: String
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Delete only if the key is at this version.", valueName: "n")) var ifVersion: UInt64?
        @Flag(name: .long, help: "Delete every key under the argument (at one revision up to 1,024 keys).") var prefix = false
        func run() throws {
            if prefix {
                guard ifVersion == nil else { die("beacon: --if-version applies to one key, not to --prefix", code: ExitCode32.usage) }
                return deletePrefix()
            }
            let reply = connection.write(.delete(.with {
                $0.key = key
                if let ifVersion { $0.ifVersion = ifVersion }
            }))
            connection.print(["key": key, "revision": reply.revision], text: "\(key) deleted at revision \(reply.revision)")
        }

        private func deletePrefix() {
            var deleted = 0, transactions = 0
            var firstRevision: UInt64 = 0, lastRevision: UInt64 = 0
            var conflicts = 0
            listing: while true {
                let listed = connection.run { (client) throws(WireError) in
                    try client.snapshot(prefix: key, timeoutMilliseconds: connection.timeout)
                }
                // In key order, a transaction of at most 1,024 at a time, each key on condition
                // that it has not changed since the listing.
                for start in stride(from: 0, to: listed.kvs.count, by: WireLimits.maxTxnOps) {
                    let chunk = listed.kvs[start..<min(start + WireLimits.maxTxnOps, listed.kvs.count)]
                    let ops = chunk.map { kv in
                        Beacon_V1_TxnOp.with { $0.delete = .with { $0.key = kv.key; $0.ifVersion = kv.version } }
                    }
                    do {
                        let reply = try connection.client().transaction(ops, timeoutMilliseconds: connection.timeout)
                        deleted += ops.count
                        transactions += 1
                        if firstRevision == 0 { firstRevision = reply.revision }
                        lastRevision = reply.revision
                    } catch let error as WireError where error.reply?.code == .versionConflict || error.reply?.code == .notFound {
                        // A key changed or went since the listing: list what is left again.
                        conflicts += 1
                        guard conflicts < 10 else {
                            die("beacon: the keys under \(key) kept changing; deleted \(deleted) in \(transactions) transactions, run it again for the rest",
                                code: ExitCode32.conflict)
                        }
                        continue listing
                    } catch let error as WireError {
                        if deleted > 0 { warn("beacon: deleted \(deleted) keys under \(key) before this; run it again for the rest") }
                        connection.fail(error)
                    } catch {
                        die("beacon: \(error)", code: ExitCode32.daemonError)
                    }
                }
                break
            }
            guard deleted > 0 else {
                connection.print(["prefix": key, "deleted": 0], text: "nothing under \(key)")
                return
            }
            let revisions = firstRevision == lastRevision ? "at revision \(lastRevision)"
                : "in \(transactions) transactions (revisions \(firstRevision)–\(lastRevision))"
            connection.print(["prefix": key, "deleted": deleted, "revision": lastRevision, "first_revision": firstRevision, "transactions": transactions],
                             text: "deleted \(deleted) key\(deleted == 1 ? "" : "s") under \(key) \(revisions)")
        }
    }

    struct Txn: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apply writes read from standard input as one transaction, at one revision.",
            discussion: """
                Each line is an operation in `beacon pub`'s forms: KEY VALUE, {"key": …, "value": …} \
                or {"key": …, "op": "delete"}; a JSON line may add "if_version": N, a condition on \
                that key's version (0: absent). Either every condition holds and every operation \
                applies at one revision, or nothing does (exit 3 when a condition fails).
                """)
        @OptionGroup var connection: Connection
        func run() throws {
            var ops: [Beacon_V1_TxnOp] = []
            var number = 0
            var input = StandardInput.Lines()
            while let next = input.next() {
                number += 1
                let line: String
                switch next {
                case .text(let text): line = text
                case .tooLong: die("beacon: line \(number): longer than \(StandardInput.limit) bytes; nothing applied", code: ExitCode32.invalidInput)
                case .notUTF8: die("beacon: line \(number): not valid UTF-8; nothing applied", code: ExitCode32.invalidInput)
                }
                if line.trimmingCharacters(in: .whitespaces).isEmpty { continue }
                switch Pub.parse(line) {
                case .success(.put(let put)): ops.append(.with { $0.put = put })
                case .success(.delete(let delete)): ops.append(.with { $0.delete = delete })
                case .success: die("beacon: line \(number): not a put or a delete", code: ExitCode32.invalidInput)
                case .failure(let problem): die("beacon: line \(number): \(problem.message); nothing applied", code: ExitCode32.invalidInput)
                }
            }
            guard !ops.isEmpty else { die("beacon: no operations on standard input", code: ExitCode32.usage) }
            guard ops.count <= WireLimits.maxTxnOps else {
                die("beacon: \(ops.count) operations on standard input; a transaction holds at most \(WireLimits.maxTxnOps) (beacon pub applies lines one by one)",
                    code: ExitCode32.invalidInput)
            }
            let reply = connection.write(.txn(.with { $0.ops = ops }))
            connection.print(["operations": ops.count, "revision": reply.revision],
                             text: "applied \(ops.count) operation\(ops.count == 1 ? "" : "s") at revision \(reply.revision)")
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "ls", abstract: "List keys and values under a prefix.")
        @OptionGroup var connection: Connection
        @Argument(help: "The prefix (default: every key).") var prefix: String = ""
        @Flag(name: .long, help: "See every write acknowledged anywhere before the read, at every etcd front too (a front asks etcd first).")
        var consistent = false
        func run() throws {
            printKeys(under: prefix, connection: connection, consistent: consistent)
        }
    }

    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "watch", abstract: "Print the values under prefixes, then every change, gaplessly.",
            discussion: """
                With several prefixes the changes of all of them come as one stream in revision order \
                (the daemon is followed at their common prefix and the rest is left out here).

                When the watch cannot continue from where it was — the daemon's journal was replaced \
                (a new epoch) or compacted past the watch's position while it was away — it prints a \
                resync record (op "resync", with the revision and epoch it continues from), then a \
                delete for every key that vanished meanwhile and a put for every key whose value \
                changed, all marked "resync": true, and goes on from there.
                """,
            aliases: ["sub"])
        @OptionGroup var connection: Connection
        @Argument(help: "Prefixes to follow (default: every key).") var prefixes: [String] = []
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Stop after this many changes.", valueName: "n")) var count: Int?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Replay the journal's changes from this revision first, instead of printing the current values.", valueName: "rev"))
        var from: UInt64?
        func validate() throws {
            if let count, count < 1 { throw ValidationError("--count must be at least 1") }
        }
        func run() throws {
            var printed = 0
            let wanted = prefixes.isEmpty ? [""] : prefixes
            let prefix = Self.commonPrefix(wanted)
            func isWanted(_ key: String) -> Bool { wanted.contains { key.isUnder($0) } }
            connection.run { (client) throws(WireError) in
                // Subscribe and snapshot first: the replay then ends exactly where live changes begin.
                let follower = try PrefixFollower(client: client, prefix: prefix, requestTimeoutMilliseconds: connection.timeout)
                func show(_ event: Beacon_V1_Event) -> Bool {
                    guard isWanted(event.change.key) else { return false }
                    connection.print(event)
                    printed += 1
                    return count.map { printed >= $0 } ?? false
                }
                // What this watch has shown, to tell what a resync changed.
                var known = follower.state.filter { isWanted($0.key) }
                var resyncsSeen = follower.resyncs
                func showResync(at revision: UInt64) -> Bool {
                    resyncsSeen = follower.resyncs
                    let now = follower.state.filter { isWanted($0.key) }
                    connection.print(["op": "resync", "revision": revision, "epoch": follower.epoch],
                                     text: "resync at revision \(revision) (epoch \(follower.epoch)): the journal was replaced or compacted past this watch")
                    for key in known.keys.sorted() where now[key] == nil {
                        connection.print(["op": "delete", "key": key, "revision": revision, "resync": true],
                                         text: "\(revision) \(key) deleted (resync)")
                        printed += 1
                        if let count, printed >= count { return true }
                    }
                    for key in now.keys.sorted() where now[key] != known[key] {
                        var record = keyValueObject(now[key]!)
                        record["resync"] = true
                        connection.print(record, text: "\(key) = \(now[key]!.value.jsonText) (resync)")
                        printed += 1
                        if let count, printed >= count { return true }
                    }
                    known = now
                    return false
                }
                if let from {
                    if from > follower.through + 1 {
                        warn("beacon: --from \(from) is above the head (revision \(follower.through)): changes before revision \(from) are not shown")
                    }
                    var start = from
                    do throws(WireError) {
                        while start <= follower.through {
                            let page = try client.history(prefix, exact: false, from: start, to: follower.through,
                                                          timeoutMilliseconds: connection.timeout)
                            for event in page.events where show(event) { return }
                            guard page.more else { break }
                            start = page.revision + 1
                        }
                    } catch where error.reply?.code == .compacted {
                        // The changes from --from on are gone: a resync says so, with every
                        // current value (none was shown yet), and the watch goes on from there.
                        known = [:]
                        if showResync(at: follower.through) { return }
                    }
                } else {
                    for kv in follower.state.values.sorted(by: { $0.key < $1.key }) where isWanted(kv.key) {
                        connection.print(keyValueObject(kv), text: "\(kv.key) = \(kv.value.jsonText)")
                    }
                }
                if let count, printed >= count { return }
                while true {
                    // Between changes too: a reader that went away (`| head -3`) ends the watch.
                    if standardOutputIsClosed() { die("beacon: output closed", code: ExitCode32.outputClosed) }
                    guard let update = try follower.next(timeoutMilliseconds: 200) else { continue }
                    switch update {
                    case .revision(let events):
                        for event in events where isWanted(event.change.key) {
                            known[event.change.key] = Beacon_V1_KeyValue(after: event)
                        }
                        for event in events where event.revision >= (from ?? 0) {
                            if show(event) { return }
                        }
                    case .resynced(let revision):
                        if follower.resyncs != resyncsSeen, showResync(at: revision) { return }
                    }
                }
            }
        }

        /// The longest byte prefix the given prefixes share.
        static func commonPrefix(_ prefixes: [String]) -> String {
            guard var common = prefixes.first.map({ Array($0.utf8) }) else { return "" }
            for prefix in prefixes.dropFirst() {
                common = Array(zip(common, prefix.utf8).prefix { $0 == $1 }.map(\.0))
            }
            return String(decoding: common, as: UTF8.self)
        }
    }

    struct History: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the journaled changes of a key or prefix.")
        @OptionGroup var connection: Connection
        @Argument(help: "A key, or a prefix with --prefix.") var key: String
        @Flag(name: .long, help: "Treat the argument as a prefix.") var prefix = false
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("First revision (default: oldest retained).", valueName: "rev")) var from: UInt64?
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Last revision (default: head).", valueName: "rev")) var to: UInt64?

        func validate() throws {
            if let from, let to, from > to { throw ValidationError("--from \(from) is after --to \(to): no revision is in that range") }
        }
        func run() throws {
            connection.forEachChange(of: key, exact: !prefix, from: from ?? 0, to: to ?? 0) { event in
                connection.print(event)
            }
        }
    }

    struct Backup: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Copy the daemon's journal, consistently, while it runs.",
            discussion: """
                The daemon makes a copy of the whole journal with SQLite's online backup API (every \
                change through one revision) and this command reads it in chunks into FILE: first \
                FILE.partial, synced, then renamed. Needs read=* in the daemon's access rules. \
                Restore: stop beacond, put FILE in place of the state directory's journal.sqlite \
                (remove journal.sqlite-wal and journal.sqlite-shm), start beacond. The copy has an \
                epoch of its own, so clients of the restored daemon resync. FILE `-` writes the copy \
                to standard output (not a terminal) and the summary to standard error; --force \
                replaces a regular file only, never a device, pipe, directory or symbolic link.
                """)
        @OptionGroup var connection: Connection
        @Argument(help: ArgumentHelp("Where to write the copy (- for standard output).", valueName: "file")) var file: String
        @Flag(name: .long, help: "Replace FILE if it is a regular file that exists.") var force = false

        func run() throws {
            let toStandardOutput = file == "-"
            let partial = file + ".partial"
            if toStandardOutput {
                if isatty(STDOUT_FILENO) == 1 {
                    die("beacon: refusing to write a journal copy to a terminal; redirect standard output or give a file", code: ExitCode32.usage)
                }
            } else {
                if let problem = replacementProblem(file) { die(problem.message, code: problem.code) }
                // Written nowhere until the daemon has made the copy: a refusal leaves nothing.
                // Writable beside FILE? Learnt now, before the daemon copies a whole journal.
                let directory = (file as NSString).deletingLastPathComponent
                guard access(directory.isEmpty ? "." : directory, W_OK) == 0 else {
                    die("beacon: cannot write \(partial): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate)
                }
            }
            /// FILE.partial once the first chunk came (standard output: its descriptor at once).
            var fd: Int32 = toStandardOutput ? STDOUT_FILENO : -1
            /// Leaves nothing behind and ends the command.
            func abandon(_ message: String, code: Int32) -> Never {
                if !toStandardOutput && fd >= 0 { close(fd); unlink(partial) }
                die(message, code: code)
            }
            var token = Data()
            var offset: UInt64 = 0
            var last = Beacon_V1_BackupReply()
            while true {
                let request = Beacon_V1_Backup.with { $0.token = token; $0.offset = offset }
                // The first reply comes once the daemon has made the copy, in steps between other
                // requests: for a large journal on a busy daemon that takes minutes.
                let wait = token.isEmpty ? 600_000 : 60_000
                let reply = connection.run { (client) throws(WireError) in
                    try client.call(.backup(request), timeoutMilliseconds: max(connection.timeout, wait))
                }
                guard case .backup(let chunk) = reply.result, chunk.offset == offset else {
                    abandon("beacon: unexpected reply to a backup request", code: ExitCode32.daemonError)
                }
                if fd < 0 {
                    // Stopped from now on (SIGINT, SIGTERM, SIGHUP), the command removes what it
                    // wrote; its connection closes, and the daemon lets go of the copy at once.
                    BackupInterruption.removeOnSignal(partial)
                    unlink(partial)
                    fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                    guard fd >= 0 else { die("beacon: cannot write \(partial): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate) }
                }
                if !chunk.data.isEmpty && !Self.writeAll(chunk.data, to: fd) {
                    let reason = String(cString: strerror(errno))
                    if toStandardOutput {
                        abandon("beacon: cannot write to standard output: \(reason)",
                                code: errno == EPIPE ? ExitCode32.outputClosed : ExitCode32.cannotCreate)
                    }
                    abandon("beacon: cannot write \(partial): \(reason)", code: ExitCode32.cannotCreate)
                }
                token = chunk.token
                offset += UInt64(chunk.data.count)
                last = chunk
                if chunk.done { break }
            }
            let summary: [String: Any] = ["file": file, "bytes": last.size, "revision": last.revision, "epoch": last.epoch]
            let text = "wrote \(toStandardOutput ? "the copy to standard output" : file): \(last.size) bytes, "
                + "every change through revision \(last.revision) (epoch \(last.epoch))"
            if toStandardOutput {
                warn(connection.json ? jsonLine(summary) : text)
                return
            }
            // Checked again: something may have appeared at FILE meanwhile.
            if let problem = replacementProblem(file) { abandon(problem.message, code: problem.code) }
            guard fsync(fd) == 0, close(fd) == 0, rename(partial, file) == 0 else {
                unlink(partial)
                die("beacon: cannot finish \(file): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate)
            }
            BackupInterruption.finished()
            connection.print(summary, text: text)
        }

        /// Why the copy may not go to `path`: it is not a regular file, or it exists without --force.
        private func replacementProblem(_ path: String) -> (message: String, code: Int32)? {
            var status = stat()
            guard lstat(path, &status) == 0 else { return nil }
            let kind = status.st_mode & S_IFMT
            guard kind == S_IFREG else {
                let what = switch kind {
                case S_IFLNK: "a symbolic link"
                case S_IFDIR: "a directory"
                case S_IFIFO: "a pipe"
                case S_IFCHR, S_IFBLK: "a device"
                case S_IFSOCK: "a socket"
                default: "not a regular file"
                }
                return ("beacon: \(path) is \(what); a backup replaces only a regular file (or give - for standard output)", ExitCode32.cannotCreate)
            }
            return force ? nil : ("beacon: \(path) exists; use --force to replace it", ExitCode32.usage)
        }

        /// Writes all of `data` (retrying short writes and EINTR); false on an error, in `errno`.
        private static func writeAll(_ data: Data, to fd: Int32) -> Bool {
            data.withUnsafeBytes { buffer in
                var offset = 0
                while offset < buffer.count {
                    let written = write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                    if written < 0 && errno == EINTR { continue }
                    guard written > 0 else { return false }
                    offset += written
                }
                return true
            }
        }
    }

    struct Keygen: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a CURVE key pair for tcp endpoints.",
            discussion: """
                Writes NAME.key (both keys; mode 0600, keep it secret) and NAME.pub (the public key, \
                to hand out), and prints the public key. For beacond: curve_secret_key_file = NAME.key. \
                For a client: --key-file NAME.key, and `allow = key:PUBLIC ...` in beacond's configuration.
                """)
        @Argument(help: ArgumentHelp("Path and base name of the two files.", valueName: "name")) var name: String
        @Flag(name: .long, help: "Replace existing files.") var force = false
        func run() throws {
            guard ZMQCurveKeyPair.isSupported else { die("beacon: this libzmq has no CURVE support", code: ExitCode32.daemonError) }
            let keys = try ZMQCurveKeyPair.generate()
            let files = [(name + ".key", CurveKeyFile(publicKey: keys.publicKey, secretKey: keys.secretKey), 0o600),
                         (name + ".pub", CurveKeyFile(publicKey: keys.publicKey, secretKey: nil), 0o644)]
            for (path, _, _) in files {
                var status = stat()
                guard lstat(path, &status) == 0 else { continue }
                guard force else { die("beacon: \(path) exists; use --force to replace it", code: ExitCode32.usage) }
                guard status.st_mode & S_IFMT == S_IFREG else {
                    die("beacon: \(path) is not a regular file; keygen replaces only regular files", code: ExitCode32.cannotCreate)
                }
            }
            // Both halves are written to new files first and only then put in place: an old pair is
            // replaced whole, or not at all.
            var written: [(temporary: String, path: String)] = []
            func removeWritten() { for file in written { unlink(file.temporary) } }
            for (path, file, mode) in files {
                // Created with its final mode, so that the secret is never readable by others.
                let temporary = path + ".new-\(getpid())"
                unlink(temporary)
                let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode_t(mode))
                guard fd >= 0 else {
                    let reason = String(cString: strerror(errno))
                    removeWritten()
                    die("beacon: cannot write \(path): \(reason)", code: ExitCode32.cannotCreate)
                }
                written.append((temporary, path))
                let bytes = Array(file.text.utf8)
                let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                let synced = fsync(fd) == 0
                guard close(fd) == 0, count == bytes.count, synced else {
                    removeWritten()
                    die("beacon: cannot write \(path)", code: ExitCode32.cannotCreate)
                }
            }
            // The old secret stays reachable until both renames are done, and is put back if the
            // second fails: the pair on disk always matches.
            let secret = written[0].path, kept = secret + ".old-\(getpid())"
            let hadSecret = link(secret, kept) == 0
            defer { unlink(kept) }
            for (index, file) in written.enumerated() where rename(file.temporary, file.path) != 0 {
                let reason = String(cString: strerror(errno))
                if index > 0 { _ = hadSecret ? rename(kept, secret) : unlink(secret) }
                removeWritten()
                die("beacon: cannot replace \(file.path): \(reason); the old files are unchanged", code: ExitCode32.cannotCreate)
            }
            writeLine(keys.publicKey)
        }
    }

    struct Ping: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask whether the daemon answers; with --wait, keep asking until it does.",
            discussion: """
                Prints the daemon's version, protocol, epoch and head revision. With --wait S, a \
                daemon that is starting (no socket yet, nobody listening, or no answer) is asked \
                again every 100 ms for up to S seconds: `beacond & beacon ping --wait 10` goes on \
                once the daemon serves. Exit code 69 when no daemon answered.
                """)
        @OptionGroup var connection: Connection
        @Option(name: .long, parsing: .unconditional, help: ArgumentHelp("Seconds to keep asking until the daemon answers (0: ask once).", valueName: "s"))
        var wait: Double = 0

        func validate() throws {
            guard wait >= 0, wait <= 86_400 else { throw ValidationError("--wait must be 0 to 86400 seconds") }
        }

        func run() throws {
            let deadline = Date().addingTimeInterval(wait)
            var reply: Beacon_V1_PingReply?
            while reply == nil && Date() < deadline {
                if let client = try? connection.writerClient() {
                    reply = try? client.ping(timeoutMilliseconds: 250)
                }
                if reply == nil { usleep(100_000) }
            }
            // Asked once more as every command asks: no daemon is one line and exit code 69.
            let ping = reply ?? connection.run { (client) throws(WireError) in try client.ping(timeoutMilliseconds: connection.timeout) }
            let object: [String: Any] = [
                "daemon_version": ping.daemonVersion, "protocol_version": ping.protocolVersion, "epoch": ping.epoch,
                "head_revision": ping.headRevision, "compacted_revision": ping.compactedRevision,
            ]
            connection.print(object, text: "beacond \(ping.daemonVersion) answers: protocol \(ping.protocolVersion), "
                + "epoch \(ping.epoch), head revision \(ping.headRevision)")
        }
    }

    struct Stats: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the daemon's revision, keys, connections, rates and journal size.")
        @OptionGroup var connection: Connection
        func run() throws {
            let stats = connection.run { (client) throws(WireError) in try client.stats(timeoutMilliseconds: connection.timeout) }
            var object: [String: Any] = [
                "epoch": stats.epoch, "head_revision": stats.headRevision, "compacted_revision": stats.compactedRevision,
                "keys": stats.keys, "tombstones": stats.tombstones, "journal_bytes": stats.journalBytes,
                "writes": stats.writes, "commits": stats.commits, "rejected": stats.rejected, "published": stats.published,
                "requests": stats.requests, "tracked_prefixes": stats.trackedPrefixes, "uptime_ms": stats.uptimeMs,
                "read_only": stats.readOnly,
                "request_connections": stats.requestConnections, "subscriber_connections": stats.subscriberConnections,
                "writes_per_second": stats.writesPerSecond.rounded(), "publications_per_second": stats.publicationsPerSecond.rounded(),
                "connections_refused": stats.connectionsRefused, "access_denied": stats.accessDenied,
                "rate_limited": stats.rateLimited, "quota_exceeded": stats.quotaExceeded,
                "subscriptions_refused": stats.subscriptionsRefused, "batches": stats.batches,
                "connections_shed": stats.connectionsShed, "sessions": stats.sessions, "leases_refused": stats.leasesRefused,
                "reply_bytes_kept": stats.replyBytesKept, "slow_readers_closed": stats.slowReadersClosed,
                "publish_bytes_unsent": stats.publishBytesUnsent, "slow_subscribers_closed": stats.slowSubscribersClosed,
            ]
            if stats.hasUpstream {
                // A relay: where its upstream is, whether it is heard from, and how far behind this daemon is.
                let upstream = stats.upstream
                object["upstream"] = upstream.endpoint
                object["upstream_reachable"] = upstream.reachable
                object["upstream_head_revision"] = upstream.headRevision
                object["upstream_lag_revisions"] = upstream.headRevision > stats.headRevision ? upstream.headRevision - stats.headRevision : 0
                object["upstream_last_heard_ms"] = upstream.lastHeardMs
                object["writes_forwarded"] = stats.writesForwarded
            }
            connection.print(object, text: object.keys.sorted().map { "\($0): \(object[$0]!)" }.joined(separator: "\n"))
        }
    }
}

extension Optional<String> {
    /// The string, unless it is empty: an environment variable set to nothing counts as unset.
    fileprivate var nonEmpty: String? { self.flatMap { $0.isEmpty ? nil : $0 } }
}
