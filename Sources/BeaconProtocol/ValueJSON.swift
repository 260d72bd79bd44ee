import Foundation

/// JSON text for signal values that keeps every type, so that what `beacon` prints reads back
/// as the same value:
///
/// - an integer literal (no fraction, no exponent) is an `int`, and must fit in 64 bits;
/// - a number with a fraction or an exponent is a `double`, and a double is always printed
///   with one (`1.0`, `1e+20`); NaN and the infinities are `{"$double": "NaN"}`,
///   `{"$double": "Infinity"}` and `{"$double": "-Infinity"}`;
/// - bytes are `{"$bytes": "<base64>"}`;
/// - a map whose only key is `$bytes`, `$double` or `$map` is wrapped as `{"$map": {…}}`.
///
/// Map keys are printed sorted; strings escape only what JSON requires.
public enum ValueJSON {
    /// Why text is not a value.
    public struct ParseError: Error, CustomStringConvertible, Sendable {
        /// What is wrong, and where (a byte offset).
        public let message: String
        /// The text is a JSON number, too large for its type: an error, never a string.
        public var isOutOfRange = false
        public var description: String { message }
    }

    /// Nesting deeper than this is refused (the daemon refuses deeper values too).
    public static let maximumDepth = 64

    /// The value `text` denotes.
    ///
    /// - Throws: `ParseError` when `text` is not one JSON value, or a number does not fit.
    public static func parse(_ text: String) throws(ParseError) -> Beacon_V1_Value {
        var parser = Parser(bytes: Array(text.utf8))
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        if parser.index != parser.bytes.count {
            throw parser.error("unexpected text after the value")
        }
        return value
    }

    /// Reads text given where a value is expected, as a shell user means it: JSON when it is
    /// JSON, else the text itself as a string. Text that is meant as JSON — it starts with `{`,
    /// `[` or `"` — but does not parse, and a number too large for its type, are errors rather
    /// than strings.
    ///
    /// - Throws: `ParseError` for those.
    public static func parseLenient(_ text: String) throws(ParseError) -> Beacon_V1_Value {
        do {
            return try parse(text)
        } catch {
            let first = text.utf8.first { $0 != 0x20 && $0 != 0x09 && $0 != 0x0A && $0 != 0x0D }
            if error.isOutOfRange || first.map({ [UInt8(ascii: "{"), UInt8(ascii: "["), UInt8(ascii: "\"")].contains($0) }) == true {
                throw error
            }
            return Beacon_V1_Value.with { $0.stringValue = text }
        }
    }

    /// Compact JSON text for `value`.
    public static func text(_ value: Beacon_V1_Value) -> String {
        var output = ""
        write(value, to: &output)
        return output
    }

    /// Appends the JSON text of `value` to `output`.
    public static func write(_ value: Beacon_V1_Value, to output: inout String) {
        switch value.kind {
        case nil, .nullValue:
            output += "null"
        case .boolValue(let bool):
            output += bool ? "true" : "false"
        case .intValue(let int):
            output += String(int)
        case .doubleValue(let double):
            if double.isNaN {
                output += #"{"$double":"NaN"}"#
            } else if double.isInfinite {
                output += double < 0 ? #"{"$double":"-Infinity"}"# : #"{"$double":"Infinity"}"#
            } else {
                // Swift's shortest round-trip form always has a "." or an exponent.
                output += String(double)
            }
        case .stringValue(let string):
            writeString(string, to: &output)
        case .bytesValue(let bytes):
            output += #"{"$bytes":""#
            output += bytes.base64EncodedString()
            output += #""}"#
        case .listValue(let list):
            output += "["
            for (index, item) in list.items.enumerated() {
                if index > 0 { output += "," }
                write(item, to: &output)
            }
            output += "]"
        case .mapValue(let map):
            let wrapped = map.entries.count == 1 && reservedKeys.contains(map.entries.keys.first!)
            if wrapped { output += #"{"$map":"# }
            output += "{"
            for (index, key) in map.entries.keys.sorted().enumerated() {
                if index > 0 { output += "," }
                writeString(key, to: &output)
                output += ":"
                write(map.entries[key]!, to: &output)
            }
            output += "}"
            if wrapped { output += "}" }
        }
    }

    /// Appends `string` as a JSON string literal.
    public static func writeString(_ string: String, to output: inout String) {
        output += "\""
        // Most strings (keys, names) need no escape: appended whole.
        if !string.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
            output += string
            output += "\""
            return
        }
        for scalar in string.unicodeScalars {
            switch scalar {
            case "\"": output += "\\\""
            case "\\": output += "\\\\"
            case "\n": output += "\\n"
            case "\r": output += "\\r"
            case "\t": output += "\\t"
            case "\u{08}": output += "\\b"
            case "\u{0C}": output += "\\f"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                output += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default:
                output.unicodeScalars.append(scalar)
            }
        }
        output += "\""
    }

    static let reservedKeys: Set<String> = ["$bytes", "$double", "$map"]

    private struct Parser {
        let bytes: [UInt8]
        var index = 0

        func error(_ message: String) -> ParseError {
            ParseError(message: "\(message) at byte \(index)")
        }

        mutating func skipSpace() {
            while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) {
                index += 1
            }
        }

        mutating func expect(_ literal: String) throws(ParseError) {
            let expected = Array(literal.utf8)
            guard bytes.count - index >= expected.count, Array(bytes[index..<index + expected.count]) == expected else {
                throw error("expected \(literal)")
            }
            index += expected.count
        }

        mutating func value(depth: Int) throws(ParseError) -> Beacon_V1_Value {
            guard depth < ValueJSON.maximumDepth else { throw error("nested deeper than \(ValueJSON.maximumDepth)") }
            guard index < bytes.count else { throw error("unexpected end of text") }
            var result = Beacon_V1_Value()
            switch bytes[index] {
            case UInt8(ascii: "n"):
                try expect("null")
                result.nullValue = .nullValue
            case UInt8(ascii: "t"):
                try expect("true")
                result.boolValue = true
            case UInt8(ascii: "f"):
                try expect("false")
                result.boolValue = false
            case UInt8(ascii: "\""):
                result.stringValue = try string()
            case UInt8(ascii: "["):
                index += 1
                var list = Beacon_V1_ListValue()
                skipSpace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                    index += 1
                } else {
                    while true {
                        skipSpace()
                        list.items.append(try value(depth: depth + 1))
                        skipSpace()
                        guard index < bytes.count else { throw error("unterminated list") }
                        let separator = bytes[index]
                        index += 1
                        if separator == UInt8(ascii: "]") { break }
                        guard separator == UInt8(ascii: ",") else { index -= 1; throw error("expected , or ]") }
                    }
                }
                result.listValue = list
            case UInt8(ascii: "{"):
                result = try object(depth: depth, literal: false)
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                result = try number()
            default:
                throw error("unexpected character")
            }
            return result
        }

        /// An object: a map, or with `literal: false` one of the reserved forms. The value of a
        /// `$map` key is read literally, so that it can hold a reserved key itself.
        mutating func object(depth: Int, literal: Bool) throws(ParseError) -> Beacon_V1_Value {
            let start = index
            index += 1
            var entries: [String: Beacon_V1_Value] = [:]
            skipSpace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
            } else {
                while true {
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key string") }
                    let key = try string()
                    skipSpace()
                    guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected :") }
                    index += 1
                    skipSpace()
                    if key == "$map", !literal, index < bytes.count, bytes[index] == UInt8(ascii: "{") {
                        guard depth + 1 < ValueJSON.maximumDepth else { throw error("nested deeper than \(ValueJSON.maximumDepth)") }
                        entries[key] = try object(depth: depth + 1, literal: true)
                    } else {
                        entries[key] = try value(depth: depth + 1)
                    }
                    skipSpace()
                    guard index < bytes.count else { throw error("unterminated object") }
                    let separator = bytes[index]
                    index += 1
                    if separator == UInt8(ascii: "}") { break }
                    guard separator == UInt8(ascii: ",") else { index -= 1; throw error("expected , or }") }
                }
            }
            var result = Beacon_V1_Value()
            if !literal, entries.count == 1, let (key, inner) = entries.first, ValueJSON.reservedKeys.contains(key) {
                switch (key, inner.kind) {
                case ("$bytes", .stringValue(let base64)?):
                    guard let data = Data(base64Encoded: base64) else {
                        index = start
                        throw error("$bytes holds no valid base64")
                    }
                    result.bytesValue = data
                case ("$double", .stringValue(let name)?):
                    switch name {
                    case "NaN": result.doubleValue = .nan
                    case "Infinity": result.doubleValue = .infinity
                    case "-Infinity": result.doubleValue = -.infinity
                    default:
                        index = start
                        throw error("$double is NaN, Infinity or -Infinity")
                    }
                case ("$map", .mapValue(let map)?):
                    result.mapValue = map
                default:
                    index = start
                    throw error("\(key) needs a \(key == "$map" ? "map" : "string")")
                }
                return result
            }
            result.mapValue = Beacon_V1_MapValue.with { $0.entries = entries }
            return result
        }

        mutating func number() throws(ParseError) -> Beacon_V1_Value {
            let start = index
            var isInteger = true
            if bytes[index] == UInt8(ascii: "-") { index += 1 }
            func digits(_ parser: inout Parser) -> Int {
                let first = parser.index
                while parser.index < parser.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(parser.bytes[parser.index]) {
                    parser.index += 1
                }
                return parser.index - first
            }
            let integerDigits = digits(&self)
            guard integerDigits > 0 else { throw error("expected a digit") }
            if integerDigits > 1 && bytes[index - integerDigits] == UInt8(ascii: "0") {
                index -= integerDigits
                throw error("a number cannot start with 0")
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                guard digits(&self) > 0 else { throw error("expected a digit after .") }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw error("expected a digit in the exponent") }
            }
            let literal = String(decoding: bytes[start..<index], as: UTF8.self)
            var result = Beacon_V1_Value()
            if isInteger {
                guard let int = Int64(literal) else {
                    index = start
                    var problem = error("the integer \(literal) does not fit in 64 bits (write \(literal).0 for a double, or store it as a string)")
                    problem.isOutOfRange = true
                    throw problem
                }
                result.intValue = int
            } else {
                guard let double = Double(literal), double.isFinite else {
                    index = start
                    var problem = error("the number \(literal) is out of range")
                    problem.isOutOfRange = true
                    throw problem
                }
                result.doubleValue = double
            }
            return result
        }

        mutating func string() throws(ParseError) -> String {
            index += 1  // the opening quote
            var scalars = String.UnicodeScalarView()
            var runStart = index
            func flushRun(_ parser: Parser, into scalars: inout String.UnicodeScalarView) {
                scalars.append(contentsOf: String(decoding: parser.bytes[runStart..<parser.index], as: UTF8.self).unicodeScalars)
            }
            while true {
                guard index < bytes.count else { throw error("unterminated string") }
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    flushRun(self, into: &scalars)
                    index += 1
                    return String(scalars)
                }
                if byte < 0x20 {
                    throw error("a control character in a string (escape it)")
                }
                if byte != UInt8(ascii: "\\") {
                    index += 1
                    continue
                }
                flushRun(self, into: &scalars)
                index += 1
                guard index < bytes.count else { throw error("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("a lone surrogate in \\u escapes")
                        }
                        index += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("a lone surrogate in \\u escapes") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("a lone surrogate in \\u escapes") }
                    scalars.append(scalar)
                default:
                    throw error("unknown escape \\\(Character(Unicode.Scalar(escape)))")
                }
                runStart = index
            }
        }

        mutating func hex4() throws(ParseError) -> UInt32 {
            guard bytes.count - index >= 4,
                  let code = UInt32(String(decoding: bytes[index..<index + 4], as: UTF8.self), radix: 16) else {
                throw error("expected four hex digits after \\u")
            }
            index += 4
            return code
        }
    }
}
