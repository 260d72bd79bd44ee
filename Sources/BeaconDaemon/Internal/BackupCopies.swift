import BeaconJournal
import BeaconProtocol
import Foundation

/// The journal copies being read by `Backup` requests: files in the state directory, each named
/// by a random token, deleted once read to the end, a minute after their last request, or when
/// the daemon stops. Owned by the loop thread.
struct BackupCopies {
    /// How long a copy waits for its next request.
    static let idleLimit: UInt64 = 60_000
    /// The most data one reply carries.
    static let chunkSize = 1 << 20
    /// One copy at a time: making one holds the loop while SQLite copies the journal.
    static let maxCopies = 1
    /// Copies are named `backup-<token>.sqlite` in the state directory.
    static let filePrefix = "backup-"

    struct Copy {
        let path: String
        let size: UInt64
        let revision: UInt64
        let epoch: UInt64
        var lastUsed: MonotonicTime
    }

    let directory: String
    private(set) var copies: [[UInt8]: Copy] = [:]

    init(directory: String) {
        self.directory = directory
    }

    /// Removes copies a stopped daemon left behind.
    func removeLeftovers() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.hasPrefix(Self.filePrefix) && name.hasSuffix(".sqlite") {
            try? FileManager.default.removeItem(atPath: directory + "/" + name)
        }
    }

    /// Makes a new copy of `journal` (which must be idle); returns its token.
    mutating func make(from journal: Journal, revision: UInt64, now: MonotonicTime) throws(Refusal) -> [UInt8] {
        expire(now: now)
        guard copies.count < Self.maxCopies else {
            throw Refusal(.quotaExceeded, "a backup is being read already; retry once it is done (or a minute after its last request)")
        }
        let token = (0..<16).map { _ in UInt8.random(in: 0 ... .max) }
        let path = directory + "/" + Self.filePrefix + token.map { String(format: "%02x", $0) }.joined() + ".sqlite"
        let epoch: UInt64
        do {
            epoch = try journal.backup(to: path)
        } catch {
            throw Refusal(.internal, "cannot copy the journal: \(error)")
        }
        var info = stat()
        let size = stat(path, &info) == 0 ? UInt64(info.st_size) : 0
        copies[token] = Copy(path: path, size: size, revision: revision, epoch: epoch, lastUsed: now)
        return token
    }

    /// The chunk of copy `token` at `offset`; a copy read to its end is deleted.
    mutating func chunk(_ token: [UInt8], at offset: UInt64, now: MonotonicTime) throws(Refusal) -> Beacon_V1_BackupReply {
        expire(now: now)
        guard var copy = copies[token] else {
            throw Refusal(.notFound, "no backup under this token (done, or idle for more than \(Self.idleLimit / 1000) s); start again")
        }
        guard offset <= copy.size else {
            throw Refusal(.invalidArgument, "offset \(offset) is past the backup's size \(copy.size)")
        }
        let length = Int(min(UInt64(Self.chunkSize), copy.size - offset))
        var data = Data(count: length)
        let fd = open(copy.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Refusal(.internal, "cannot read the backup: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var read = 0
        while read < length {
            let count = data.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + read, length - read, off_t(offset) + off_t(read)) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { throw Refusal(.internal, "cannot read the backup: \(String(cString: strerror(errno)))") }
            read += count
        }
        let done = offset + UInt64(length) == copy.size
        if done {
            try? FileManager.default.removeItem(atPath: copy.path)
            copies[token] = nil
        } else {
            copy.lastUsed = now
            copies[token] = copy
        }
        return .with {
            $0.token = Data(token)
            $0.offset = offset
            $0.data = data
            $0.size = copy.size
            $0.revision = copy.revision
            $0.epoch = copy.epoch
            $0.done = done
        }
    }

    /// Deletes copies idle for longer than the limit.
    mutating func expire(now: MonotonicTime) {
        for (token, copy) in copies where copy.lastUsed.milliseconds(until: now) > Self.idleLimit {
            try? FileManager.default.removeItem(atPath: copy.path)
            copies[token] = nil
        }
    }

    /// Deletes every copy (the daemon stops).
    mutating func removeAll() {
        for copy in copies.values {
            try? FileManager.default.removeItem(atPath: copy.path)
        }
        copies.removeAll()
    }
}
