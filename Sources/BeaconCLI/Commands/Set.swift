import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

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
                    throw CommandFailure("beacon: standard input is longer than \(4 * WireLimits.maxValueBytes) bytes; a value is at most \(WireLimits.maxValueBytes) bytes",
                        code: ExitCode32.invalidInput)
                }
                raw = read
            } else {
                raw = Array(value.utf8)
            }
            guard var text = String(validating: raw, as: UTF8.self) ?? (type == "bytes" ? "" : nil) else {
                throw CommandFailure("beacon: standard input is not valid UTF-8; text values are UTF-8 (raw bytes: --type bytes)",
                    code: ExitCode32.invalidInput)
            }
            if fromInput && type != "string" && text.hasSuffix("\n") { text.removeLast() }
            let parsed: Beacon_V1_Value?
            switch type {
            case nil:
                do {
                    parsed = try ValueJSON.parseLenient(text)
                } catch {
                    throw CommandFailure("beacon: '\(text)' is not valid JSON: \(error) (--type string stores the text as it is)",
                        code: ExitCode32.invalidInput)
                }
            case "json":
                do {
                    parsed = try ValueJSON.parse(text)
                } catch {
                    throw CommandFailure("beacon: '\(text)' is not valid JSON: \(error)", code: ExitCode32.invalidInput)
                }
            case "string": parsed = .with { $0.stringValue = text }
            case "int": parsed = Int64(text).map { v in .with { $0.intValue = v } }
            case "double": parsed = Double(text).flatMap { v in v.isFinite ? .with { $0.doubleValue = v } : nil }
            case "bool": parsed = Bool(text).map { v in .with { $0.boolValue = v } }
            case "null": parsed = text == "null" || text.isEmpty ? .with { $0.nullValue = .nullValue } : nil
            case "bytes":
                let bytes = fromInput ? Data(raw) : Data(base64Encoded: text)
                parsed = bytes.map { v in .with { $0.bytesValue = v } }
            default: throw CommandFailure("beacon: unknown --type '\(type!)' (json, string, int, double, bool, null, bytes)", code: ExitCode32.usage)
            }
            guard let parsed else { throw CommandFailure("beacon: '\(text)' is not a valid \(type ?? "value")", code: ExitCode32.invalidInput) }
            let reply = try connection.write(.put(.with {
                $0.key = key
                $0.value = parsed
                if let ifVersion { $0.ifVersion = ifVersion }
                $0.createOnly = create
                $0.ttlMs = ttl
            }))
            try connection.print(["key": key, "revision": reply.revision, "version": reply.versions.first ?? 0],
                             text: "\(key) = \(parsed.jsonText) at revision \(reply.revision) (version \(reply.versions.first ?? 0))")
        }
    }
}
