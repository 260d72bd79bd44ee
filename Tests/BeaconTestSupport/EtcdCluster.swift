#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconLocking
import Foundation

/// A cluster of real `etcd` processes (Debian's `etcd-server`) for one test, talking over Unix
/// sockets in the test's directory: no tcp port is taken. Members are started, killed, frozen
/// and restarted one by one; every one still running is killed when the cluster is shut down
/// or released. Their data is on tmpfs (`/dev/shm`), so that a suite of clusters does not wait
/// on the disk's syncs, and their election timeout is 2 s, so that a loaded machine does not
/// make them elect again and again.
///
/// Tests that neither stop members nor compact share one cluster (``shared()``), each under
/// a key prefix of its own (``uniquePrefix(_:)``). A secured cluster (``init(size:prefix:secured:)``)
/// speaks TLS on its client sockets and asks every client for a certificate signed by its
/// authority (made with `openssl` for the cluster: ``tlsFiles``).
public final class EtcdCluster: @unchecked Sendable {
    public let directory: String
    /// Where the members keep their data (on tmpfs when there is one).
    public let dataDirectory: String
    public let size: Int
    /// A client's certificate, its key and the cluster's authority, for a secured cluster.
    package let tlsFiles: EtcdTLSFiles?
    private var processes: [Process?]
    private let lock = NSLock()

    /// Starts `size` members and returns once every member has a leader.
    /// - Parameter secured: TLS on the client sockets, and a client certificate required.
    /// - Throws: when etcd (or, secured, openssl) is missing or the cluster does not form within ``leaderPatience``.
    public init(size: Int = 3, prefix: String = "etcd", secured: Bool = false) async throws {
        directory = try makeTestDirectory(prefix)
        dataDirectory = try Self.makeDataDirectory()
        self.size = size
        tlsFiles = secured ? try Self.makeCertificates(in: directory) : nil
        processes = Array(repeating: nil, count: size)
        for member in 0..<size { try launch(member, existing: false) }
        try await waitUntilEveryMemberHasALeader()
    }

    deinit { shutDown() }

    /// The cluster the tests of this process share, started by the first that asks.
    public static func shared() async throws -> EtcdCluster {
        try await sharedCluster.value
    }

    private static let sharedCluster = Task { try await EtcdCluster(prefix: "etcd-shared") }
    private static let prefixes = Locked(0)

    /// A key prefix no other test of this process uses: `NAME-N/`.
    public static func uniquePrefix(_ name: String) -> String {
        "\(name)-\(prefixes.withLock { $0 += 1; return $0 })/"
    }

    /// A directory on tmpfs for the members' data, removed when this process exits.
    private static func makeDataDirectory() throws -> String {
        let base = FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()
        var template = Array("\(base)/beacon-etcd-\(getpid())-XXXXXX".utf8CString)
        guard let path = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
        }
        dataCleanup.withLock { paths in
            if paths.isEmpty { atexit { for path in EtcdCluster.dataCleanup.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) } } }
            paths.append(String(cString: path))
        }
        return String(cString: path)
    }

    private static let dataCleanup = Locked<[String]>([])

    /// The members' client endpoints, for `EtcdClient` and `--etcd-endpoints`.
    public var endpoints: [String] { (0..<size).map(endpoint(of:)) }

    /// Member `member`'s client endpoint.
    public func endpoint(of member: Int) -> String { "\(clientScheme)://\(directory)/m\(member).client:1" }

    private var clientScheme: String { tlsFiles == nil ? "unix" : "unixs" }

    /// Every member's client endpoint, comma-separated.
    public var endpointList: String { endpoints.joined(separator: ",") }

    private func name(_ member: Int) -> String { "m\(member)" }

    private func launch(_ member: Int, existing: Bool) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let cluster = (0..<size).map { "\(name($0))=unix://\(name($0)).peer:1" }.joined(separator: ",")
        // etcd's unix:// listeners take the URL's host as a path relative to its working directory.
        process.arguments = [
            "--name", name(member), "--data-dir", "\(dataDirectory)/\(name(member)).data",
            "--heartbeat-interval", "100", "--election-timeout", "2000",
            "--listen-client-urls", "\(clientScheme)://\(name(member)).client:1",
            "--advertise-client-urls", "\(clientScheme)://\(name(member)).client:1",
            "--listen-peer-urls", "unix://\(name(member)).peer:1", "--initial-advertise-peer-urls", "unix://\(name(member)).peer:1",
            "--initial-cluster", cluster, "--initial-cluster-state", existing ? "existing" : "new",
            "--initial-cluster-token", "beacon-test",
        ] + (tlsFiles == nil ? [] : [
            "--cert-file", "\(directory)/tls/member.pem", "--key-file", "\(directory)/tls/member.key",
            "--trusted-ca-file", "\(directory)/tls/authority.pem", "--client-cert-auth",
        ])
        let log = "\(directory)/\(name(member)).log"
        if !FileManager.default.fileExists(atPath: log) { _ = FileManager.default.createFile(atPath: log, contents: nil) }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        handle.seekToEndOfFile()
        process.standardError = handle
        process.standardOutput = handle
        try process.runSerially()
        lock.withLock { processes[member] = process }
    }

    /// The process id of a running member.
    public func pid(of member: Int) -> Int32? {
        lock.withLock { processes[member].map(\.processIdentifier) }
    }

    /// kill -9 of a member; it stays down until ``restart(_:)``.
    public func kill(_ member: Int) {
        guard let process = lock.withLock({ () -> Process? in defer { processes[member] = nil }; return processes[member] }) else { return }
        Foundation.kill(process.processIdentifier, SIGCONT)
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Freezes a member (SIGSTOP) until ``thaw(_:)``.
    public func freeze(_ member: Int) {
        if let pid = pid(of: member) { BeaconTestSupport.freeze(pid) }
    }

    /// Lets a frozen member go on (SIGCONT).
    public func thaw(_ member: Int) {
        if let pid = pid(of: member) { Foundation.kill(pid, SIGCONT) }
    }

    /// Starts a killed member again on its data directory; it rejoins the cluster.
    public func restart(_ member: Int) throws {
        precondition(pid(of: member) == nil, "member \(member) is running")
        // A killed etcd leaves its sockets behind, and would not bind them again.
        for socket in ["client", "peer"] { unlink("\(directory)/\(name(member)).\(socket):1") }
        try launch(member, existing: true)
    }

    /// Kills every member still running, and removes their data.
    public func shutDown() {
        for member in 0..<size { kill(member) }
        try? FileManager.default.removeItem(atPath: dataDirectory)
    }

    /// How long a cluster may take to elect a leader: a debug build's suite beside a busy CPU
    /// starves the members' heartbeats, and elections repeat.
    public static let leaderPatience: Duration = .seconds(120)

    /// The index of the member that leads now, as a member that has a leader reports it.
    /// - Throws: when no member answers with a leader within ``leaderPatience``.
    public func leader() async throws -> Int {
        let deadline = ContinuousClock.now + Self.leaderPatience
        while ContinuousClock.now < deadline {
            var ids: [UInt64: Int] = [:]
            var leader: UInt64 = 0
            for member in 0..<size where pid(of: member) != nil {
                guard let status = try? await status(of: member) else { continue }
                ids[status.header.memberID] = member
                if status.leader != 0 { leader = status.leader }
            }
            if leader != 0, let index = ids[leader] { return index }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw EtcdClusterError("no member of the etcd cluster in \(directory) reported a leader within \(Self.leaderPatience)")
    }

    /// Returns once every running member answers with a leader.
    /// - Throws: after ``leaderPatience``.
    public func waitUntilEveryMemberHasALeader() async throws {
        let deadline = ContinuousClock.now + Self.leaderPatience
        var pending = Set((0..<size).filter { pid(of: $0) != nil })
        while !pending.isEmpty {
            for member in pending {
                if let status = try? await status(of: member), status.leader != 0 { pending.remove(member) }
            }
            if pending.isEmpty { return }
            guard ContinuousClock.now < deadline else {
                throw EtcdClusterError("etcd members \(pending.sorted()) in \(directory) have no leader after \(Self.leaderPatience); see m*.log there")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    private func status(of member: Int) async throws -> Etcdserverpb_StatusResponse {
        let client = try EtcdClient(endpoints: [try EtcdEndpoint(parsing: endpoint(of: member))], tls: tlsFiles ?? EtcdTLSFiles(),
                                    callTimeout: .seconds(1))
        defer { client.close() }
        return try await client.status()
    }

    /// An authority, a certificate for the members and one for clients (EC P-256, a day long),
    /// made with `openssl` in `directory/tls`.
    private static func makeCertificates(in directory: String) throws -> EtcdTLSFiles {
        let tls = directory + "/tls"
        try FileManager.default.createDirectory(atPath: tls, withIntermediateDirectories: true)
        let script = """
            set -e
            key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
            key authority.key
            openssl req -x509 -new -key authority.key -out authority.pem -days 1 -subj /CN=beacon-test-authority
            for who in member client; do
              key $who.key
              openssl req -new -key $who.key -out $who.csr -subj /CN=beacon-test-$who
              printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > $who.ext
              openssl x509 -req -in $who.csr -CA authority.pem -CAkey authority.key -CAcreateserial -days 1 -extfile $who.ext -out $who.pem
            done
            """
        let (status, output) = try Process.runToEnd("/bin/sh", ["-c", script], in: tls)
        guard status == 0 else {
            throw EtcdClusterError("openssl could not make the test certificates (exit \(status)): \(output)")
        }
        return EtcdTLSFiles(certificatePath: tls + "/client.pem", keyPath: tls + "/client.key", authorityPath: tls + "/authority.pem")
    }
}

/// A cluster that did not come up or answer as a test needs.
public struct EtcdClusterError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
#endif
