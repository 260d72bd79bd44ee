import BeaconJournal
import BeaconLocking
import BeaconProtocol
import BeaconWire
import Foundation
import Testing
import BeaconTestSupport

@Suite(.timeLimit(.minutes(4)), .serialized, .offThePool)
struct DaemonProcessTests {
    /// A SIGTERM that came once the daemon answered, but before the service group trapped the
    /// signal, ended the process at once: exit by signal 15, sockets left behind (seen on a
    /// loaded machine). Stop signals are trapped before the server starts now.
    @Test func aSIGTERMTheMomentTheDaemonAnswersIsACleanStop() throws {
        let dir = try temporaryDirectory()
        for trial in 0..<20 {
            let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
            let status = daemon.stop()
            #expect(daemon.process.terminationReason == .exit && status == 0, "trial \(trial): \(daemon.process.terminationReason) \(status)")
            #expect(!FileManager.default.fileExists(atPath: dir + "/run/" + WireEndpoint.requestSocketName), "trial \(trial)")
        }
    }

    @Test func killNineLosesNoAcknowledgedWriteAndRevisionsContinue() async throws {
        let dir = try temporaryDirectory()
        var daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let acknowledged = Locked<[(revision: UInt64, key: String, value: Int64)]>([])
        let writerDone = DispatchSemaphore(value: 0)
        let runtimeDirectory = daemon.runtimeDirectory
        Thread.detachNewThread {
            defer { writerDone.signal() }
            guard let client = try? WireClient.patient(runtimeDirectory: runtimeDirectory) else { return }
            var i: Int64 = 0
            while true {
                let key = "k\(i % 100)"
                let value = Beacon_V1_Value.with { $0.intValue = i }
                guard let reply = try? client.put(key, value, timeoutMilliseconds: 1000) else { return }
                acknowledged.withLock { $0.append((reply.revision, key, i)) }
                i += 1
            }
        }
        // Killed once many writes are acknowledged (while more are in flight).
        #expect(waitUntil(seconds: 60) { acknowledged.withLock { $0.count } >= 200 }, "the writer is acknowledged many times")
        #expect(daemon.stop(signal: SIGKILL) == SIGKILL)
        writerDone.wait()
        let acks = acknowledged.withLock { $0 }

        daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let head = try client.stats().headRevision
        let maxAcked = try #require(acks.map(\.revision).max())
        #expect(head >= maxAcked)
        // Every revision from 1 to head is in the journal exactly once, in order.
        var revisions: [UInt64] = []
        var values: [UInt64: Int64] = [:]
        var since: UInt64 = 0
        while true {
            let page = try client.delta(prefix: "", since: since)
            for event in page.events {
                revisions.append(event.revision)
                values[event.revision] = event.change.value.intValue
            }
            since = page.revision
            if !page.more { break }
        }
        #expect(revisions == Array(1...head))
        for ack in acks { #expect(values[ack.revision] == ack.value, "acknowledged revision \(ack.revision) lost") }
        // The next write continues the sequence.
        #expect(try client.put("after", .with { $0.intValue = 1 }).revision == head + 1)
        #expect(daemon.stop() == 0)
    }

    @Test func underSystemdLogLinesCarryTheirPriorityAndNoTimestamp() throws {
        let dir = try temporaryDirectory()
        // What systemd does: $JOURNAL_STREAM names stderr's device and inode.
        let journald = try DaemonProcess(
            runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", launcher: "/bin/sh",
            launcherArguments: ["-c", #"JOURNAL_STREAM=$(stat -L -c %d:%i /proc/self/fd/2) exec "$0" "$@""#])
        #expect(journald.stop() == 0)
        let lines = journald.stderr.split(separator: "\n")
        #expect(lines.count >= 2)
        for line in lines {
            #expect(line.wholeMatch(of: /<[2-7]>[^<].*/) != nil, "\(line)")
            #expect(line.firstMatch(of: /20\d\d-\d\d-\d\dT/) == nil, "\(line)")
        }
        #expect(lines.contains { $0.hasPrefix("<6>") && $0.contains("beacond stopped") })
        // Elsewhere (stderr redirected to a file of its own), lines are stamped as before.
        let plain = try DaemonProcess(
            runtimeDirectory: dir + "/run2", stateDirectory: dir + "/state2", environment: ["JOURNAL_STREAM": "1:2"])
        #expect(plain.stop() == 0)
        #expect(plain.stderr.split(separator: "\n").allSatisfy { $0.firstMatch(of: /20\d\d-\d\d-\d\dT/) != nil })
    }

    @Test func aSecondDaemonOnTheSameRuntimeDirectoryRefusesToStart() throws {
        let dir = try temporaryDirectory()
        let first = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let second = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/other", waitUntilReady: false)
        #expect(second.exitStatus() == 69)
        #expect(second.stderr.contains("another beacond (pid \(first.process.processIdentifier)) is running"))
        // The same journal from another runtime directory is refused too.
        let third = try DaemonProcess(runtimeDirectory: dir + "/run3", stateDirectory: dir + "/state", waitUntilReady: false)
        #expect(third.exitStatus() == 69)
        #expect(third.stderr.contains("in use by another process"))
        // The first one is unharmed.
        #expect(try WireClient.patient(runtimeDirectory: first.runtimeDirectory).ping().headRevision == 0)
        #expect(first.stop() == 0)
    }

    @Test func aCorruptJournalStopsStartUpWithAClearMessage() throws {
        let dir = try temporaryDirectory()
        try FileManager.default.createDirectory(atPath: dir + "/state", withIntermediateDirectories: true)
        try Data(repeating: 0x5A, count: 16_384).write(to: URL(fileURLWithPath: dir + "/state/journal.sqlite"))
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", waitUntilReady: false)
        #expect(daemon.exitStatus() == 74)
        #expect(daemon.stderr.contains("journal corrupt"), "\(daemon.stderr)")
        // Nothing was overwritten.
        #expect(try Data(contentsOf: URL(fileURLWithPath: dir + "/state/journal.sqlite")) == Data(repeating: 0x5A, count: 16_384))
    }

    @Test func anInvalidConfigurationFileNamesTheLine() throws {
        let dir = try temporaryDirectory()
        try "heartbeat_ms = 100\ndurability = sometimes\n".write(toFile: dir + "/b.conf", atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state",
                                       extraArguments: ["--config", dir + "/b.conf"], waitUntilReady: false)
        #expect(daemon.exitStatus() == 78)
        #expect(daemon.stderr.contains("b.conf:2: 'durability' is 'normal' or 'full', not 'sometimes'"), "\(daemon.stderr)")
    }

    @Test func theLoopAndLibzmqsIOThreadShareOneCPUAsBatchWork() throws {
        let dir = try temporaryDirectory()
        // The default (`auto`), which the suite's daemons turn off.
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--loop-cpu", "auto"])
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try client.put("placed", .with { $0.intValue = 1 })
        let threads = try daemonThreads(daemon.process.processIdentifier)
        let process = try #require(threads.first { $0.name == "beacond" })
        let loop = try #require(threads.first { $0.name == "beacond-loop" })
        let io = try #require(threads.first { $0.name == "ZMQbg/IO/0" })
        let commit = try #require(threads.first { $0.name == "beacond-commit" })
        let last = try #require(process.cpus.last)
        #expect(loop.cpus == [last] && io.cpus == [last], "\(threads)")
        #expect(loop.policy == 3 && io.policy == 3, "SCHED_BATCH: \(threads)")
        // The commit thread, and the thread that started the loop, run anywhere as before.
        #expect(commit.cpus == process.cpus && commit.policy == 0 && process.policy == 0, "\(threads)")
        #expect(daemon.stderr.contains("the loop and libzmq's I/O thread run on one CPU, as batch work"), "\(daemon.stderr)")
        #expect(daemon.stop() == 0)

        let unplaced = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state", extraArguments: ["--loop-cpu", "off"])
        _ = try WireClient.patient(runtimeDirectory: unplaced.runtimeDirectory).put("placed", .with { $0.intValue = 2 })
        let free = try daemonThreads(unplaced.process.processIdentifier)
        let freeProcess = try #require(free.first { $0.name == "beacond" })
        for name in ["beacond-loop", "ZMQbg/IO/0"] {
            let thread = try #require(free.first { $0.name == name })
            #expect(thread.cpus == freeProcess.cpus && thread.policy == 0, "\(free)")
        }
        #expect(unplaced.stop() == 0)
    }

    @Test func sigtermStopsCleanlyWithTheJournalCheckpointed() throws {
        let dir = try temporaryDirectory()
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: dir + "/state")
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for i in 0..<50 { _ = try client.put("k\(i)", .with { $0.intValue = Int64(i) }) }
        #expect(daemon.stop(signal: SIGTERM) == 0)
        #expect(daemon.stderr.contains("beacond stopped"))
        let wal = (try? FileManager.default.attributesOfItem(atPath: dir + "/state/journal.sqlite-wal")[.size] as? NSNumber)?.intValue ?? 0
        #expect(wal == 0)
        let journal = try Journal(path: dir + "/state/journal.sqlite")
        #expect(journal.headRevision == 50)
        #expect(try journal.loadState().count == 50)
    }

    @Test(.enabled(if: canMountTmpfs, "needs root and mount rights for a small tmpfs"))
    func aReadOnlyJournalStopsStartUpWithAClearMessage() async throws {
        let dir = try temporaryDirectory()
        let state = dir + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try #require(runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", state]) == 0)
        defer { runTool("/bin/umount", ["-l", state]) }
        let first = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: state)
        _ = try WireClient.patient(runtimeDirectory: first.runtimeDirectory).put("k", .with { $0.intValue = 1 })
        #expect(first.stop() == 0)
        try #require(runTool("/bin/mount", ["-o", "remount,ro", state]) == 0)
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: state, waitUntilReady: false)
        #expect(daemon.exitStatus() == 74)
        #expect(daemon.stderr.contains("journal read-only"), "\(daemon.stderr)")
    }

    @Test(.enabled(if: canMountTmpfs, "needs root and mount rights for a small tmpfs"))
    func aFullDiskRefusesWritesButKeepsServingReads() async throws {
        let dir = try temporaryDirectory()
        let state = dir + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try #require(runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", state]) == 0, "mount tmpfs failed")
        defer { runTool("/bin/umount", ["-l", state]) }
        let daemon = try DaemonProcess(runtimeDirectory: dir + "/run", stateDirectory: state)
        let client = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try client.put("small", .with { $0.stringValue = "kept" })
        let big = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 7, count: 200_000) }
        var refusal: WireError?
        for i in 0..<40 {
            do { _ = try client.put("big\(i)", big) } catch { refusal = error; break }
        }
        let error = try #require(refusal, "the disk never filled")
        #expect(error.reply?.code == .readOnly, "\(error)")
        #expect(try client.get("small").value.stringValue == "kept")
        let stats = try client.stats()
        #expect(stats.readOnly)
        let head = stats.headRevision
        // The refused write changed nothing, and the journal matches what was acknowledged.
        #expect(try client.history("", from: 0).events.last?.revision == head)

        // A pipelined batch (committed on the commit thread) fails whole and is refused whole.
        // Past the read-only back-off: waited for, not slept on.
        let backOffEnds = ContinuousClock.now + .seconds(30)
        while try client.stats().readOnly && ContinuousClock.now < backOffEnds { try await Task.sleep(for: .milliseconds(20)) }
        #expect(try !client.stats().readOnly, "the back-off never ended")
        let pipeliner = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let medium = Beacon_V1_Value.with { $0.bytesValue = Data(repeating: 9, count: 100_000) }
        for i in 0..<60 { try pipeliner.send(.put(.with { $0.key = "batch\(i)"; $0.value = medium })) }
        // Decided against the staged puts: it must not stand if they roll back.
        let probe = try pipeliner.send(.put(.with { $0.key = "batch59"; $0.value = .with { $0.intValue = 1 }; $0.createOnly = true }))
        var committed: [UInt64] = []
        var refused = 0
        for _ in 0..<60 {
            let reply = try #require(try pipeliner.receiveReply(timeoutMilliseconds: expectedReplyWait))
            switch reply.result {
            case .write(let write): committed.append(write.revision)
            case .error(let error): #expect(error.code == .readOnly, "\(error)"); refused += 1
            default: Issue.record("unexpected \(reply)")
            }
        }
        #expect(refused > 0)
        let probeReply = try #require(try pipeliner.receiveReply(timeoutMilliseconds: expectedReplyWait))
        #expect(probeReply.id == probe, "replies in request order")
        let batch59Exists = (try? client.get("batch59")) != nil
        // ALREADY_EXISTS only for a key that is durable; otherwise a retryable refusal.
        #expect(probeReply.error.code == (batch59Exists ? .alreadyExists : .readOnly), "\(probeReply)")
        #expect(probeReply.error.headRevision <= head + UInt64(committed.count))
        // What was acknowledged is exactly what the head advanced by; refused writes left no trace.
        #expect(committed == (0..<UInt64(committed.count)).map { head + 1 + $0 })
        #expect(try client.stats().headRevision == head + UInt64(committed.count))
        #expect(try client.get("small").value.stringValue == "kept")
        #expect(daemon.stop() == 0)
    }
}

/// One thread of a process, as /proc shows it: name, the CPUs it may run on, scheduling policy.
struct ThreadInfo: CustomStringConvertible {
    var name: String
    var cpus: [Int]
    var policy: Int
    var description: String { "\(name) cpus \(cpus) policy \(policy)" }
}

func daemonThreads(_ pid: Int32) throws -> [ThreadInfo] {
    let base = "/proc/\(pid)/task"
    return try FileManager.default.contentsOfDirectory(atPath: base).map { tid in
        let name = try String(contentsOfFile: "\(base)/\(tid)/comm", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let status = try String(contentsOfFile: "\(base)/\(tid)/status", encoding: .utf8)
        let list = try #require(status.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list:") }?.split(separator: "\t").last)
        let cpus = list.split(separator: ",").flatMap { range -> [Int] in
            let ends = range.split(separator: "-").compactMap { Int($0) }
            return ends.count == 2 ? Array(ends[0]...ends[1]) : ends
        }
        let sched = try String(contentsOfFile: "\(base)/\(tid)/sched", encoding: .utf8)
        let policyLine = try #require(sched.split(separator: "\n").first { $0.hasPrefix("policy") })
        let policy = try #require(policyLine.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) })
        return ThreadInfo(name: name, cpus: cpus, policy: policy)
    }
}
