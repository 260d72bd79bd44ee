#if Etcd  // the Etcd trait (Package.swift)
import ArgumentParser
import BeaconDaemon
import BeaconEtcd
import BeaconLocking
import BeaconProtocol
import BeaconWire
import Foundation

/// etcd fronts beside etcd itself: writes through a front against the same Swift gRPC client
/// putting directly to etcd at the same concurrency (the ceiling) and sending the front's own
/// transactions to etcd while both fronts follow them (the ceiling of a front's write); and a
/// write at one front to the diff at a subscriber of another against etcd's own put → watch event.
struct EtcdBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "etcd", abstract: "Writes through an etcd front vs direct gRPC puts and its own transaction followed; front-to-front latency vs put → watch.")

    @Option(help: "Concurrent writers (one connection each).") var writers = 8
    @Option(help: "Seconds each write-rate measurement lasts.") var seconds = 5.0
    @Option(help: "Latency samples per run.") var samples = 500
    @Option(help: "Repetitions; medians are printed.") var runs = 3

    func run() throws {
        print("beacon-bench etcd: a three-member etcd cluster (Debian's etcd \(Self.etcdVersion())) on Unix sockets, its data in /tmp; "
            + "two fronts (beacond --etcd-endpoints, every member); \(writers) writers for \(seconds) s, \(samples) latency samples, \(runs) runs")
        var frontRate: [Double] = [], directRate: [Double] = [], followedRate: [Double] = []
        var frontP50: [Double] = [], frontP99: [Double] = [], directP50: [Double] = [], directP99: [Double] = []
        var followedP50: [Double] = [], followedP99: [Double] = []
        // CPU per write (ms) of each front: while it forwards writes, while it only follows them.
        var forwardingCPU: [Double] = [], followingCPU: [Double] = [], otherFrontCPU: [Double] = []
        var acrossP50: [Double] = [], acrossP99: [Double] = [], watchP50: [Double] = [], watchP99: [Double] = []
        // CPU per write (ms) of the etcd members while a front forwards writes, busiest (the leader) first.
        var memberCPU: [[Double]] = []
        var plainReadP50: [Double] = [], plainReadP99: [Double] = [], consistentP50: [Double] = [], consistentP99: [Double] = []
        for run in 1...runs {
            let directory = temporaryDirectory()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let cluster = try BenchEtcdCluster(directory: directory + "/etcd")
            defer { cluster.stop() }
            let fronts = try (0..<2).map { index in
                try DaemonUnderTest(directory: directory + "/front\(index)", durability: "normal", maxBatch: 2048,
                                    extraArguments: ["--etcd-endpoints", cluster.endpoints.joined(separator: ","), "--loop-cpu", "off"])
            }
            defer { for front in fronts { front.stop() } }
            for front in fronts { try Self.waitUntilReachable(front.runtimeDirectory) }

            let direct = try Self.directPuts(cluster: cluster, writers: writers, seconds: seconds)
            var cpu = fronts.map { $0.cpuSeconds() }
            let followed = try Self.followedTransactions(cluster: cluster, fronts: fronts.map(\.runtimeDirectory), writers: writers,
                                                         seconds: seconds)
            let followedWrites = Double(followed.latencies.count)
            followingCPU.append(fronts.indices.map { 1000 * (fronts[$0].cpuSeconds() - cpu[$0]) / followedWrites }.reduce(0, +) / 2)
            cpu = fronts.map { $0.cpuSeconds() }
            let membersBefore = cluster.memberCPUSeconds()
            let front = try Self.frontPuts(runtimeDirectory: fronts[0].runtimeDirectory, writers: writers, seconds: seconds)
            // Front b may still be journaling the last writes: its figure is a little low.
            forwardingCPU.append(1000 * (fronts[0].cpuSeconds() - cpu[0]) / Double(front.latencies.count))
            otherFrontCPU.append(1000 * (fronts[1].cpuSeconds() - cpu[1]) / Double(front.latencies.count))
            memberCPU.append(zip(cluster.memberCPUSeconds(), membersBefore).map { 1000 * ($0 - $1) / Double(front.latencies.count) }
                .sorted(by: >))
            let reads = try Self.reads(at: fronts[1].runtimeDirectory, samples: samples)
            plainReadP50.append(percentile(reads.plain, 0.5))
            plainReadP99.append(percentile(reads.plain, 0.99))
            consistentP50.append(percentile(reads.consistent, 0.5))
            consistentP99.append(percentile(reads.consistent, 0.99))
            let across = try Self.frontToFront(from: fronts[0].runtimeDirectory, to: fronts[1].runtimeDirectory, samples: samples)
            let watched = try Self.putToWatch(cluster: cluster, samples: samples)
            directRate.append(direct.rate)
            followedRate.append(followed.rate)
            followedP50.append(percentile(followed.latencies, 0.5))
            followedP99.append(percentile(followed.latencies, 0.99))
            frontRate.append(front.rate)
            directP50.append(percentile(direct.latencies, 0.5))
            directP99.append(percentile(direct.latencies, 0.99))
            frontP50.append(percentile(front.latencies, 0.5))
            frontP99.append(percentile(front.latencies, 0.99))
            acrossP50.append(percentile(across, 0.5))
            acrossP99.append(percentile(across, 0.99))
            watchP50.append(percentile(watched, 0.5))
            watchP99.append(percentile(watched, 0.99))
            print(String(format: "  run %d: writes/s %@ through a front, %@ the front's transaction followed, %@ direct (%.0f%%, %.0f%%); "
                + "write p50 %.0f / %.0f / %.0f µs; front a → subscriber of front b p50 %.0f µs, etcd put → watch p50 %.0f µs",
                run, format(front.rate), format(followed.rate), format(direct.rate), 100 * front.rate / direct.rate,
                100 * followed.rate / direct.rate, frontP50.last!, followedP50.last!, directP50.last!, acrossP50.last!, watchP50.last!))
        }
        print("")
        print("| figure (median of \(runs) runs, \(writers) writers) | through a front | the front's transaction sent to etcd, both fronts following | etcd directly (ceiling) | front ÷ ceiling | followed ÷ ceiling |")
        print("| --- | --- | --- | --- | --- | --- |")
        print(String(format: "| acknowledged writes/s | %@ | %@ | %@ | %.0f%% | %.0f%% |", format(median(frontRate)), format(median(followedRate)),
                     format(median(directRate)), 100 * median(frontRate) / median(directRate), 100 * median(followedRate) / median(directRate)))
        print(String(format: "| write latency p50 / p99 | %.0f / %.0f µs | %.0f / %.0f µs | %.0f / %.0f µs | +%.0f / +%.0f µs | +%.0f / +%.0f µs |",
                     median(frontP50), median(frontP99), median(followedP50), median(followedP99), median(directP50), median(directP99),
                     median(frontP50) - median(directP50), median(frontP99) - median(directP99),
                     median(followedP50) - median(directP50), median(followedP99) - median(directP99)))
        print(String(format: "| write → change seen elsewhere, p50 / p99 | %.0f / %.0f µs (front a → subscriber of front b) | | %.0f / %.0f µs (put → watch event) | +%.0f / +%.0f µs | |",
                     median(acrossP50), median(acrossP99), median(watchP50), median(watchP99),
                     median(acrossP50) - median(watchP50), median(acrossP99) - median(watchP99)))
        print(String(format: "| CPU per write of a front (user + system) | %.2f ms front a, %.2f ms front b | %.2f ms each front | | | |",
                     median(forwardingCPU), median(otherFrontCPU), median(followingCPU)))
        let members = (0..<3).map { index in median(memberCPU.map { $0[index] }) }
        print(String(format: "| CPU per write of each etcd member, busiest (the leader) first | %.2f, %.2f, %.2f ms | | | front a ÷ busiest member: %.2f | |",
                     members[0], members[1], members[2], median(forwardingCPU) / members[0]))
        print(String(format: "| read at front b, p50 / p99 (idle) | plain Get %.0f / %.0f µs; consistent Get %.0f / %.0f µs | | | | |",
                     median(plainReadP50), median(plainReadP99), median(consistentP50), median(consistentP99)))
    }

    /// `samples` plain and `samples` consistent `Get`s of one key at a front, one at a time, in µs.
    static func reads(at runtimeDirectory: String, samples: Int) throws -> (plain: [Double], consistent: [Double]) {
        let client = try WireClient(runtimeDirectory: runtimeDirectory)
        _ = try client.put("read.k", .with { $0.intValue = 1 })
        var plain: [Double] = [], consistent: [Double] = []
        for _ in 0..<samples {
            var begin = now()
            _ = try client.get("read.k")
            plain.append(Double(now() - begin) / 1000)
            begin = now()
            _ = try client.get("read.k", consistent: true)
            consistent.append(Double(now() - begin) / 1000)
        }
        return (plain.sorted(), consistent.sorted())
    }

    private static func etcdVersion() -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
        process.arguments = ["--version"]
        let pipe = Pipe()
        process.standardOutput = pipe
        guard (try? process.run()) != nil else { return "?" }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text.split(separator: "\n").first.map { String($0.split(separator: " ").last ?? "?") } ?? "?"
    }

    private static func waitUntilReachable(_ runtimeDirectory: String) throws {
        let client = try WireClient(runtimeDirectory: runtimeDirectory)
        for _ in 0..<600 {
            if (try? client.ping(timeoutMilliseconds: 500))?.upstream.reachable == true { return }
            usleep(50_000)
        }
        throw ValidationError("the front in \(runtimeDirectory) did not reach etcd")
    }

    /// `writers` threads each writing in turn through its own connection to the front for
    /// `seconds`: the rate of acknowledged writes and each write's latency in µs.
    static func frontPuts(runtimeDirectory: String, writers: Int, seconds: Double) throws -> (rate: Double, latencies: [Double]) {
        let results = Locked<[[Double]]>([])
        let failures = Locked(0)
        let deadline = now() + UInt64(seconds * 1e9)
        let started = now()
        // A thread per writer (concurrentPerform would run only as many as there are CPUs).
        let threads = (0..<writers).map { writer in
            Thread {
                guard let client = try? WireClient(runtimeDirectory: runtimeDirectory) else { return failures.withLock { $0 += 1 } }
                var latencies: [Double] = []
                var index = 0
                let value = Beacon_V1_Value.with { $0.stringValue = String(repeating: "v", count: 64) }
                while now() < deadline {
                    let begin = now()
                    do {
                        _ = try client.put("bench.w\(writer).\(index % 1000)", value, writeID: Array("w\(writer)-\(index)".utf8))
                        latencies.append(Double(now() - begin) / 1000)
                    } catch {
                        failures.withLock { $0 += 1 }
                    }
                    index += 1
                }
                results.withLock { $0.append(latencies) }
            }
        }
        threads.forEach { $0.start() }
        while results.withLock({ $0.count }) + failures.withLock({ $0 }) < writers && now() < deadline + 30_000_000_000 { usleep(10_000) }
        let elapsed = Double(now() - started) / 1e9
        let all = results.withLock { $0.flatMap { $0 } }.sorted()
        if failures.withLock({ $0 }) > 0 { print("  (\(failures.withLock { $0 }) writes through the front failed)") }
        return (Double(all.count) / elapsed, all)
    }

    /// The ceiling: `writers` tasks each putting in turn through one Swift gRPC client to etcd.
    static func directPuts(cluster: BenchEtcdCluster, writers: Int, seconds: Double) throws -> (rate: Double, latencies: [Double]) {
        let value = Data(repeating: 0x76, count: 64)
        return try transactions(cluster: cluster, writers: writers, seconds: seconds, what: "direct puts") { writer, index, _ in
            .with { $0.success = [.with { $0.requestPut = .with { $0.key = Data("direct/w\(writer).\(index % 1000)".utf8); $0.value = value } }] }
        }
    }

    /// The front's own transaction for each put, sent as ``directPuts`` sends its puts, under the
    /// prefix both fronts follow: what etcd and the following fronts spend on a front's writes,
    /// without the front that forwards them. Returns once both fronts' journals show them all.
    static func followedTransactions(cluster: BenchEtcdCluster, fronts: [String], writers: Int,
                                     seconds: Double) throws -> (rate: Double, latencies: [Double]) {
        let prefix = DaemonConfiguration.EtcdSettings(endpoints: []).prefix
        let value = Beacon_V1_Value.with { $0.stringValue = String(repeating: "v", count: 64) }
        let result = try transactions(cluster: cluster, writers: writers, seconds: seconds, what: "front transactions") { writer, index, lease in
            let put = Beacon_V1_Put.with {
                $0.key = "bench.d\(writer).\(index % 1000)"
                $0.value = value
                $0.writeID = Data("d\(writer)-\(index)".utf8)
            }
            return try EtcdFrontTransaction.put(put, peer: "bench", prefix: prefix, nowMilliseconds: UInt64(Date().timeIntervalSince1970 * 1000),
                                                 writeIDLease: lease)
        }
        let client = try EtcdClient(endpoints: try cluster.endpoints.map { try EtcdEndpoint(parsing: $0) })
        defer { client.close() }
        let head = UInt64(try blocking { try await client.status() }.header.revision)
        for front in fronts {
            let wire = try WireClient(runtimeDirectory: front)
            let deadline = Date().addingTimeInterval(60)
            while (try? wire.ping(timeoutMilliseconds: 1000))?.headRevision ?? 0 < head {
                guard Date() < deadline else { throw ValidationError("a front's journal did not reach etcd's revision \(head) within a minute") }
                usleep(50_000)
            }
        }
        return result
    }

    /// `writers` tasks each sending, in turn, the transaction `request(writer, index, lease)`
    /// through one Swift gRPC client to etcd for `seconds`; `lease` is one granted for the run.
    private static func transactions(cluster: BenchEtcdCluster, writers: Int, seconds: Double, what: String,
                                     request: @escaping @Sendable (Int, Int, Int64) throws -> Etcdserverpb_TxnRequest) throws -> (rate: Double, latencies: [Double]) {
        let client = try EtcdClient(endpoints: try cluster.endpoints.map { try EtcdEndpoint(parsing: $0) })
        defer { client.close() }
        let failures = Locked(0)
        let result = try blocking {
            let lease = try await client.grantLease(seconds: 3600).id
            let started = ContinuousClock.now
            let deadline = started + .milliseconds(Int(seconds * 1000))
            let latencies = await withTaskGroup(of: [Double].self) { group in
                for writer in 0..<writers {
                    group.addTask {
                        var latencies: [Double] = []
                        var index = 0
                        while ContinuousClock.now < deadline {
                            let begin = ContinuousClock.now
                            // Sent again when a connection closes, as a front does.
                            if let transaction = try? request(writer, index, lease), (try? await client.txn(transaction, idempotent: true)) != nil {
                                latencies.append(Double((ContinuousClock.now - begin) / .microseconds(1)))
                            } else {
                                failures.withLock { $0 += 1 }
                            }
                            index += 1
                        }
                        return latencies
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            let elapsed = Double((ContinuousClock.now - started) / .milliseconds(1)) / 1000
            return (Double(latencies.count) / elapsed, latencies.sorted())
        }
        if failures.withLock({ $0 }) > 0 { print("  (\(failures.withLock { $0 }) \(what) failed, not counted)") }
        return result
    }

    /// A write at front `from` (one at a time) to its diff at a subscriber of front `to`, in µs.
    static func frontToFront(from: String, to: String, samples: Int) throws -> [Double] {
        let writer = try WireClient(runtimeDirectory: from)
        let subscriber = try WireClient(runtimeDirectory: to)
        try subscriber.subscribe("lat.")
        usleep(200_000)
        var latencies: [Double] = []
        for index in 0..<samples {
            let begin = now()
            _ = try writer.put("lat.k", .with { $0.intValue = Int64(index) })
            while true {
                guard let publication = try subscriber.receivePublication(timeoutMilliseconds: 5000) else {
                    throw ValidationError("no diff at front b within 5 s")
                }
                if case .diff(let diff) = publication, diff.event.change.value.intValue == Int64(index) { break }
            }
            latencies.append(Double(now() - begin) / 1000)
        }
        return latencies.sorted()
    }

    /// etcd's own: a put through one member to the event at a watch on another, in µs.
    static func putToWatch(cluster: BenchEtcdCluster, samples: Int) throws -> [Double] {
        let writer = try EtcdClient(endpoints: [try EtcdEndpoint(parsing: cluster.endpoints[0])])
        let watcher = try EtcdClient(endpoints: [try EtcdEndpoint(parsing: cluster.endpoints[1])])
        defer {
            writer.close()
            watcher.close()
        }
        return try blocking {
            let seen = AsyncStream<Int64>.makeStream()
            // A watch that ends (its connection closed) is opened again after the last revision seen.
            let next = Locked(try await watcher.range(.with { $0.key = Data("raw/".utf8) }).header.revision + 1)
            let watch = Task {
                while !Task.isCancelled {
                    try? await watcher.watch(prefix: Array("raw/".utf8), from: next.withLock { $0 }) { update in
                        guard case .events(let events, _) = update else { return true }
                        for event in events {
                            next.withLock { $0 = event.kv.modRevision + 1 }
                            seen.continuation.yield(event.kv.modRevision)
                        }
                        return true
                    }
                }
            }
            defer { watch.cancel() }
            // The watch is in place once a first put arrives through it.
            var events = seen.stream.makeAsyncIterator()
            let first = try await writer.txn(.with { $0.success = [.with { $0.requestPut = .with { $0.key = Data("raw/k".utf8) } }] },
                                             idempotent: true).header.revision
            while let revision = await events.next(), revision < first {}
            var latencies: [Double] = []
            for _ in 0..<samples {
                let begin = ContinuousClock.now
                let revision = try await writer.txn(.with { $0.success = [.with { $0.requestPut = .with { $0.key = Data("raw/k".utf8) } }] },
                                                    idempotent: true).header.revision
                while let seenRevision = await events.next(), seenRevision < revision {}
                latencies.append(Double((ContinuousClock.now - begin) / .microseconds(1)))
            }
            return latencies.sorted()
        }
    }
}

/// Runs `body` on Swift concurrency's threads and waits for it on this one.
func blocking<Result: Sendable>(_ body: @escaping @Sendable () async throws -> Result) throws -> Result {
    let done = DispatchSemaphore(value: 0)
    let outcome = Locked<Swift.Result<Result, any Error>?>(nil)
    Task {
        let result: Swift.Result<Result, any Error>
        do { result = .success(try await body()) } catch { result = .failure(error) }
        outcome.withLock { $0 = result }
        done.signal()
    }
    done.wait()
    return try outcome.withLock { $0 }!.get()
}

/// Three `etcd` members on Unix sockets in `directory`, for a benchmark run.
final class BenchEtcdCluster {
    let endpoints: [String]
    private var processes: [Process] = []

    init(directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let cluster = (0..<3).map { "m\($0)=unix://m\($0).peer:1" }.joined(separator: ",")
        endpoints = (0..<3).map { "unix://\(directory)/m\($0).client:1" }
        for member in 0..<3 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/etcd")
            process.currentDirectoryURL = URL(fileURLWithPath: directory)
            process.arguments = ["--name", "m\(member)", "--data-dir", "m\(member).data",
                                 "--listen-client-urls", "unix://m\(member).client:1", "--advertise-client-urls", "unix://m\(member).client:1",
                                 "--listen-peer-urls", "unix://m\(member).peer:1", "--initial-advertise-peer-urls", "unix://m\(member).peer:1",
                                 "--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", directory]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            processes.append(process)
        }
        let client = try EtcdClient(endpoints: try endpoints.map { try EtcdEndpoint(parsing: $0) }, callTimeout: .seconds(1))
        defer { client.close() }
        for _ in 0..<300 {
            if let status = try? blocking({ try await client.status() }), status.leader != 0 { return }
            usleep(100_000)
        }
        stop()
        throw ValidationError("the etcd cluster in \(directory) did not elect a leader within 30 s")
    }

    /// CPU seconds (user + system) each member has used so far, from `/proc`.
    func memberCPUSeconds() -> [Double] {
        processes.map { DaemonUnderTest.cpuUse(statFile: "/proc/\($0.processIdentifier)/stat")?.seconds ?? 0 }
    }

    func stop() {
        for process in processes where process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        processes.removeAll()
    }
}
#endif
