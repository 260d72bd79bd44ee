#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Logging

/// A log handler for standard error connected to systemd's journal: each line starts with its
/// priority as `<N>` (sd-daemon(3)'s prefix, which journald turns into the entry's priority) and
/// carries no timestamp of its own, as the journal stamps every entry.
public struct JournalLogHandler: LogHandler {
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?

    public init() {}

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Whether standard error is the journal: `$JOURNAL_STREAM` names the device and inode of
    /// the stream systemd connected, and standard error is that stream (not redirected since).
    public static func standardErrorIsJournal(environment: [String: String]) -> Bool {
        guard let stream = environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(STDERR_FILENO, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }

    /// The syslog priority of a level.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// The line written for one event, without its newline.
    static func line(level: Logger.Level, message: String, metadata: Logger.Metadata) -> String {
        var text = "<\(priority(level))>\(message)"
        for key in metadata.keys.sorted() {
            text += " \(key)=\(metadata[key]!)"
        }
        // One entry per line: a newline inside the message would start a new entry.
        return text.replacingOccurrences(of: "\n", with: " ")
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() {
            merged.merge(provided) { $1 }
        }
        if let extra = event.metadata {
            merged.merge(extra) { $1 }
        }
        let bytes = Array((Self.line(level: event.level, message: event.message.description, metadata: merged) + "\n").utf8)
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 && errno == EINTR { continue }
            if written <= 0 { return }
            offset += written
        }
    }
}
