import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

extension Beacon {
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
            guard ZMQCurveKeyPair.isSupported else { throw CommandFailure("beacon: this libzmq has no CURVE support", code: ExitCode32.daemonError) }
            let keys = try ZMQCurveKeyPair.generate()
            let files = [(name + ".key", CurveKeyFile(publicKey: keys.publicKey, secretKey: keys.secretKey), 0o600),
                         (name + ".pub", CurveKeyFile(publicKey: keys.publicKey, secretKey: nil), 0o644)]
            for (path, _, _) in files {
                var status = stat()
                guard lstat(path, &status) == 0 else { continue }
                guard force else { throw CommandFailure("beacon: \(path) exists; use --force to replace it", code: ExitCode32.usage) }
                guard status.st_mode & S_IFMT == S_IFREG else {
                    throw CommandFailure("beacon: \(path) is not a regular file; keygen replaces only regular files", code: ExitCode32.cannotCreate)
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
                    throw CommandFailure("beacon: cannot write \(path): \(reason)", code: ExitCode32.cannotCreate)
                }
                written.append((temporary, path))
                let bytes = Array(file.text.utf8)
                let count = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                let synced = fsync(fd) == 0
                guard close(fd) == 0, count == bytes.count, synced else {
                    removeWritten()
                    throw CommandFailure("beacon: cannot write \(path)", code: ExitCode32.cannotCreate)
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
                throw CommandFailure("beacon: cannot replace \(file.path): \(reason); the old files are unchanged", code: ExitCode32.cannotCreate)
            }
            try writeLine(keys.publicKey)
        }
    }
}
