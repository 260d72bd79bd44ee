import BeaconProtocol
import BeaconWire
import Foundation
import BeaconTestSupport
import Testing

extension AccessTests {
    /// libzmq's XPUB in manual mode pairs each subscription it hands the daemon with a queue of
    /// connections that an upstream message which is not a subscription knocks out of step, so
    /// that a grant meant for one connection lands on another. Here B (read=app.) sends such a
    /// byte, then root's subscription to `sys.` and B's to `app.` are queued behind it (the
    /// daemon frozen meanwhile): B must get none of root's `sys.` diffs, and root must get them.
    @Test("An upstream message that is not a subscription cannot attach root's subscription to another peer's connection",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func upstreamJunkCannotMisattachSubscriptions() throws {
        let (daemon, dir) = try startDaemon(["allow = uid:0 read=* write=*", "allow = uid:5001 read=app. write=app."])
        defer { daemon.stop() }
        let probe = try AccessProbe(directory: dir)
        let pid = daemon.process.processIdentifier
        for trial in 0..<3 {
            let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
            try root.subscribe("zzz.")  // connected, with the control topics
            let steps = dir + "/steps\(trial)"
            try FileManager.default.createDirectory(atPath: steps, withIntermediateDirectories: true)
            chmod(steps, 0o755)
            let secret = "sys.secret\(trial)"
            var rootSaw: Set<String> = []
            /// Reads root's publications for a while: a subscriber that reads is one that reconnects.
            func readRoot(for seconds: Double) throws {
                let end = Date().addingTimeInterval(seconds)
                while Date() < end {
                    if case .diff(let diff) = try root.receivePublication(timeoutMilliseconds: 20) { rootSaw.insert(diff.event.change.key) }
                }
            }
            let lines = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
                "--runtime-dir", daemon.runtimeDirectory, "--junk-steps", steps, "--subscribe", "app.", "--listen-ms", "3500",
            ]) {
                kill(pid, SIGSTOP)
                defer { kill(pid, SIGCONT) }
                _ = FileManager.default.createFile(atPath: steps + "/junk", contents: nil)
                Thread.sleep(forTimeInterval: 0.15)
                try root.subscribe("sys.")
                Thread.sleep(forTimeInterval: 0.15)
                _ = FileManager.default.createFile(atPath: steps + "/subscribe", contents: nil)
                Thread.sleep(forTimeInterval: 0.15)
                kill(pid, SIGCONT)
                try readRoot(for: 0.7)
                for i in 0..<15 {
                    _ = try root.put(secret, .with { $0.intValue = Int64(i) })
                    _ = try root.put("app.x", .with { $0.intValue = Int64(i) })
                    try readRoot(for: 0.1)
                }
            }
            #expect(!lines.contains { $0.hasPrefix("diff sys.") }, "trial \(trial): B received root's sys. diffs: \(lines.filter { $0.hasPrefix("diff") })")
            #expect(lines.contains("diff app.x"), "trial \(trial): B's own app. subscription works again: \(lines.suffix(5))")
            #expect(rootSaw.contains(secret), "trial \(trial): root's own sys. subscription delivers: \(rootSaw)")
        }
    }
}

extension AccessTests {
    /// Rules that change on reload open the publish socket anew; with a tcp endpoint that once
    /// bound before the old socket let go of the port, and the daemon stopped.
    @Test("Reloads that reopen a tcp publish endpoint never stop the daemon, and subscribers come back")
    func reloadsWithATCPPublishEndpointKeepTheDaemonRunning() throws {
        let me = "uid:\(getuid())"
        // Ports the kernel chooses: the publish socket opened anew binds the one it was given.
        let tcp = ["tcp_insecure = true", "publish_endpoint = tcp://127.0.0.1:*", "request_endpoint = tcp://127.0.0.1:*"]
        let (daemon, dir) = try startDaemon(tcp + ["allow = \(me) read=* write=*", "allow = insecure read=* write=*"])
        defer { daemon.stop() }
        let config = dir + "/beacond.conf"
        let (request, publish) = try daemon.tcpEndpoints()
        let subscriber = try WireClient(requestEndpoint: request, publishEndpoint: publish, curve: nil)
        try subscriber.subscribe("app.")
        let writer = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        for round in 0..<12 {
            // Rules that differ every round: each reload opens the publish socket anew.
            try (["socket_mode = 0666"] + tcp + ["allow = \(me) read=* write=*", "allow = insecure read=* write=*",
                                                  "allow = uid:\(60_000 + round) read=app."])
                .joined(separator: "\n").write(toFile: config, atomically: true, encoding: .utf8)
            kill(daemon.process.processIdentifier, SIGHUP)
            Thread.sleep(forTimeInterval: 0.25)
            try #require(daemon.process.isRunning, "round \(round): beacond stopped: \(daemon.stderr)")
        }
        // The tcp subscriber is back: a write reaches it.
        var delivered = false
        let deadline = Date().addingTimeInterval(30)
        while !delivered && Date() < deadline {
            _ = try writer.put("app.after", .with { $0.intValue = 1 })
            while let publication = try subscriber.receivePublication(timeoutMilliseconds: 100) {
                if case .diff(let diff) = publication, diff.event.change.key == "app.after" { delivered = true }
            }
        }
        #expect(delivered, "the tcp subscriber receives diffs after the reloads")
        #expect(!daemon.stderr.contains("stopping"), "\(daemon.stderr)")
    }
}

extension AccessTests {
    /// Write ids were looked up before rights were checked, and shared by every peer: a read-only
    /// peer learned another's write (`replayed`, with its revision), and a peer that used an id
    /// first made a later write with that id change nothing. Sessions had no owner: anyone could
    /// end root's session and delete its keys.
    @Test("Write ids and sessions belong to the peer that uses them",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func writeIDsAndSessionsBelongToTheirPeer() throws {
        let (daemon, dir) = try startDaemon([
            "allow = uid:0 read=* write=*", "allow = uid:5001 read=app.", "allow = uid:5002 read=app. write=app.",
        ])
        defer { daemon.stop() }
        let probe = try AccessProbe(directory: dir)
        let runtime = ["--runtime-dir", daemon.runtimeDirectory]
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        _ = try root.put("app.secret", .with { $0.intValue = 42 }, writeID: Array("root-1".utf8))

        // A read-only peer asking with root's write id is refused, and learns nothing.
        let reader = try probe.run(identity: ["--reuid=5001", "--regid=5001"], runtime + ["--write", "app.z", "--write-id", "root-1"])
        #expect(AccessProbe.outcome("put", in: reader) == "PERMISSION_DENIED", "\(reader)")

        // A writer that uses an id first does not make root's later write with it a replay.
        let claimer = try probe.run(identity: ["--reuid=5002", "--regid=5002"], runtime + ["--write", "app.claimed", "--write-id", "root-2"])
        #expect(claimer.contains("put OK 1"), "\(claimer)")
        let mine = try root.put("app.mine", .with { $0.intValue = 7 }, writeID: Array("root-2".utf8))
        #expect(!mine.replayed)
        #expect(try root.get("app.mine").value.intValue == 7)
        // Root's own retry is still a replay.
        #expect(try root.put("app.mine", .with { $0.intValue = 8 }, writeID: Array("root-2".utf8)).replayed)

        // Root's session: another writer can neither see its keys nor end it.
        _ = try root.put("app.held", .with { $0.intValue = 1 }, session: Array("root-session".utf8))
        _ = try root.keepAlive(session: Array("root-session".utf8), ttlMilliseconds: 600_000)
        let ender = try probe.run(identity: ["--reuid=5002", "--regid=5002"], runtime + ["--end-session", "root-session"])
        #expect(ender.contains("end-session OK 0"), "\(ender)")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(try root.get("app.held").value.intValue == 1, "root's session-bound key is still there")
        #expect(try root.keepAlive(session: Array("root-session".utf8), ttlMilliseconds: 600_000).keys == 1)
    }
}

let canAdministerUsers = canSwitchUsers && ["/usr/sbin/useradd", "/usr/sbin/groupadd", "/usr/bin/gpasswd", "/usr/sbin/userdel",
                                            "/usr/sbin/groupdel"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }

extension AccessTests {
    /// With `allow = group:NAME read=sys.`, taking a user out of the group and reloading denied
    /// its gets, but its live subscription kept delivering `sys.` diffs: the reload compared rule
    /// texts, not the rights they now give each connected peer.
    @Test("A reload after a user leaves a group ends the subscriptions that group's rule granted",
          .enabled(if: canAdministerUsers, "needs root, setpriv, useradd, groupadd and gpasswd"))
    func leavingAGroupEndsItsSubscriptionsOnReload() throws {
        let user = "beacont5003", group = "beaconsec5003"
        runTool("/usr/sbin/userdel", [user])
        runTool("/usr/sbin/groupdel", [group])
        try #require(runTool("/usr/sbin/groupadd", [group]) == 0)
        try #require(runTool("/usr/sbin/useradd", ["-u", "5003", "-M", "-N", "-g", "nogroup", user]) == 0)
        defer {
            runTool("/usr/sbin/userdel", [user])
            runTool("/usr/sbin/groupdel", [group])
        }
        try #require(runTool("/usr/bin/gpasswd", ["-a", user, group]) == 0)
        let (daemon, dir) = try startDaemon(["allow = uid:0 read=* write=*", "allow = uid:5003 read=app.", "allow = group:\(group) read=sys."])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let probe = try AccessProbe(directory: dir)
        let stderrPath = daemon.stderrPath
        func reloads() -> Int {
            ((try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "").components(separatedBy: "configuration reloaded").count - 1
        }
        let lines = try probe.run(identity: ["--reuid=5003", "--regid=65534"], [
            "--runtime-dir", daemon.runtimeDirectory, "--subscribe", "sys.", "--listen-ms", "4000",
        ]) {
            for i in 0..<5 {
                _ = try root.put("sys.before", .with { $0.intValue = Int64(i) })
                Thread.sleep(forTimeInterval: 0.1)
            }
            try #require(runTool("/usr/bin/gpasswd", ["-d", user, group]) == 0)
            kill(daemon.process.processIdentifier, SIGHUP)
            let deadline = Date().addingTimeInterval(30)
            while reloads() < 1 && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
            Thread.sleep(forTimeInterval: 0.5)  // time for a subscriber to reconnect and subscribe again
            for i in 0..<10 {
                _ = try root.put("sys.after", .with { $0.intValue = Int64(i) })
                Thread.sleep(forTimeInterval: 0.1)
            }
        }
        #expect(lines.contains("diff sys.before"), "the group's rule granted the subscription: \(lines.prefix(5))")
        #expect(!lines.contains("diff sys.after"), "a diff reached the user after it left the group")
        let denied = try probe.run(identity: ["--reuid=5003", "--regid=65534"], ["--runtime-dir", daemon.runtimeDirectory, "--key", "sys.after"])
        #expect(AccessProbe.outcome("get", in: denied) == "PERMISSION_DENIED", "\(denied)")
    }
}

extension AccessTests {
    /// A diff carries a sequencing mark for every followed prefix its key starts with. B (read=app.)
    /// following `app.` got the marks of root's `ap` and of the empty prefix in its `app.x` diffs:
    /// `parts 2` told it that `apps.secret` was written in the same transaction, and the previous
    /// revisions dated every write to keys it may not read.
    @Test("A diff carries only the marks of prefixes every peer that may receive it may read",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func diffsCarryOnlyMarksTheReaderMayRead() throws {
        let (daemon, dir) = try startDaemon(["allow = uid:0 read=* write=*", "allow = uid:5001 read=app. write=app."])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        try root.subscribe("ap")
        let everything = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        try everything.subscribe("")
        let probe = try AccessProbe(directory: dir)
        var rootMarks: Set<String> = []
        let lines = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
            "--runtime-dir", daemon.runtimeDirectory, "--subscribe", "app.", "--listen-ms", "1500",
        ]) {
            Thread.sleep(forTimeInterval: 0.3)
            for i in 0..<5 {
                let value = Beacon_V1_Value.with { $0.intValue = Int64(i) }
                _ = try root.transaction([
                    .with { $0.put = .with { $0.key = "app.x"; $0.value = value } },
                    .with { $0.put = .with { $0.key = "apps.secret"; $0.value = value } },
                ])
                _ = try root.put("sys.other", value)
                Thread.sleep(forTimeInterval: 0.05)
            }
            let end = Date().addingTimeInterval(0.5)
            while Date() < end {
                if case .diff(let diff) = try root.receivePublication(timeoutMilliseconds: 20) {
                    rootMarks.formUnion(diff.marks.map(\.prefix))
                }
            }
        }
        let marks = lines.filter { $0.hasPrefix("marks app.x") }
        #expect(!marks.isEmpty, "B received its app.x diffs: \(lines.suffix(5))")
        for line in marks {
            let prefixes = line.split(separator: " ").dropFirst(2).first.map { $0.split(separator: ",").map(String.init) } ?? []
            #expect(prefixes == ["app."], "B may read only under app.: \(line)")
        }
        #expect(!lines.contains { $0.hasPrefix("diff apps.") || $0.hasPrefix("diff sys.") })
        #expect(rootMarks.contains("ap"), "a diff no narrower scope may receive keeps root's mark: \(rootMarks)")
    }
}

extension AccessTests {
    /// Bundles (PROTOCOL.md §5.4) are granted as a subscription to their prefix is: only to a peer
    /// that may read every key under it.
    @Test("A bundle subscription delivers only what the peer may read: its own prefix's bundles, none of a wider or another prefix",
          .enabled(if: canSwitchUsers, "needs root and setpriv to run clients as other users"))
    func bundlesAreGrantedAsPrefixesAre() throws {
        let (daemon, dir) = try startDaemon(["allow = uid:0 read=* write=*", "allow = uid:5001 read=app. write=app."])
        defer { daemon.stop() }
        let root = try WireClient.patient(runtimeDirectory: daemon.runtimeDirectory)
        let probe = try AccessProbe(directory: dir)
        let lines = try probe.run(identity: ["--reuid=5001", "--regid=5001"], [
            "--runtime-dir", daemon.runtimeDirectory, "--subscribe", "#app.#", "--subscribe", "#ap#", "--subscribe", "##",
            "--subscribe", "#apps.#", "--subscribe", "#sys.#", "--listen-ms", "1500",
        ]) {
            Thread.sleep(forTimeInterval: 0.3)
            for i in 0..<5 {
                let value = Beacon_V1_Value.with { $0.intValue = Int64(i) }
                _ = try root.batch([
                    .txn(.with { $0.ops = [
                        .with { $0.put = .with { $0.key = "app.x"; $0.value = value } },
                        .with { $0.put = .with { $0.key = "apps.secret"; $0.value = value } },
                    ] }),
                    .put(.with { $0.key = "sys.other"; $0.value = value }),
                    .put(.with { $0.key = "app.y"; $0.value = value }),
                ])
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
        #expect(lines.contains("diff app.x") && lines.contains("diff app.y"), "the peer's own bundles arrived: \(lines.suffix(5))")
        #expect(!lines.contains { $0.hasPrefix("diff apps.") || $0.hasPrefix("diff sys.") }, "\(lines.filter { $0.hasPrefix("diff") })")
        for line in lines where line.hasPrefix("marks ") {
            let prefixes = line.split(separator: " ").dropFirst(2).first.map { $0.split(separator: ",").map(String.init) } ?? []
            #expect(prefixes.allSatisfy { $0 == "app." }, "marks of prefixes the peer may not read: \(line)")
        }
    }
}
