import ArgumentParser
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

/// Exit codes of `beacon` (also listed in `beacon --help`).
enum ExitCode32 {
    static let notFound: Int32 = 1
    static let conflict: Int32 = 3
    static let usage: Int32 = 64
    static let invalidInput: Int32 = 65
    static let unavailable: Int32 = 69
    static let daemonError: Int32 = 70
    static let cannotCreate: Int32 = 73
    static let outputClosed: Int32 = 74
    static let permissionDenied: Int32 = 77
}

@main
struct Beacon: ParsableCommand {
    /// A closed pipe is an error to report, not a signal to die of.
    static func main() {
        signal(SIGPIPE, SIG_IGN)
        // Swift makes every argument a string, replacing bytes that are not UTF-8: a key or value
        // would be stored other than it was given. Such an argument is refused instead.
        for index in 1..<Int(CommandLine.argc) {
            guard let argument = CommandLine.unsafeArgv[index], String(validatingCString: argument) == nil else { continue }
            warn("beacon: argument \(index) is not valid UTF-8; keys and text values are UTF-8 (raw bytes: --type bytes with base64, or with - from standard input)")
            Foundation.exit(ExitCode32.invalidInput)
        }
        do {
            var command = try parseAsRoot(Connection.hoistingOptions(Array(CommandLine.arguments.dropFirst())))
            try command.run()
        } catch let failure as CommandFailure {
            warn(failure.message)
            Foundation.exit(failure.code)
        } catch {
            exit(withError: error)
        }
    }

    static let configuration = CommandConfiguration(
        commandName: "beacon",
        abstract: "Read, write and watch Beacon signals from a shell.",
        discussion: """
            Finds the daemon like every Beacon client: --endpoint/--pub-endpoint (or \
            $BEACON_ENDPOINT/$BEACON_PUB_ENDPOINT), else --runtime-dir, else $BEACON_RUNTIME_DIR, \
            else the first of $XDG_RUNTIME_DIR/beacon (or /tmp/beacon-UID) and /run/beacon \
            (systemd) that holds the daemon's socket. With no socket there, a command fails at \
            once with exit code 69. Connection options and --json may also come before the \
            command: beacon --runtime-dir D get k.

            Exit codes: 0 ok; 1 key not found; 3 version conflict or key exists; 64 usage; \
            65 invalid key or value (for pub: some lines were refused); 69 daemon unreachable; \
            70 other daemon error; 74 output closed (a pipe closed mid-stream); 77 refused by the \
            daemon's access policy (connection or request).
            """,
        version: "0.1.0",
        subcommands: [Set.self, Get.self, Delete.self, List.self, Pub.self, Txn.self, Backup.self, Watch.self, History.self, Replay.self, Stats.self, Top.self, Ping.self, Bench.self, Keygen.self])
}
