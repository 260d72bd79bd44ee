// beacon-client-probe: a Beacon client process for the end-to-end tests. It mirrors a prefix,
// streams its history and (with --pair) runs an effect over two keys, printing one line per
// event on stdout. Reading "dump" on stdin prints the mirror's state; end of input exits.
//
//   H <revision> <key> <json value, or - for a deletion>     one per history change
//   R <revision>                                             history resynced at a revision
//   E <a> <b>                                                one per effect run over --pair
//   S <json object of the mirror> <connection> <repairs> <resyncs> <bundles>   answer to "dump"
//   BOUND <revision>                                         --session-key written, bound to the session
//
// With --codable-write KEY it writes ``Sample/expected`` there through the library's Codable
// mapping, prints WROTE <revision> and exits; with --codable-read KEY it waits for the value
// there, decodes it as a ``Sample`` and exits 0 printing MATCH when it equals ``Sample/expected``
// (else 1, printing what it decoded or why not), so that another client's encoding can be
// checked against this library's.
import Beacon
import Foundation

/// Held while a line is written (``emit(_:)``); made first, before anything can print.
let emitLock = NSLock()

var arguments = CommandLine.arguments.dropFirst()
var runtimeDirectory = ""
var prefix = ""
var highWaterMark: Int32 = 1_000_000
var pair: (String, String)?
var sessionKey: String?
var receivesBundles = true
var codableWrite: String?
var codableRead: String?
while let argument = arguments.popFirst() {
    switch argument {
    case "--runtime-dir": runtimeDirectory = arguments.popFirst() ?? ""
    case "--prefix": prefix = arguments.popFirst() ?? ""
    case "--hwm": highWaterMark = Int32(arguments.popFirst() ?? "") ?? highWaterMark
    case "--pair": pair = (arguments.popFirst() ?? "", arguments.popFirst() ?? "")
    case "--session-key": sessionKey = arguments.popFirst()
    case "--no-bundles": receivesBundles = false
    case "--codable-write": codableWrite = arguments.popFirst()
    case "--codable-read": codableRead = arguments.popFirst()
    default: FileHandle.standardError.write("unknown argument \(argument)\n".data(using: .utf8)!); exit(64)
    }
}

var configuration = BeaconConfiguration(runtimeDirectory: runtimeDirectory)
configuration.receiveHighWaterMark = highWaterMark
configuration.receivesBundles = receivesBundles
configuration.requestTimeout = .milliseconds(500)
configuration.sessionTimeout = .seconds(1)
let client = try BeaconClient(configuration: configuration)

/// A value with every kind the Codable mapping has: a map (the struct), nested maps and lists,
/// ints, doubles, strings, booleans, bytes and an optional left out.
struct Sample: Codable, Equatable, Sendable {
    struct Inner: Codable, Equatable, Sendable {
        var level: Int
        var points: [Double]
    }
    var name: String
    var count: Int
    var ratio: Double
    var enabled: Bool
    var tags: [String]
    var limits: [String: Int]
    var blob: Data
    var note: String?
    var nested: Inner

    static let expected = Sample(name: "sensor-7 ✓", count: -42, ratio: 0.25, enabled: true, tags: ["a", "b"],
                                 limits: ["lo": 1, "hi": 9], blob: Data([0, 1, 254, 255]), note: nil,
                                 nested: Inner(level: 3, points: [1.5, -2.0]))
}

if let key = codableWrite {
    Task {
        let result = try await client.set(key, Sample.expected)
        emit("WROTE \(result.revision)")
        exit(0)
    }
    dispatchMain()
}
if let key = codableRead {
    let placeholder = Sample(name: "", count: 0, ratio: 0, enabled: false, tags: [], limits: [:], blob: Data(), note: "placeholder",
                             nested: .init(level: 0, points: []))
    let sample = try client.signal(key, as: Sample.self, default: placeholder)
    let deadline = Date().addingTimeInterval(10)
    func check() {
        if sample.isDeleted == false, sample.version > 0 {
            do {
                let decoded = try sample.get()
                emit(decoded == Sample.expected ? "MATCH" : "MISMATCH \(decoded)")
                exit(decoded == Sample.expected ? 0 : 1)
            } catch {
                emit("UNDECODABLE \(error)")
                exit(1)
            }
        }
        guard Date() < deadline else {
            emit("TIMEOUT")
            exit(1)
        }
        DispatchQueue.main.asyncAfter(deadline: .now() + .milliseconds(10)) { check() }
    }
    DispatchQueue.main.async { check() }
    dispatchMain()
}
let map = try client.mirror(prefix: prefix, as: Int.self)
var effects: [Effect] = []
if let (first, second) = pair {
    let a = try client.signal(first, as: Int.self, default: 0)
    let b = try client.signal(second, as: Int.self, default: 0)
    effects.append(effect { emit("E \(a.value) \(b.value)") })
}

if let sessionKey {
    Task {
        let result = try await client.set(sessionKey, 1, boundToSession: true)
        emit("BOUND \(result.revision)")
    }
}

let followedPrefix = prefix
Thread.detachNewThread {
    let stream = client.history(of: followedPrefix, from: 1)
    Task {
        for try await event in stream {
            switch event {
            case .change(let change):
                emit("H \(change.revision) \(change.key) \(change.kind == .set ? change.jsonValue : "-")")
            case .resynced(let revision, _):
                emit("R \(revision)")
            }
        }
    }
}

nonisolated(unsafe) let mirror = map
Thread.detachNewThread {
    while let line = readLine() {
        guard line == "dump" else { continue }
        DispatchQueue.main.async {
            let state = mirror.peek()
            let object = Dictionary(uniqueKeysWithValues: state.map { ($0.key, $0.value) })
            let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
            let statistics = client.statistics
            emit("S \(String(decoding: data, as: UTF8.self)) \(client.connection.peek()) \(statistics.repairs) \(statistics.resyncs) \(statistics.bundles)")
        }
    }
    exit(0)
}

dispatchMain()

/// Writes one line to standard output at once (no buffering: another process reads it live).
/// Lines come from several threads, and one longer than the pipe writes atomically (4,096
/// bytes: a `dump` of a few hundred keys) goes out in several writes when the reader lags: the
/// lock keeps other lines out of its middle.
func emit(_ line: String) {
    emitLock.withLock { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
}
