import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

/// The repository root, from this file's path.
private let repositoryRoot = URL(fileURLWithPath: #filePath)
    .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

/// Whether Debian's python3 with pyzmq and protobuf, and protoc, are installed (`make deps`).
private let pythonClientAvailable: Bool = {
    if ProcessInfo.processInfo.environment["BEACON_REQUIRE_INTEROP"] == "1" { return true }
    return FileManager.default.isExecutableFile(atPath: "/usr/bin/protoc")
        && runTool("/usr/bin/python3", ["-c", "import zmq, google.protobuf"]) == 0
}()

@Suite(.timeLimit(.minutes(3)), .offThePool)
struct InteropTests {
    @Test(.enabled(if: pythonClientAvailable, "needs python3-zmq, python3-protobuf and protoc (make deps)"))
    func aPythonClientWrittenFromProtoAloneWorks() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        try Self.runPythonClient(runtimeDirectory: daemon.runtimeDirectory)
    }

    /// Runs the Python client against the daemon whose sockets are in `runtimeDirectory` and
    /// expects it to finish with its "ok".
    static func runPythonClient(runtimeDirectory: String) throws {
        let (status, text) = try Process.runToEnd("/usr/bin/python3", [
            repositoryRoot + "/Tests/interop/python_client.py", runtimeDirectory, repositoryRoot + "/proto"])
        #expect(status == 0, "\(text)")
        #expect(text.contains("python client: ok"))
    }

    @Test("The same Python client, unchanged, beside a subscriber of the same prefix's bundles: each receives every change",
          .enabled(if: pythonClientAvailable, "needs python3-zmq, python3-protobuf and protoc (make deps)"))
    func thePythonClientWorksBesideABundleSubscriber() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        defer { daemon.stop() }
        let bundled = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        try bundled.subscribe("py.", bundled: true)
        var received: [(revision: UInt64, key: String)] = []
        func receive(until done: (Beacon_V1_Heartbeat) -> Bool) throws -> Bool {
            let deadline = Date().addingTimeInterval(30)
            while Date() < deadline {
                switch try bundled.receivePublication(timeoutMilliseconds: 100) {
                case .diff(let diff)?: received.append((diff.event.revision, diff.event.change.key))
                case .heartbeat(let heartbeat)? where done(heartbeat): return true
                default: break
                }
            }
            return false
        }
        #expect(try receive { $0.prefixes.contains { $0.prefix == "py." } }, "the bundle subscription took effect")
        try Self.runPythonClient(runtimeDirectory: daemon.runtimeDirectory)
        let history = try daemonHistory(WireClient.patient(runtimeDirectory: daemon.runtimeDirectory), prefix: "py.")
        let last = try #require(history.last?.revision)
        #expect(try receive { $0.headRevision >= last })
        #expect(received.map(\.revision) == history.map(\.revision))
        #expect(received.map(\.key) == history.map(\.key))
    }

    @Test("The same Python client, unchanged, against a relay (of a primary over ipc)",
          .enabled(if: pythonClientAvailable, "needs python3-zmq, python3-protobuf and protoc (make deps)"))
    func thePythonClientWorksAgainstARelay() throws {
        let (primary, relay) = try startPrimaryAndRelay(in: try temporaryDirectory())
        defer {
            relay.stop()
            primary.stop()
        }
        try Self.runPythonClient(runtimeDirectory: relay.runtimeDirectory)
        #expect(try WireClient.patient(runtimeDirectory: primary.runtimeDirectory).get("py.b").version == 1, "the writes went to the primary")
    }

    #if Etcd
    /// Its own etcd cluster: the client checks that its transaction takes the revision after its
    /// put, which other writers of a shared cluster would take.
    @Test("The same Python client, unchanged, against an etcd front",
          .enabled(if: pythonClientAvailable, "needs python3-zmq, python3-protobuf and protoc (make deps)"))
    func thePythonClientWorksAgainstAnEtcdFront() async throws {
        let etcd = try await EtcdCluster()
        defer { etcd.shutDown() }
        let directory = try temporaryDirectory()
        let front = try DaemonProcess(runtimeDirectory: directory + "/run", stateDirectory: directory + "/state",
                                      extraArguments: ["--etcd-endpoints", etcd.endpointList])
        defer { front.stop() }
        let client = try WireClient.patient(runtimeDirectory: front.runtimeDirectory)
        #expect(waitUntil(seconds: 30) { (try? client.ping())?.upstream.reachable == true })
        try Self.runPythonClient(runtimeDirectory: front.runtimeDirectory)
        #expect(try client.get("py.b").version == 1)
    }
    #endif
}
