import BeaconJournal
import BeaconProtocol
import Foundation

/// The journal copies of `Backup` requests: files in the state directory, each named by a random
/// token. A copy is made in steps between the loop's other work (``step(pages:revision:now:)``),
/// then read in chunks; it is deleted once read to the end, a minute after its last request, when
/// the connection that last asked for it closes (``release(owner:)``: a stopped `beacon backup`
/// blocks nobody), or when the daemon stops. Owned by the loop thread, which owns the journal.
struct BackupCopies {
    /// How long a copy waits for its next request.
    static let idleLimit: UInt64 = 60_000
    /// The most data one reply carries.
    static let chunkSize = 1 << 20
    /// One copy at a time, being made or being read.
    static let maxCopies = 1
    /// Copies are named `backup-<token>.sqlite` in the state directory.
    static let filePrefix = "backup-"

    struct Copy {
        let path: String
        let size: UInt64
        let revision: UInt64
        let epoch: UInt64
        var lastUsed: MonotonicTime
        /// The connection that last asked for a chunk.
        var owner: RoutingID
    }

    /// A copy being made, and the request that asked for it.
    struct Making {
        let token: [UInt8]
        let backup: JournalBackup
        /// Where the first chunk's reply goes: the place its connection's replies keep for it.
        let ticket: HoldTicket
        let requestID: UInt64
        /// The connection that asked for it.
        let owner: RoutingID
    }

    /// What a step of the copy being made came to.
    enum Progress {
        case copying
        /// The copy is made: answer `making`'s request with its first chunk.
        case made(Making)
        /// The copy failed and is gone: answer `making`'s request with the refusal.
        case failed(Making, Refusal)
    }

    let directory: String
    private(set) var copies: [[UInt8]: Copy] = [:]
    private(set) var making: Making?

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

    /// Starts a new copy of `journal`, to be made by ``step(pages:revision:now:)``; the request
    /// `requestID` is answered through `ticket` once it is made.
    mutating func begin(from journal: any JournalStore, now: MonotonicTime, ticket: () -> HoldTicket, requestID: UInt64,
                        owner: RoutingID) throws(Refusal) {
        expire(now: now)
        guard copies.count + (making == nil ? 0 : 1) < Self.maxCopies else {
            throw Refusal(.quotaExceeded, "a backup is being made or read already; retry once it is done (or a minute after its last request)")
        }
        let token = (0..<16).map { _ in UInt8.random(in: 0 ... .max) }
        let path = directory + "/" + Self.filePrefix + token.map { String(format: "%02x", $0) }.joined() + ".sqlite"
        let backup: JournalBackup
        do {
            backup = try journal.beginBackup(to: path)
        } catch {
            throw Refusal(.internal, "cannot copy the journal: \(error)")
        }
        making = Making(token: token, backup: backup, ticket: ticket(), requestID: requestID, owner: owner)
    }

    /// Copies up to `pages` more pages of the copy being made. The journal is idle (no commit in
    /// flight) and its head is `revision`: a copy finished now holds exactly the revisions
    /// through it.
    mutating func step(pages: Int, revision: UInt64, now: MonotonicTime) -> Progress {
        guard let current = making else { return .copying }
        do {
            guard try current.backup.step(pages: pages) else { return .copying }
        } catch {
            making = nil
            return .failed(current, Refusal(.internal, "cannot copy the journal: \(error)"))
        }
        making = nil
        var info = stat()
        let size = stat(current.backup.path, &info) == 0 ? UInt64(info.st_size) : 0
        copies[current.token] = Copy(path: current.backup.path, size: size, revision: revision, epoch: current.backup.epoch,
                                     lastUsed: now, owner: current.owner)
        return .made(current)
    }

    /// The chunk of copy `token` at `offset`; a copy read to its end is deleted.
    /// - Parameter owner: the connection asking; the copy is its from now on (`nil`: unchanged).
    mutating func chunk(_ token: [UInt8], at offset: UInt64, now: MonotonicTime, owner: RoutingID? = nil) throws(Refusal) -> Beacon_V1_BackupReply {
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
            if let owner { copy.owner = owner }
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

    /// Deletes the copies connection `owner` asked for last, and stops the one it is having made
    /// (its connection closed). Returns that one, whose request is to be answered or dropped.
    mutating func release(owner: RoutingID) -> Making? {
        for (token, copy) in copies where copy.owner == owner {
            try? FileManager.default.removeItem(atPath: copy.path)
            copies[token] = nil
        }
        guard let stopped = making, stopped.owner == owner else { return nil }
        stopped.backup.cancel()
        making = nil
        return stopped
    }

    /// Deletes every copy, and stops the one being made (the daemon stops; its journal is still
    /// open). Returns the request the copy being made was for, to be answered or dropped.
    @discardableResult
    mutating func removeAll() -> Making? {
        let stopped = making
        making?.backup.cancel()
        making = nil
        for copy in copies.values {
            try? FileManager.default.removeItem(atPath: copy.path)
        }
        copies.removeAll()
        return stopped
    }
}
