import Glibc

/// The partial file of a `backup` in progress, removed when a signal stops the command: what a
/// stopped backup wrote never stays behind. The signal handler may only call what is
/// async-signal-safe (`unlink`, `_exit`), so the path is kept as a C string set before the
/// handlers are installed.
enum BackupInterruption {
    /// The path to remove, or `nil`; written only before the handlers are installed and after
    /// they are taken down.
    nonisolated(unsafe) private static var path: UnsafeMutablePointer<CChar>?

    /// From now on SIGINT, SIGTERM and SIGHUP remove `partial` and end the command (exit 128 + the signal).
    static func removeOnSignal(_ partial: String) {
        path = strdup(partial)
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { signalNumber in
                if let path = BackupInterruption.path { unlink(path) }
                _exit(128 + signalNumber)
            }
            sigemptyset(&action.sa_mask)
            sigaction(signalNumber, &action, nil)
        }
    }

    /// The file is in place: signals end the command as they did before.
    static func finished() {
        for signalNumber in [SIGINT, SIGTERM, SIGHUP] { signal(signalNumber, SIG_DFL) }
        free(path)
        path = nil
    }
}
