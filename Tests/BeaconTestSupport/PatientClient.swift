import BeaconWire

/// How long a test waits for a reply it expects, in milliseconds. Long, because on a loaded
/// machine (the whole suite in parallel beside a busy core) a daemon answers seconds late; a
/// reply that comes ends the wait at once, so a passing test never waits this long.
public let expectedReplyWait = 30_000

extension WireClient {
    /// A client of the daemon in `runtimeDirectory` whose calls wait ``expectedReplyWait`` for
    /// their replies when they name no timeout.
    public static func patient(runtimeDirectory: String) throws(WireError) -> WireClient {
        try WireClient(runtimeDirectory: runtimeDirectory, requestTimeoutMilliseconds: expectedReplyWait)
    }
}
