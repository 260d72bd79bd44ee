import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
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
                    throw CommandFailure("beacon: refusing to write a journal copy to a terminal; redirect standard output or give a file", code: ExitCode32.usage)
                }
            } else {
                if let problem = replacementProblem(file) { throw CommandFailure(problem.message, code: problem.code) }
                // Written nowhere until the daemon has made the copy: a refusal leaves nothing.
                // Writable beside FILE? Learnt now, before the daemon copies a whole journal.
                let directory = (file as NSString).deletingLastPathComponent
                guard access(directory.isEmpty ? "." : directory, W_OK) == 0 else {
                    throw CommandFailure("beacon: cannot write \(partial): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate)
                }
            }
            /// FILE.partial once the first chunk came (standard output: its descriptor at once).
            var fd: Int32 = toStandardOutput ? STDOUT_FILENO : -1
            /// Leaves nothing behind and ends the command.
            func abandon(_ message: String, code: Int32) -> CommandFailure {
                if !toStandardOutput && fd >= 0 { close(fd); unlink(partial) }
                return CommandFailure(message, code: code)
            }
            var token = Data()
            var offset: UInt64 = 0
            var last = Beacon_V1_BackupReply()
            while true {
                let request = Beacon_V1_Backup.with { $0.token = token; $0.offset = offset }
                // The first reply comes once the daemon has made the copy, in steps between other
                // requests: for a large journal on a busy daemon that takes minutes.
                let wait = token.isEmpty ? 600_000 : 60_000
                let reply = try connection.run { (client) throws(WireError) in
                    try client.call(.backup(request), timeoutMilliseconds: max(connection.timeout, wait))
                }
                guard case .backup(let chunk) = reply.result, chunk.offset == offset else {
                    throw abandon("beacon: unexpected reply to a backup request", code: ExitCode32.daemonError)
                }
                if fd < 0 {
                    // Stopped from now on (SIGINT, SIGTERM, SIGHUP), the command removes what it
                    // wrote; its connection closes, and the daemon lets go of the copy at once.
                    BackupInterruption.removeOnSignal(partial)
                    unlink(partial)
                    fd = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
                    guard fd >= 0 else { throw CommandFailure("beacon: cannot write \(partial): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate) }
                }
                if !chunk.data.isEmpty && !Self.writeAll(chunk.data, to: fd) {
                    let reason = String(cString: strerror(errno))
                    if toStandardOutput {
                        throw abandon("beacon: cannot write to standard output: \(reason)",
                                code: errno == EPIPE ? ExitCode32.outputClosed : ExitCode32.cannotCreate)
                    }
                    throw abandon("beacon: cannot write \(partial): \(reason)", code: ExitCode32.cannotCreate)
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
            if let problem = replacementProblem(file) { throw abandon(problem.message, code: problem.code) }
            guard fsync(fd) == 0, close(fd) == 0, rename(partial, file) == 0 else {
                unlink(partial)
                throw CommandFailure("beacon: cannot finish \(file): \(String(cString: strerror(errno)))", code: ExitCode32.cannotCreate)
            }
            BackupInterruption.finished()
            try connection.print(summary, text: text)
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
}
