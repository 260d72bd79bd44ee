// beacon-access-probe: tries every read path, a write, and raw subscriptions against a daemon,
// and prints what it was allowed to do, one line each. The access tests run it under other
// user ids (setpriv) or with CURVE keys.
//
//   <op> <outcome> <count>       op: get, list, snapshot, delta, history, history-key, put;
//                                outcome: OK or the error code (PERMISSION_DENIED, REFUSED, ...)
//   READY                        subscriptions are in place; publications are being collected
//   diff <key>                   a diff arrived
//   marks <key> <prefixes>       the prefixes its sequencing marks name (comma-separated)
//   heartbeat <prefixes>         a heartbeat arrived, with the prefixes it lists (comma-separated)
//   commit <prefixes>            a commit marker arrived, with the prefixes it marks
//
// With --junk-steps DIR it plays the upstream-junk attack instead: it connects an XSUB and a SUB
// socket (READY), sends one upstream byte that is not a subscription when DIR/junk appears
// (JUNK), subscribes the --subscribe topics when DIR/subscribe appears (SUBSCRIBED), then listens.
//
// --keepalive-flood N and --lease-flood N start N sessions (KeepAlive) or take N snapshots of
// distinct prefixes under --prefix, and print "keepalive-flood|lease-flood <outcome>=<count> ...".
//
// With --hold-connections N it opens N plain connections to the request socket and holds them
// for --listen-ms (HELD <opened>, READY), then prints how many the daemon closed (CLOSED <n>).
//
// With --unread-lists N it plays a peer that never reads its replies: on each of --connections
// connections (default 1) it sends N batches of --lists-per-batch (default 8) Lists of --prefix,
// prints STOPPING, and stops itself (SIGSTOP), so that nothing more is read until it is killed.
// With --desync-ms MS it plays the desync pattern for MS: every 20 ms a byte that is not a
// subscription from an XSUB, and a subscription and its cancellation of a --subscribe topic
// from a SUB; then it prints END.
//
// With --subscription-flood N it sends N subscriptions of --topic-bytes bytes (default 1000), each
// a different topic, on one SUB socket, prints SENT, then DROPPED if the daemon ends the
// connection within --listen-ms.
//
// With --unread-until FILE it does not stop itself: it prints SENT and waits, reading nothing,
// until FILE exists. With --stop-when-subscribed it plays a subscriber that never reads: it subscribes to the
// --subscribe topics, prints STOPPING and stops itself.
import BeaconLocking
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation

var arguments = CommandLine.arguments.dropFirst()
var runtimeDirectory: String?
var endpoints: (request: String, publish: String)?
var curve: CurveCredentials?
var key = ""
var prefix = ""
var writeKey: String?
var topics: [String] = []
var listenMilliseconds = 0
var junkSteps: String?
var writeID = ""
var endSession: String?
var holdConnections = 0
var keepAliveFlood = 0
var leaseFlood = 0
var unreadLists = 0
var listsPerBatch = 8
var keysOnly = false
var connectionCount = 1
var stopWhenSubscribed = false
var churnMilliseconds = 0
var churnSteps: String?
var unreadUntil: String?
var subscriptionFlood = 0
var desyncMilliseconds = 0
var topicBytes = 1000
while let argument = arguments.popFirst() {
    switch argument {
    case "--runtime-dir": runtimeDirectory = arguments.popFirst()
    case "--endpoints": endpoints = (arguments.popFirst() ?? "", arguments.popFirst() ?? "")
    case "--curve":
        let server = try CurveKeyFile(path: arguments.popFirst() ?? "").publicKey ?? ""
        let own = try CurveKeyFile(path: arguments.popFirst() ?? "").secretKey ?? ""
        curve = CurveCredentials(serverKey: server, keys: try ZMQCurveKeyPair(secretKey: own))
    case "--key": key = arguments.popFirst() ?? ""
    case "--prefix": prefix = arguments.popFirst() ?? ""
    case "--write": writeKey = arguments.popFirst()
    case "--subscribe": topics.append(arguments.popFirst() ?? "")
    case "--listen-ms": listenMilliseconds = Int(arguments.popFirst() ?? "") ?? 0
    case "--junk-steps": junkSteps = arguments.popFirst()
    case "--write-id": writeID = arguments.popFirst() ?? ""
    case "--end-session": endSession = arguments.popFirst()
    case "--keepalive-flood": keepAliveFlood = Int(arguments.popFirst() ?? "") ?? 0
    case "--lease-flood": leaseFlood = Int(arguments.popFirst() ?? "") ?? 0
    case "--hold-connections": holdConnections = Int(arguments.popFirst() ?? "") ?? 0
    case "--unread-lists": unreadLists = Int(arguments.popFirst() ?? "") ?? 0
    case "--lists-per-batch": listsPerBatch = Int(arguments.popFirst() ?? "") ?? 8
    case "--keys-only": keysOnly = true
    case "--connections": connectionCount = Int(arguments.popFirst() ?? "") ?? 1
    case "--stop-when-subscribed": stopWhenSubscribed = true
    case "--churn-publish": churnMilliseconds = Int(arguments.popFirst() ?? "") ?? 0
    case "--churn-steps": churnSteps = arguments.popFirst()
    case "--unread-until": unreadUntil = arguments.popFirst()
    case "--subscription-flood": subscriptionFlood = Int(arguments.popFirst() ?? "") ?? 0
    case "--desync-ms": desyncMilliseconds = Int(arguments.popFirst() ?? "") ?? 0
    case "--topic-bytes": topicBytes = Int(arguments.popFirst() ?? "") ?? 1000
    default:
        FileHandle.standardError.write("unknown argument \(argument)\n".data(using: .utf8)!)
        exit(64)
    }
}

func emit(_ line: String) {
    // Unbuffered: the test waits for READY while the probe runs.
    FileHandle.standardOutput.write((line + "\n").data(using: .utf8)!)
}

if churnMilliseconds > 0 {
    let address = UnixSocketAddress(path: (runtimeDirectory ?? "") + "/" + WireEndpoint.publishSocketName)!
    let end = Date().addingTimeInterval(Double(churnMilliseconds) / 1000)
    let stopFile = (churnSteps ?? "/nonexistent") + "/stop"
    let churned = Locked(0)
    let threads = (0..<2).map { _ in
        Thread {
            var count = 0
            while Date() < end && !FileManager.default.fileExists(atPath: stopFile) {
                let fd = address.connectStream()
                if fd >= 0 {
                    close(fd)
                    count += 1
                }
            }
            churned.withLock { $0 += count }
        }
    }
    emit("READY")
    threads.forEach { $0.start() }
    while threads.contains(where: { !$0.isFinished }) { Thread.sleep(forTimeInterval: 0.05) }
    emit("CHURNED \(churned.withLock { $0 })")
    exit(0)
}

if desyncMilliseconds > 0 {
    let context = try ZMQContext()
    let publish = endpoints?.publish ?? "ipc://" + (runtimeDirectory ?? "") + "/" + WireEndpoint.publishSocketName
    let upstream = try ZMQSocket(context, type: .xsub, linger: 0)
    try upstream.connect(publish)
    let subscriber = try ZMQSocket(context, type: .sub, linger: 0)
    try subscriber.connect(publish)
    emit("READY")
    let end = Date().addingTimeInterval(Double(desyncMilliseconds) / 1000)
    while Date() < end {
        _ = try? upstream.send([0x02], flags: .dontWait)
        for topic in topics {
            try? subscriber.subscribe(Array(topic.utf8))
            try? subscriber.unsubscribe(Array(topic.utf8))
        }
        Thread.sleep(forTimeInterval: 0.02)
    }
    emit("END")
    exit(0)
}

if subscriptionFlood > 0 {
    let context = try ZMQContext()
    let subscriber = try ZMQSocket(context, type: .sub, linger: 0)
    try subscriber.setSendHighWaterMark(0)  // no subscription dropped on the way out
    let drops = try subscriber.monitor(events: [.disconnected], name: "probe-drops-\(getpid())")
    try subscriber.connect(endpoints?.publish ?? "ipc://" + (runtimeDirectory ?? "") + "/" + WireEndpoint.publishSocketName)
    for index in 0..<subscriptionFlood {
        let name = Array("zzz.\(index).".utf8)
        try subscriber.subscribe(name + Array(repeating: UInt8(ascii: "x"), count: max(topicBytes - name.count, 0)))
    }
    emit("SENT")
    // The daemon (or its libzmq) ending the connection shows here.
    try drops.reader.setReceiveTimeout(milliseconds: Int32(listenMilliseconds))
    if (try? drops.receiveEvent()) != nil { emit("DROPPED") }
    emit("END")
    exit(0)
}

if holdConnections > 0 {
    var limits = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limits)
    limits.rlim_cur = limits.rlim_max
    setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &limits)
    let address = UnixSocketAddress(path: (runtimeDirectory ?? "") + "/" + WireEndpoint.requestSocketName)!
    var held: [Int32] = []
    for _ in 0..<holdConnections {
        let fd = address.connectStream()
        guard fd >= 0 else { break }
        held.append(fd)
    }
    emit("HELD \(held.count)")
    emit("READY")
    Thread.sleep(forTimeInterval: Double(listenMilliseconds) / 1000)
    // A connection the daemon closed reads as the end of the stream (or a reset) after its
    // greeting; one it keeps has nothing more to read.
    var closed = 0
    var buffer = [UInt8](repeating: 0, count: 256)
    for fd in held {
        while true {
            let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
            if count > 0 { continue }
            if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { closed += 1 }
            break
        }
    }
    emit("CLOSED \(closed)")
    exit(0)
}

if unreadLists > 0 {
    let list = Beacon_V1_Request.with { $0.list = .with { $0.prefix = prefix; $0.keysOnly = keysOnly } }
    let batch = Beacon_V1_Request.OneOf_Op.batch(.with { $0.requests = Array(repeating: list, count: listsPerBatch) })
    // Each takes in one reply at most: the rest stay at the daemon, handed to its libzmq or kept.
    let clients = try (0..<connectionCount).map { _ in
        try WireClient(requestEndpoint: WireEndpoint.request(inRuntimeDirectory: runtimeDirectory ?? ""),
                       publishEndpoint: WireEndpoint.publish(inRuntimeDirectory: runtimeDirectory ?? ""), replyQueueLimit: 1)
    }
    for client in clients {
        _ = try client.ping(timeoutMilliseconds: 30_000)  // connected: what follows is sent at once
        for _ in 0..<unreadLists { try client.send(batch) }
    }
    if let unreadUntil {
        // Reads nothing (each connection's libzmq takes in what its queue holds) until told to end.
        emit("SENT")
        while !FileManager.default.fileExists(atPath: unreadUntil) { Thread.sleep(forTimeInterval: 0.005) }
        exit(0)
    }
    Thread.sleep(forTimeInterval: 0.2)  // libzmq's I/O thread passes the requests on
    emit("STOPPING")
    raise(SIGSTOP)
    exit(0)
}

let client: WireClient
if let endpoints {
    client = try WireClient(requestEndpoint: endpoints.request, publishEndpoint: endpoints.publish, curve: curve)
} else {
    client = try WireClient(runtimeDirectory: runtimeDirectory ?? "")
}

func attempt(_ op: String, _ body: () throws(WireError) -> Int) {
    do {
        let count = try body()
        emit("\(op) OK \(count)")
    } catch {
        switch error.kind {
        case .rejected: emit("\(op) \(snakeCase(String(describing: error.reply?.code ?? .unspecified))) 0")
        case .refused: emit("\(op) REFUSED 0")
        case .timeout: emit("\(op) TIMEOUT 0")
        default: emit("\(op) ERROR 0")
        }
    }
}

/// `permissionDenied` as the proto spells it: `PERMISSION_DENIED`.
func snakeCase(_ name: String) -> String {
    name.reduce(into: "") { result, character in
        if character.isUppercase { result += "_" }
        result += character.uppercased()
    }
}

/// Prints the publications that arrive for `milliseconds`.
@MainActor func listen(milliseconds: Int) {
    let end = Date().addingTimeInterval(Double(milliseconds) / 1000)
    while Date() < end {
        guard let publication = try? client.receivePublication(timeoutMilliseconds: 50) else { continue }
        switch publication {
        case .diff(let diff):
            emit("diff \(diff.event.change.key)")
            emit("marks \(diff.event.change.key) \(diff.marks.map(\.prefix).joined(separator: ","))")
        case .heartbeat(let heartbeat): emit("heartbeat \(heartbeat.prefixes.map(\.prefix).joined(separator: ","))")
        case .commit(let marker): emit("commit \(marker.marks.map(\.prefix).joined(separator: ","))")
        }
    }
}

if let junkSteps {
    func awaitStep(_ name: String) {
        while !FileManager.default.fileExists(atPath: junkSteps + "/" + name) { Thread.sleep(forTimeInterval: 0.005) }
    }
    let context = try ZMQContext()
    let upstream = try ZMQSocket(context, type: .xsub, linger: 0)
    try upstream.connect(endpoints?.publish ?? "ipc://" + (runtimeDirectory ?? "") + "/" + WireEndpoint.publishSocketName)
    try client.subscribeRaw("app.zzz")  // connects the SUB socket, with a topic this peer may read
    Thread.sleep(forTimeInterval: 0.3)
    emit("READY")
    awaitStep("junk")
    _ = try upstream.send([0x02])
    emit("JUNK")
    awaitStep("subscribe")
    for topic in topics { try client.subscribeRaw(topic) }
    emit("SUBSCRIBED")
    listen(milliseconds: listenMilliseconds)
    emit("END")
    exit(0)
}

let timeout = 2000
attempt("get") { () throws(WireError) in _ = try client.get(key, timeoutMilliseconds: timeout); return 1 }
attempt("list") { () throws(WireError) in
    let reply = try client.call(.list(.with { $0.prefix = prefix }), timeoutMilliseconds: timeout)
    return reply.list.kvs.count
}
attempt("snapshot") { () throws(WireError) in try client.snapshot(prefix: prefix, timeoutMilliseconds: timeout).kvs.count }
attempt("delta") { () throws(WireError) in
    let reply = try client.call(.delta(.with { $0.prefix = prefix }), timeoutMilliseconds: timeout)
    return reply.events.events.count
}
attempt("history") { () throws(WireError) in try client.history(prefix, exact: false, from: 0, to: 0, timeoutMilliseconds: timeout).events.count }
attempt("history-key") { () throws(WireError) in try client.history(key, exact: true, from: 0, to: 0, timeoutMilliseconds: timeout).events.count }
if let writeKey {
    // A replayed write prints its count as 2.
    attempt("put") { () throws(WireError) in
        let reply = try client.put(writeKey, .with { $0.intValue = 1 }, writeID: Array(writeID.utf8), timeoutMilliseconds: timeout)
        return reply.replayed ? 2 : 1
    }
}
if let endSession {
    // KeepAlive with ttl 0: ends the session; the count is how many keys it reported.
    attempt("end-session") { () throws(WireError) in
        Int(try client.keepAlive(session: Array(endSession.utf8), ttlMilliseconds: 0, timeoutMilliseconds: timeout).keys)
    }
}

/// Runs `body` `count` times and prints how each ended, counted by outcome.
func flood(_ name: String, _ count: Int, _ body: (Int) throws(WireError) -> Void) {
    var outcomes: [String: Int] = [:]
    for index in 0..<count {
        do {
            try body(index)
            outcomes["OK", default: 0] += 1
        } catch {
            let code = error.reply.map { snakeCase(String(describing: $0.code)) } ?? "\(error.kind)"
            outcomes[code, default: 0] += 1
        }
    }
    emit("\(name) " + outcomes.keys.sorted().map { "\($0)=\(outcomes[$0]!)" }.joined(separator: " "))
}
if keepAliveFlood > 0 {
    flood("keepalive-flood", keepAliveFlood) { (index) throws(WireError) in
        _ = try client.keepAlive(session: Array("flood-\(index)".utf8), ttlMilliseconds: 3_600_000, timeoutMilliseconds: timeout)
    }
}
if leaseFlood > 0 {
    flood("lease-flood", leaseFlood) { (index) throws(WireError) in
        _ = try client.snapshot(prefix: "\(prefix)\(index).", timeoutMilliseconds: timeout)
    }
}

if stopWhenSubscribed {
    for topic in topics { try client.subscribeRaw(topic) }
    // The daemon grants subscriptions in the order they came: once a heartbeat arrives on the
    // control topic subscribed last, the others are granted too.
    try client.subscribeRaw(WireTopic.controlPrefix)
    var heardHeartbeat = false
    while !heardHeartbeat {
        if case .heartbeat = try client.receivePublication(timeoutMilliseconds: 100) { heardHeartbeat = true }
    }
    emit("STOPPING")
    raise(SIGSTOP)
    exit(0)
}

if listenMilliseconds > 0 {
    // Raw subscriptions, as any ZeroMQ program could make them; the control topics come with "!".
    for topic in topics { try client.subscribeRaw(topic) }
    Thread.sleep(forTimeInterval: 0.3)
    emit("READY")
    listen(milliseconds: listenMilliseconds)
}
emit("END")
