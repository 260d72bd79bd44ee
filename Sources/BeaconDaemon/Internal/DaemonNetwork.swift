import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Logging

/// The daemon's sockets and what they live in: libzmq's context (its I/O thread placed by
/// `loop_cpu`), the ZAP handler, the request socket, the publish socket, the guard that watches
/// their connections, and the watchdog's probe. Opened whole or not at all; the loop thread's
/// once it runs. libzmq's context ends when the last of these goes.
final class DaemonNetwork {
    let context: ZMQContext
    /// Every connection to the daemon is authenticated here (ZAP).
    let zap: ZMQSocket
    /// The request socket.
    let router: ZMQSocket
    /// The request socket's endpoints as bound (a tcp port the kernel chose, `:*`, is the one it gave).
    let requestEndpoints: [String]
    /// The publish socket, its subscriptions and the prefixes it sequences.
    let publisher: Publisher
    /// Connections to the request and publish sockets, per peer and in all; sheds those over a limit.
    let connections: ConnectionGuard
    /// With systemd's watchdog on: proof that libzmq still moves messages, asked before each `WATCHDOG=1`.
    let servingProbe: ServingProbe?
    /// What the metrics endpoint serves, and the endpoint (`metrics_listen`); nil when not asked for.
    let metrics: DaemonMetrics?
    private let metricsEndpoint: MetricsEndpoint?
    /// Replies on their way to each request connection, bounded in bytes.
    @exclusivity(unchecked) var replyFlows: ReplyFlows
    /// Where the loop and libzmq's I/O thread run, resolved from `loop_cpu`; nil: anywhere.
    let placement: ThreadPlacement?

    /// How long a connection may take to finish its handshake: one that sends nothing (a raw tcp
    /// connection to the CURVE port) holds a descriptor no longer than this.
    static let handshakeMilliseconds: Int32 = 10_000

    /// Opens and binds every socket of `configuration`.
    init(configuration config: DaemonConfiguration, watchdog: Bool, now: MonotonicTime, replyHighWaterMark: Int32,
         replyLimits: ReplyFlows.Limits, logger: Logger) throws(DaemonError) {
        replyFlows = ReplyFlows(limits: replyLimits)
        let connections = ConnectionGuard(perPeer: Int(config.limits.connectionsPerPeer), descriptorLimit: DescriptorLimit.raise())
        self.connections = connections
        // libzmq starts its I/O thread with the context's first socket, in the placement of the
        // thread that makes it; this thread is put back as it was once the sockets are open.
        let (placement, restore) = Self.placeForLoop(config.loopCPU, logger: logger)
        self.placement = placement
        defer { if let restore { try? restore.apply() } }
        // Bound first: a failure after it closes it (its deinit), before any ZeroMQ socket exists.
        if let listen = config.metricsListen {
            metricsEndpoint = try MetricsEndpoint(listen: listen)
            metrics = DaemonMetrics()
        } else {
            metricsEndpoint = nil
            metrics = nil
        }
        var step = "creating the ZeroMQ context"
        do {
            context = try ZMQContext()
            // The ZAP handler binds first: libzmq lets peers in unchecked when none listens.
            step = "binding the ZAP handler"
            zap = try ZMQSocket(context, type: .rep, linger: 0)
            try zap.bind(ZAP.endpoint)
            step = "creating the request socket"
            router = try ZMQSocket(context, type: .router, linger: 1000)
            try router.setHandshakeInterval(milliseconds: Self.handshakeMilliseconds)
            try router.setMaxMessageSize(Int64(WireLimits.maxRequestBytes))
            try router.setSendHighWaterMark(replyHighWaterMark)
            try router.setRouterMandatory(true)
            try router.setReceiveHighWaterMark(config.limits.pendingRequests)
            var bound: [String] = []
            for endpoint in [config.requestEndpoint] + config.extraRequestEndpoints {
                step = "binding the request socket to \(endpoint)"
                try Self.bind(router, to: endpoint, configuration: config)
                bound.append(try router.lastEndpoint)
            }
            requestEndpoints = bound
            step = "creating the publish socket"
            publisher = try Publisher(context: context, endpoints: [config.publishEndpoint] + config.extraPublishEndpoints,
                                      highWaterMark: config.publishHighWaterMark, connections: connections) {
                (socket, endpoint) throws(ZMQError) in
                try Self.bind(socket, to: endpoint, configuration: config)
                if !endpoint.hasPrefix("tcp://") {
                    chmod(config.runtimeDirectory + "/" + WireEndpoint.publishSocketName, mode_t(config.socketMode))
                }
            }
            step = "monitoring the sockets"
            try connections.watch(router, as: .requests, name: "beacond-requests-\(UInt64.random(in: 0 ... .max))")
            step = "opening the watchdog's probe"
            servingProbe = watchdog ? try ServingProbe(context: context, path: config.runtimeDirectory + "/beacond.probe", now: now) : nil
        } catch {
            throw DaemonError(.startup, "\(step): \(error.message)", underlying: error)
        }
        chmod(config.runtimeDirectory + "/" + WireEndpoint.requestSocketName, mode_t(config.socketMode))
        if let metrics, let metricsEndpoint { metricsEndpoint.start(serving: { metrics.exposition() }, logger: logger) }
        Self.writeEndpointsFile(request: requestEndpoints, publish: publisher.endpoints,
                                metrics: metricsEndpoint?.boundAddress, runtimeDirectory: config.runtimeDirectory)
    }

    /// The file in the runtime directory that lists the endpoints bound, one per line
    /// (`request ENDPOINT`, `publish ENDPOINT`, `metrics ADDRESS`): how a tool learns the tcp ports
    /// the kernel chose.
    static let endpointsFileName = "beacond.endpoints"

    private static func writeEndpointsFile(request: [String], publish: [String], metrics: String?, runtimeDirectory: String) {
        let text = (request.map { "request \($0)" } + publish.map { "publish \($0)" } + (metrics.map { ["metrics \($0)"] } ?? []))
            .joined(separator: "\n") + "\n"
        let path = runtimeDirectory + "/" + endpointsFileName
        try? text.write(toFile: path + ".new", atomically: false, encoding: .utf8)
        rename(path + ".new", path)
    }

    /// Resolves `loop_cpu` and places the calling thread there, so that libzmq's I/O thread
    /// starts there too. Returns the placement, and the calling thread's before (nil if it was left alone).
    private static func placeForLoop(_ loopCPU: LoopCPU, logger: Logger)
        -> (placement: ThreadPlacement?, previous: ThreadPlacement?) {
        guard loopCPU != .off, let previous = try? ThreadPlacement.current() else { return (nil, nil) }
        let cpu: Int
        switch loopCPU {
        case .off: return (nil, nil)
        case .cpu(let chosen): cpu = chosen
        case .auto:
            guard let last = previous.cpus.last else { return (nil, nil) }
            cpu = last
        }
        let placement = ThreadPlacement.batch(onCPU: cpu)
        do {
            try placement.apply()
        } catch {
            try? previous.apply()  // the CPU may have been set before the policy failed
            logger.warning("the loop and libzmq's I/O thread could not be placed on one CPU; running unplaced",
                           metadata: ["cpu": "\(cpu)", "error": "\(error)"])
            return (nil, nil)
        }
        logger.info("the loop and libzmq's I/O thread run on one CPU, as batch work", metadata: ["cpu": "\(cpu)"])
        return (placement, previous)
    }

    /// Binds `socket` to `endpoint` with the security that endpoint needs: ipc peers are
    /// identified by the kernel, tcp peers by CURVE (or not at all with `tcp_insecure`).
    static func bind(_ socket: ZMQSocket, to endpoint: String, configuration: DaemonConfiguration) throws(ZMQError) {
        if endpoint.hasPrefix("tcp://") {
            if let keys = configuration.curveKeys {
                try socket.enableCurveServer(secretKey: keys.secretKey)
                try socket.setZAPDomain(AccessDomain.curve)
            } else {
                try socket.disableCurve()
                try socket.setZAPDomain(AccessDomain.insecure)
            }
        } else {
            try socket.disableCurve()
            try socket.setZAPDomain(AccessDomain.local)
        }
        try socket.bind(endpoint)
    }

    /// Closes every socket (the context ends when this is let go of).
    func close() {
        metricsEndpoint?.stop()
        connections.close()
        servingProbe?.close()
        router.close()
        publisher.close()
        zap.close()
    }

    /// Removes the ipc socket files of a daemon that stopped cleanly (while it still holds the
    /// runtime directory's lock): a client then learns at once that no daemon is there, instead
    /// of waiting out its timeout on a socket nobody listens on.
    static func removeSocketFiles(of configuration: DaemonConfiguration) {
        let endpoints = [configuration.requestEndpoint, configuration.publishEndpoint]
            + configuration.extraRequestEndpoints + configuration.extraPublishEndpoints
        for endpoint in endpoints where endpoint.hasPrefix("ipc://") {
            let path = String(endpoint.dropFirst("ipc://".count))
            var status = stat()
            if lstat(path, &status) == 0 && (status.st_mode & S_IFMT) == S_IFSOCK { unlink(path) }
        }
        unlink(configuration.runtimeDirectory + "/beacond.probe")
        unlink(configuration.runtimeDirectory + "/" + endpointsFileName)
    }
}
