import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

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
/// the command (exit code 74) instead of a SIGPIPE.
func writeLine(_ line: String) throws(CommandFailure) {
    if !writeAll(line + "\n", to: STDOUT_FILENO) {
        throw CommandFailure("beacon: output closed (\(String(cString: strerror(errno))))", code: ExitCode32.outputClosed)
    }
}

/// Writes `text` (whole lines) to standard output and empties it; fails like ``writeLine(_:)``.
func writeText(_ text: inout String) throws(CommandFailure) {
    guard !text.isEmpty else { return }
    if !writeAll(text, to: STDOUT_FILENO) {
        throw CommandFailure("beacon: output closed (\(String(cString: strerror(errno))))", code: ExitCode32.outputClosed)
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

/// What ends a command early: one line on standard error and the documented exit code
/// (``ExitCode32``), printed by `Beacon.main()`.
struct CommandFailure: Error {
    let message: String
    let code: Int32

    init(_ message: String, code: Int32) {
        self.message = message
        self.code = code
    }
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

/// Lists the keys under `prefix` and prints them: `KEY = VALUE` (aligned on a terminal), or the
/// values alone.
func printKeys(under prefix: String, connection: Connection, valuesOnly: Bool = false, consistent: Bool = false) throws {
    if consistent { try connection.requireConsistentReads() }
    let reply = try connection.run { (client) throws(WireError) in
        try client.call(.list(.with { $0.prefix = prefix; $0.consistent = consistent }), timeoutMilliseconds: connection.timeout)
    }
    guard case .list(let list) = reply.result else { throw CommandFailure("beacon: unexpected reply", code: ExitCode32.daemonError) }
    let width = alignedKeyWidth(list.kvs)
    for kv in list.kvs {
        try connection.print(keyValueObject(kv), text: valuesOnly ? kv.value.jsonText : keyValueText(kv, keyWidth: width))
    }
}
