import Foundation

/// The text of a CURVE key file as `beacon keygen` writes it: `public = KEY` and, in a secret
/// key file, `secret = KEY` (40 characters of Z85 each), with `#` comments.
public struct CurveKeyFile: Sendable, Equatable {
    /// The public key.
    public var publicKey: String?
    /// The secret key; present only in a secret key file.
    public var secretKey: String?

    public init(publicKey: String?, secretKey: String?) {
        self.publicKey = publicKey
        self.secretKey = secretKey
    }

    /// Parses a key file's text.
    /// - Throws: a reason naming the line when it is not a key file.
    public init(parsing text: String) throws(CurveKeyFileError) {
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let trimmed = ConfigurationLine.strippingComment(String(raw))
            if trimmed.isEmpty { continue }
            let parts = trimmed.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, parts[1].utf8.count == 40 else {
                throw CurveKeyFileError(line: index + 1, reason: "expected 'public = KEY' or 'secret = KEY' with a 40-character Z85 key")
            }
            switch parts[0] {
            case "public": publicKey = parts[1]
            case "secret": secretKey = parts[1]
            default: throw CurveKeyFileError(line: index + 1, reason: "unknown entry '\(parts[0])'")
            }
        }
        if publicKey == nil && secretKey == nil {
            throw CurveKeyFileError(line: 0, reason: "no key in the file")
        }
    }

    /// Reads and parses the key file at `path`.
    public init(path: String) throws(CurveKeyFileError) {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw CurveKeyFileError(line: 0, reason: "cannot read \(path): \(error.localizedDescription)")
        }
        try self.init(parsing: text)
    }

    /// The file's text: a comment, then the keys present.
    public var text: String {
        var lines = [secretKey == nil
            ? "# Beacon CURVE public key: give it to the peers that must know this identity."
            : "# Beacon CURVE key pair: keep this file secret (mode 0600)."]
        if let publicKey { lines.append("public = \(publicKey)") }
        if let secretKey { lines.append("secret = \(secretKey)") }
        return lines.joined(separator: "\n") + "\n"
    }
}

/// The comment rule of Beacon's `name = value` files.
public enum ConfigurationLine {
    /// The line without its comment, trimmed. A comment starts at a `#` at the start of the line
    /// or after white space, but not as the first character of a value (`name = #…`): Z85 keys
    /// contain `#`, may start with one, and never hold a space.
    public static func strippingComment(_ line: String) -> String {
        var previous: Character = " "
        var lastOther: Character?  // the last character before `index` that is not white space
        var end = line.endIndex
        for index in line.indices {
            if line[index] == "#" && (previous == " " || previous == "\t") && lastOther != "=" {
                end = index
                break
            }
            previous = line[index]
            if previous != " " && previous != "\t" { lastOther = previous }
        }
        return line[..<end].trimmingCharacters(in: .whitespaces)
    }
}

/// Why a key file could not be used.
public struct CurveKeyFileError: Error, Sendable, CustomStringConvertible {
    /// The line at fault (0: the file as a whole).
    public var line: Int
    public var reason: String
    public var description: String { line == 0 ? reason : "line \(line): \(reason)" }
}
