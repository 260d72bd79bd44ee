@testable import BeaconDaemon
import BeaconProtocol
import BeaconWire
import BeaconZMQ
import Foundation
import Testing
import BeaconTestSupport

/// Bundles (proto/PROTOCOL.md §5.4): a group commit's diffs under a prefix in one message.
@Suite(.timeLimit(.minutes(3)), .offThePool)
struct BundleTests {
    /// Everything a subscriber received, in order, until a heartbeat at `revision` or later (it
    /// comes after every publication of that revision).
    static func publications(_ client: WireClient, through revision: UInt64) throws -> [WireClient.Publication] {
        var received: [WireClient.Publication] = []
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            guard let publication = try client.receivePublication(timeoutMilliseconds: 100) else { continue }
            received.append(publication)
            if case .heartbeat(let heartbeat) = publication, heartbeat.headRevision >= revision { return received }
        }
        Issue.record("revision \(revision) never arrived")
        return received
    }

    static func diffs(_ publications: [WireClient.Publication]) -> [Beacon_V1_Diff] {
        publications.compactMap { if case .diff(let diff) = $0 { diff } else { nil } }
    }

    /// Waits until `counter`'s bundle subscription has taken effect: a bundle of a probe write
    /// under `prefix` reaches it. Its receive timeout is set to 100 ms.
    static func awaitBundles(_ counter: ZMQSocket, writer: WireClient, prefix: String) throws {
        try counter.setReceiveTimeout(milliseconds: 100)
        let deadline = ContinuousClock.now + .seconds(30)
        var subscribed = false
        while !subscribed && ContinuousClock.now < deadline {
            _ = try writer.put(prefix + "probe", .with { $0.intValue = 1 })
            // A receive that times out throws EAGAIN: nothing more has come for now.
            while let frames = (try? counter.receiveMessage()) ?? nil { subscribed = subscribed || frames.count == 2 }
        }
        try #require(subscribed, "the counter's bundle subscription never took effect")
    }

    /// Writes in groups: batches of puts (a group commit each, mostly) under `a.`, `a.b.` and `c.`,
    /// and transactions across them. Returns the last revision.
    static func writeGroups(_ client: WireClient, rounds: Int) throws -> UInt64 {
        var last: UInt64 = 0
        for round in 0..<rounds {
            let puts = (0..<40).map { index -> Beacon_V1_Request.OneOf_Op in
                let key = ["a.k\(index % 5)", "a.b.k\(index % 3)", "c.k"][index % 3]
                return .put(.with {
                    $0.key = key
                    $0.value = .int(Int64(round * 100 + index))
                })
            }
            _ = try client.batch(puts)
            let reply = try client.transaction([putOp("a.x", .int(Int64(round))), putOp("a.b.y", .int(Int64(round))),
                                                putOp("c.z", .int(Int64(round)))])
            last = reply.revision
        }
        return last
    }

    @Test("A subscriber of a prefix's bundles receives the very diffs a subscriber of the prefix does, in order, in fewer messages, with each commit marker after the diffs it closes")
    func bundlesCarryWhatDiffsCarry() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let plain = try daemon.client(), bundled = try daemon.client(), nested = try daemon.client()
        try plain.subscribe("a.")
        try bundled.subscribe("a.", bundled: true)
        try nested.subscribe("a.b.", bundled: true)
        // Counts the messages themselves, which WireClient hides.
        let context = try ZMQContext()
        let counter = try ZMQSocket(context, type: .sub, linger: 0)
        try counter.connect(daemon.configuration.publishEndpoint)
        try counter.subscribe(Array(WireTopic.bundle(of: "a.").utf8))
        for (client, prefix) in [(plain, "a."), (bundled, "a."), (nested, "a.b.")] {
            try awaitSequencing(client, prefix: prefix)
        }
        let writer = try daemon.client()
        try Self.awaitBundles(counter, writer: writer, prefix: "a.")
        let last = try Self.writeGroups(writer, rounds: 20)

        let plainDiffs = Self.diffs(try Self.publications(plain, through: last))
        let bundledPublications = try Self.publications(bundled, through: last)
        let bundledDiffs = Self.diffs(bundledPublications)
        let first = try #require(plainDiffs.first?.event.revision)
        // Both started before the first write, but a bundle subscription may have taken effect a
        // heartbeat apart from the other: compare from the first revision both saw.
        let common = max(first, try #require(bundledDiffs.first?.event.revision))
        #expect(common == 1, "both subscriptions were in effect before the first write")
        #expect(bundledDiffs.filter { $0.event.revision >= common } == plainDiffs.filter { $0.event.revision >= common })
        #expect(plainDiffs.allSatisfy { $0.event.change.key.hasPrefix("a.") })
        #expect(Set(plainDiffs.map(\.event.revision)).count > 400, "every revision under a. arrived")

        let nestedDiffs = Self.diffs(try Self.publications(nested, through: last))
        let nestedExpected = plainDiffs.filter { $0.event.change.key.hasPrefix("a.b.") }
        #expect(nestedDiffs.count == nestedExpected.count)
        for (got, expected) in zip(nestedDiffs, nestedExpected) where got != expected {
            Issue.record("nested: \(got) against \(expected)")
            break
        }

        // A commit marker follows the diffs of its revision: all of its parts under a. came before it.
        var seen: [UInt64: UInt32] = [:]
        var markers = 0
        for publication in bundledPublications {
            switch publication {
            case .diff(let diff): seen[diff.event.revision, default: 0] += 1
            case .commit(let marker):
                guard let mark = marker.marks.first(where: { $0.prefix == "a." }) else { continue }
                markers += 1
                #expect(seen[marker.revision] == mark.parts, "marker of \(marker.revision) came before its diffs")
            case .heartbeat: break
            }
        }
        #expect(markers == 20)

        var messages = 0
        let frame = ZMQMessage()
        while try counter.receive(into: frame, flags: .dontWait) { if !frame.hasMore { messages += 1 } }
        #expect(messages > 0 && messages * 4 < plainDiffs.count, "\(messages) bundles for \(plainDiffs.count) diffs")
        counter.close()
        await daemon.stop()
    }

    @Test("A group larger than a bundle goes in several, each a whole message, the diffs in order")
    func aLargeGroupGoesInSeveralBundles() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let plain = try daemon.client(), bundled = try daemon.client()
        try plain.subscribe("big.")
        try bundled.subscribe("big.", bundled: true)
        let context = try ZMQContext()
        let counter = try ZMQSocket(context, type: .sub, linger: 0)
        try counter.setReceiveHighWaterMark(0)
        try counter.connect(daemon.configuration.publishEndpoint)
        try counter.subscribe(Array(WireTopic.bundle(of: "big.").utf8))
        for client in [plain, bundled] { try awaitSequencing(client, prefix: "big.") }
        let writer = try daemon.client()
        try Self.awaitBundles(counter, writer: writer, prefix: "big.")
        let deadline = ContinuousClock.now + .seconds(30)
        _ = try Self.publications(plain, through: try writer.ping().headRevision)
        _ = try Self.publications(bundled, through: try writer.ping().headRevision)
        // 3 batches of 64 puts of 10 KiB: about 640 KiB a group, over two bundles' worth each.
        var last: UInt64 = 0
        for round in 0..<3 {
            let replies = try writer.batch((0..<64).map { index in
                .put(.with {
                    $0.key = "big.k\(index)"
                    $0.value = .with { $0.bytesValue = Data(repeating: UInt8(round), count: 10_000) }
                })
            })
            last = replies.last?.write.revision ?? last
        }
        let plainDiffs = Self.diffs(try Self.publications(plain, through: last))
        let bundledDiffs = Self.diffs(try Self.publications(bundled, through: last))
        #expect(plainDiffs.count == 192)
        #expect(bundledDiffs.map(\.event.revision) == plainDiffs.map(\.event.revision))
        #expect(bundledDiffs == plainDiffs)
        // Every bundle of the three groups, waited for: a bundle's diffs, counted, reach 192.
        var sizes: [Int] = []
        var counted = 0
        while counted < 192 && ContinuousClock.now < deadline + .seconds(30) {
            guard let frames = (try? counter.receiveMessage()) ?? nil, frames.count == 2 else { continue }
            let bundle = try Beacon_V1_Bundle(serializedBytes: frames[1].bytes)
            let diffs = bundle.diffs.filter { $0.event.change.key != "big.probe" }
            guard !diffs.isEmpty else { continue }
            counted += diffs.count
            sizes.append(frames[1].bytes.count)
        }
        #expect(counted == 192, "the counter's bundles held \(counted) diffs")
        #expect(sizes.count >= 9 && sizes.allSatisfy { $0 <= Publisher.bundleBytes }, "bundles of \(sizes) bytes")
        counter.close()
        await daemon.stop()
    }

    @Test("A subscription to everything receives every key's diffs, and neither bundles nor control messages through it")
    func everythingMeansEveryKey() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let bundled = try daemon.client()
        try bundled.subscribe("a.", bundled: true)
        try awaitSequencing(bundled, prefix: "a.")
        let context = try ZMQContext()
        let everything = try ZMQSocket(context, type: .sub, linger: 0)
        try everything.connect(daemon.configuration.publishEndpoint)
        try everything.subscribe([])
        // Wait until the subscription is in effect: a write reaches it.
        let writer = try daemon.client()
        let frame = ZMQMessage()
        var arrived = false
        for _ in 0..<100 where !arrived {
            _ = try writer.put("a.warm", .int(0))
            usleep(20_000)
            while try everything.receive(into: frame, flags: .dontWait) { arrived = true }
        }
        #expect(arrived)
        let last = try Self.writeGroups(writer, rounds: 3)
        var topics: [String] = []
        var sawLast = false
        let deadline = Date().addingTimeInterval(30)
        let poller = ZMQPoller()
        poller.add(everything)
        while !sawLast && Date() < deadline {
            guard try everything.receive(into: frame, flags: .dontWait) else {
                _ = try poller.poll(timeoutMilliseconds: 100)
                continue
            }
            let topic = String(decoding: frame.bytes, as: UTF8.self)
            topics.append(topic)
            try everything.receive(into: frame)
            if topic == "c.z", let diff = try? Beacon_V1_Diff(frame: frame), diff.event.revision == last { sawLast = true }
        }
        #expect(sawLast)
        #expect(Set(topics).isSuperset(of: ["a.x", "a.b.y", "c.z", "c.k"]))
        #expect(!topics.contains { $0.hasPrefix("#") || $0.hasPrefix("!") }, "\(Set(topics.filter { $0.hasPrefix("#") || $0.hasPrefix("!") }))")
        everything.close()
        await daemon.stop()
    }

    @Test("While every subscriber takes bundles no diff is sent on its key's topic; from the first subscription to a key prefix on, each one is")
    func keyTopicsCarryDiffsOnceSubscribed() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let bundled = try daemon.client()
        try bundled.subscribe("a.", bundled: true)
        try awaitSequencing(bundled, prefix: "a.")
        let writer = try daemon.client()
        let count = 1000
        let puts = (0..<count).map { index in
            Beacon_V1_Request.OneOf_Op.put(.with {
                $0.key = "a.k\(index)"
                $0.value = .int(Int64(index))
            })
        }
        // Sent between the two counts: the batch's bundles and a heartbeat per 100 ms, but no
        // diff on its own: far fewer messages than writes.
        var published = try writer.stats().published
        let first = try writer.batch(puts).map(\.write.revision)
        let sentBundledOnly = try writer.stats().published - published
        #expect(sentBundledOnly < UInt64(count / 2), "\(sentBundledOnly) messages published for \(count) writes")
        let bundledDiffs = Self.diffs(try Self.publications(bundled, through: first.last!)).filter { $0.event.revision >= first[0] }
        #expect(bundledDiffs.map(\.event.revision) == first, "the bundles carried every diff")

        let plain = try daemon.client()
        try plain.subscribe("a.")
        try awaitSequencing(plain, prefix: "a.")
        published = try writer.stats().published
        let second = try writer.batch(puts).map(\.write.revision)
        #expect(try writer.stats().published - published >= UInt64(count), "a diff per write on its key's topic")
        let plainDiffs = Self.diffs(try Self.publications(plain, through: second.last!)).filter { $0.event.revision >= second[0] }
        #expect(plainDiffs.map(\.event.revision) == second)
        let bundledAgain = Self.diffs(try Self.publications(bundled, through: second.last!)).filter { $0.event.revision >= second[0] }
        #expect(bundledAgain == plainDiffs, "both ways carry the same diffs")
        await daemon.stop()
    }

    @Test("Heartbeats and ping replies say that the daemon publishes bundles; a malformed bundle subscription delivers nothing")
    func bundlesAreAnnouncedAndCheckedLikePrefixes() async throws {
        let daemon = try TestDaemon()
        defer { daemon.stopNow() }
        let client = try daemon.client()
        #expect(try client.ping().bundles)
        try client.subscribeRaw("!")
        let heartbeat = try awaitPublication(client) { if case .heartbeat = $0 { true } else { false } }
        guard case .heartbeat(let beat)? = heartbeat else { Issue.record("no heartbeat"); return }
        #expect(beat.bundles)

        let context = try ZMQContext()
        let malformed = try ZMQSocket(context, type: .sub, linger: 0)
        try malformed.connect(daemon.configuration.publishEndpoint)
        for topic in ["#a.", "#a..#", "#a.#x", "#!h#"] { try malformed.subscribe(Array(topic.utf8)) }
        let good = try daemon.client()
        try good.subscribe("a.", bundled: true)
        try awaitSequencing(good, prefix: "a.")
        let writer = try daemon.client()
        let revision = try writer.put("a.k", .int(1)).revision
        #expect(try Self.publications(good, through: revision).isEmpty == false)
        let frame = ZMQMessage()
        usleep(50_000)
        #expect(try !malformed.receive(into: frame, flags: .dontWait), "a malformed bundle subscription delivered \(frame.bytes)")
        malformed.close()
        await daemon.stop()
    }
}
