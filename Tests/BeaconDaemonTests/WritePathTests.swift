@testable import BeaconDaemon
import BeaconJournal
import BeaconProtocol
import BeaconTestSupport
import BeaconZMQ
import Logging
import Testing

/// The write path on its own — a real SQLite journal that fails commits on demand, a clock the
/// test moves, no sockets, no sleeps, no root: TTL expiry, session ends, write-id memory, the
/// read-only back-off and the rollback after a failed commit.
@Suite(.offThePool, .timeLimit(.minutes(3)))
struct WritePathTests {
    /// What the write path asked of the daemon around it.
    final class Recorder: WritePathDelegate {
        enum Reply: Equatable {
            case written(id: UInt64, revision: UInt64, versions: [UInt64], replayed: Bool)
            case refused(id: UInt64, Beacon_V1_Error.Code)
        }

        var published: [[JournalChange]] = []
        var replies: [Reply] = []
        var rolledBack: [Int] = []
        var removedByDaemon: [String] = []

        func publish(_ batch: [StagedWrite]) { published += batch.map(\.changes) }

        func deliver(_ route: ReplyRoute, _ reply: PendingReply) {
            switch reply {
            case .oneKeyWrite(let id, let revision, let version):
                replies.append(.written(id: id, revision: revision, versions: [version], replayed: false))
            case .write(let id, let revision, let versions):
                replies.append(.written(id: id, revision: revision, versions: versions, replayed: false))
            case .answer(let answer, _):
                if case .error(let error) = answer.result {
                    replies.append(.refused(id: answer.id, error.code))
                } else {
                    replies.append(.written(id: answer.id, revision: answer.write.revision, versions: answer.write.versions,
                                            replayed: answer.write.replayed))
                }
            case .encoded, .held:
                Issue.record("the write path sent a reply it does not make: \(reply)")
            }
        }

        func committed(_ batch: [StagedWrite]) {}
        func rolledBack(_ refused: [StagedWrite], _ error: JournalError) { rolledBack.append(refused.count) }
        func removedByDaemon(_ changes: [JournalChange]) { removedByDaemon += changes.map(\.key) }

        /// The keys each published revision deleted by expiry, revision by revision.
        var expired: [[String]] {
            published.filter { $0.allSatisfy { $0.kind == .expire } }.map { $0.map(\.key) }
        }
    }

    /// A write path on a journal in a new temporary directory (or `reopening` one), with a clock
    /// the test moves.
    final class Harness {
        let directory: String
        let clock: ManualClock
        let journal: FaultInjectingJournal
        let recorder = Recorder()
        let path: WritePath
        let route = ReplyRoute.peer(ReplyEnvelope(connection: [0, 1, 2, 3, 4].withUnsafeBytes { RoutingID($0) }))
        private var nextID: UInt64 = 1

        init(reopening existing: String? = nil, clock: ManualClock = ManualClock(), sessionTTL: UInt64 = 1000,
             writeIDMemory: Int = WritePath.defaultWriteIDMemory) throws {
            directory = try existing ?? temporaryDirectory()
            self.clock = clock
            journal = FaultInjectingJournal(try Journal(path: directory + "/journal.db"))
            var logger = Logger(label: "write-path-test")
            logger.logLevel = .critical
            path = WritePath(journal: journal, clock: clock,
                             settings: .init(sessionTTLMilliseconds: sessionTTL, maxBatch: 4096, expiresKeys: true),
                             logger: logger, writeIDMemory: writeIDMemory, delegate: recorder, onCommitted: {})
            try path.load()
        }

        deinit { path.close() }

        /// Decides a write as the daemon does for a peer with every right — a retry by its write
        /// id, the read-only period, the state — and commits it.
        /// - Returns: its reply.
        @discardableResult
        func write(_ ops: [WriteOp], writeID: [UInt8] = [], writer: RequestContext = .unrestricted) -> Recorder.Reply? {
            let id = nextID
            nextID += 1
            let owned = writeID.isEmpty ? writeID : writer.owned(writeID)
            if !owned.isEmpty, let revision = path.committedRevision(ofWriteID: owned) {
                path.answerRetry(id: id, revision: revision, route: route)
            } else if let refusal = path.readOnlyRefusal() {
                refuse(id, refusal, dependsOnStaged: false)
            } else {
                do throws(Refusal) {
                    let changes = try path.prepare(ops, writeID: owned, writer: writer, sessionLimit: 0)
                    path.stage(changes, of: ops, id: id, writeID: owned, route: route)
                } catch {
                    refuse(id, error, dependsOnStaged: true)
                }
            }
            path.flush()
            return recorder.replies.last { reply in
                switch reply {
                case .written(let replied, _, _, _), .refused(let replied, _): replied == id
                }
            }
        }

        /// Stages a write without committing it (the commit is the caller's: ``WritePath/flush()``).
        func stage(_ ops: [WriteOp]) throws(Refusal) {
            let id = nextID
            nextID += 1
            let changes = try path.prepare(ops, writeID: [], writer: .unrestricted, sessionLimit: 0)
            path.stage(changes, of: ops, id: id, writeID: [], route: route)
        }

        private func refuse(_ id: UInt64, _ refusal: Refusal, dependsOnStaged: Bool) {
            var reply = Beacon_V1_Reply()
            reply.id = id
            reply.error = refusal.wire(headRevision: path.headRevision)
            path.queue(.answer(reply, dependsOnStaged: dependsOnStaged), to: route)
        }

        /// Fires the timers due now.
        func fireTimers() { path.fireDueTimers(at: clock.now()); path.flush() }

        /// Moves the clock on and fires what came due.
        func advance(milliseconds: UInt64) {
            clock.advance(milliseconds: milliseconds)
            fireTimers()
        }

        func value(_ key: String) -> Int64? {
            guard let entry = path.store.live(key) else { return nil }
            return (try? Beacon_V1_Value(serializedBytes: entry.value))?.intValue
        }
    }

    static func put(_ key: String, _ value: Int64, ttl: UInt64 = 0, session: [UInt8] = [], ifVersion: UInt64? = nil) -> WriteOp {
        WriteOp(.with {
            $0.key = key
            $0.value = .int(value)
            $0.ttlMs = ttl
            $0.session = .init(session)
            if let ifVersion { $0.ifVersion = ifVersion }
        })
    }

    // MARK: Time to live

    @Test func aKeyWithATimeToLiveIsDeletedWhenItsTimeHasComeAndNotBefore() throws {
        let harness = try Harness()
        #expect(harness.write([Self.put("ttl.a", 1, ttl: 150)]) == .written(id: 1, revision: 1, versions: [1], replayed: false))
        harness.advance(milliseconds: 149)
        #expect(harness.value("ttl.a") == 1, "one millisecond before its time it is still there")
        #expect(harness.recorder.expired.isEmpty)
        harness.advance(milliseconds: 1)
        #expect(harness.value("ttl.a") == nil)
        #expect(harness.recorder.expired == [["ttl.a"]])
        #expect(harness.path.durableRevision == 2, "the expiry is a revision of its own, journaled")
        #expect(harness.recorder.removedByDaemon == ["ttl.a"])
        let journaled = try harness.journal.changes(prefix: "ttl.", exact: false, from: 2, to: 2, limit: 10).changes
        #expect(journaled.map(\.kind) == [.expire])
    }

    @Test func aKeyRewrittenBeforeItsTimeToLiveEndsKeepsItsNewValue() throws {
        let harness = try Harness()
        harness.write([Self.put("ttl.b", 1, ttl: 100)])
        harness.advance(milliseconds: 50)
        harness.write([Self.put("ttl.b", 2)])  // no time to live now
        harness.advance(milliseconds: 500)
        #expect(harness.value("ttl.b") == 2, "the first write's timer found the key rewritten")
        #expect(harness.recorder.expired.isEmpty)
    }

    @Test func aTimeToLiveRunsOnTheWallClockItWasJournaledWithAcrossARestart() throws {
        let clock = ManualClock()
        let first = try Harness(clock: clock)
        first.write([Self.put("ttl.c", 1, ttl: 10_000)])
        first.path.close()
        clock.advance(milliseconds: 4000)  // down for four seconds
        let second = try Harness(reopening: first.directory, clock: clock)
        second.advance(milliseconds: 5999)
        #expect(second.value("ttl.c") == 1, "six seconds were left of its ten when the daemon came back")
        second.advance(milliseconds: 1)
        #expect(second.value("ttl.c") == nil)
    }

    // MARK: Sessions

    @Test func aSessionNobodyRenewsEndsAndItsKeysGoInOneRevision() throws {
        let harness = try Harness(sessionTTL: 1000)
        let writer = RequestContext(peer: "uid:1000", rights: .everything)
        harness.write([Self.put("s.a", 1, session: [7]), Self.put("s.b", 2, session: [7])], writer: writer)
        harness.advance(milliseconds: 600)
        #expect(harness.path.keepAlive(writer.owned([7]), ttlMilliseconds: 1000) == 2, "renewed, holding both keys")
        harness.advance(milliseconds: 600)
        #expect(harness.value("s.a") == 1, "renewed at 600 ms for 1000: alive at 1200")
        harness.advance(milliseconds: 399)
        #expect(harness.value("s.b") == 2)
        harness.advance(milliseconds: 1)
        #expect(harness.value("s.a") == nil && harness.value("s.b") == nil)
        #expect(harness.recorder.expired == [["s.a", "s.b"]], "both in one revision")
        #expect(harness.path.sessions.count == 0)
    }

    @Test func aSessionIsTheWritersOwnAndEndingItEndsItAtOnce() throws {
        let harness = try Harness(sessionTTL: 60_000)
        let alice = RequestContext(peer: "uid:1001", rights: .everything)
        let mallory = RequestContext(peer: "uid:1002", rights: .everything)
        harness.write([Self.put("s.c", 1, session: [9])], writer: alice)
        harness.path.endSession(mallory.owned([9]))  // the same name in another peer's namespace
        harness.path.flush()
        #expect(harness.value("s.c") == 1, "another peer's session of that name is another session")
        harness.path.endSession(alice.owned([9]))
        harness.path.flush()
        #expect(harness.value("s.c") == nil, "ended by its writer, without waiting for its time")
    }

    @Test func aSessionLimitRefusesTheSessionOverIt() throws {
        let harness = try Harness()
        let writer = RequestContext(peer: "uid:1003", rights: .everything)
        harness.write([Self.put("s.d", 1, session: [1])], writer: writer)
        #expect(throws: Refusal.self) {
            try harness.path.checkSessionLimit(writer.owned([2]), writer: writer, limit: 1)
        }
        try harness.path.checkSessionLimit(writer.owned([1]), writer: writer, limit: 1)  // the one it holds
    }

    // MARK: Write ids

    @Test func aRetriedWriteIsAnsweredAsItWasAndNotAppliedAgainEvenAfterARestart() throws {
        let first = try Harness()
        #expect(first.write([Self.put("w.a", 1)], writeID: [42]) == .written(id: 1, revision: 1, versions: [1], replayed: false))
        #expect(first.write([Self.put("w.a", 1)], writeID: [42]) == .written(id: 2, revision: 1, versions: [1], replayed: true))
        #expect(first.path.headRevision == 1)
        let other = RequestContext(peer: "uid:1004", rights: .everything)
        #expect(first.write([Self.put("w.a", 5)], writeID: [42], writer: other)
            == .written(id: 3, revision: 2, versions: [2], replayed: false), "another peer's id is another write")
        first.path.close()
        let second = try Harness(reopening: first.directory)
        #expect(second.write([Self.put("w.a", 1)], writeID: [42]) == .written(id: 1, revision: 1, versions: [1], replayed: true),
                "remembered from the journal")
        #expect(second.value("w.a") == 5)
    }

    @Test func theWriteIDMemoryForgetsTheOldestBeyondItsCapacity() throws {
        let harness = try Harness(writeIDMemory: 3)
        for index in 1...4 { harness.write([Self.put("w.\(index)", Int64(index))], writeID: [UInt8(index)]) }
        #expect(harness.path.writeIDs.count == 3)
        #expect(harness.path.committedRevision(ofWriteID: RequestContext.unrestricted.owned([1])) == nil, "the oldest is forgotten")
        #expect(harness.path.committedRevision(ofWriteID: RequestContext.unrestricted.owned([4])) == 4)
        var memory = WriteIDMemory(capacity: 2)
        for round in 0..<1000 { memory.remember([UInt8(round % 256), UInt8(round / 256)], revision: UInt64(round)) }
        #expect(memory.count == 2 && memory.revision(of: [231, 3]) == 999 && memory.revision(of: [229, 3]) == nil)
    }

    // MARK: A failed commit

    @Test func aFailedCommitUndoesItsWritesAndThoseBehindItAndRefusesThemAsReadOnly() throws {
        let harness = try Harness()
        harness.write([Self.put("f.a", 1)])
        harness.journal.failCommits(with: FaultInjectingJournal.diskFull)
        try harness.stage([Self.put("f.a", 2)])
        try harness.stage([Self.put("f.b", 3), Self.put("f.c", 4)])
        #expect(harness.value("f.b") == 3, "staged writes are in the store before their commit")
        harness.path.flush()
        #expect(harness.recorder.replies.suffix(2) == [.refused(id: 2, .readOnly), .refused(id: 3, .readOnly)])
        #expect(harness.recorder.rolledBack == [2])
        #expect(harness.value("f.a") == 1 && harness.value("f.b") == nil && harness.value("f.c") == nil, "every one undone")
        #expect(harness.path.headRevision == 1 && harness.path.durableRevision == 1)
        #expect(harness.recorder.published.count == 1, "nothing of the failed batch was published")
        #expect(harness.journal.headRevision == 1)
    }

    @Test func afterAFailedCommitWritesAreRefusedForTheBackOffThenAcceptedAgain() throws {
        let harness = try Harness()
        harness.journal.failCommits(with: FaultInjectingJournal.diskFull)
        #expect(harness.write([Self.put("b.a", 1)]) == .refused(id: 1, .readOnly))
        harness.journal.failCommits(with: nil)
        harness.clock.advance(milliseconds: ReadOnlyBackoff.periodMilliseconds - 1)
        #expect(harness.write([Self.put("b.a", 1)]) == .refused(id: 2, .readOnly), "still inside the back-off")
        #expect(harness.path.isReadOnly)
        #expect(harness.journal.commitCounts.failed == 1, "a write refused in the back-off never reached the journal")
        harness.clock.advance(milliseconds: 1)
        #expect(!harness.path.isReadOnly)
        #expect(harness.write([Self.put("b.a", 1)]) == .written(id: 3, revision: 1, versions: [1], replayed: false),
                "the revision the failed write had is used again: it was never durable")
        #expect(harness.path.backoff.reason == nil)
    }

    @Test func anExpiryWhoseCommitFailsIsTriedAgainOnceTheBackOffEnds() throws {
        let harness = try Harness()
        harness.write([Self.put("e.a", 1, ttl: 100)])
        harness.journal.failCommits(with: FaultInjectingJournal.diskFull)
        harness.advance(milliseconds: 100)
        #expect(harness.value("e.a") == 1, "the expiry's commit failed: the key is back")
        harness.journal.failCommits(with: nil)
        harness.advance(milliseconds: ReadOnlyBackoff.periodMilliseconds - 1)
        #expect(harness.value("e.a") == 1)
        harness.advance(milliseconds: 1)
        #expect(harness.value("e.a") == nil, "expired once the journal took writes again")
        #expect(harness.recorder.expired == [["e.a"]])
    }

    @Test func aRefusalDecidedAgainstAStagedWriteThatRollsBackIsRetryable() throws {
        let harness = try Harness()
        harness.journal.failCommits(with: FaultInjectingJournal.diskFull)
        try harness.stage([Self.put("r.a", 1)])
        // Decided against the staged write: create-only fails because r.a exists — in a write that never lands.
        #expect(throws: Refusal.self) { try harness.stage([Self.put("r.a", 2, ifVersion: 0)]) }
        harness.write([Self.put("r.a", 2, ifVersion: 0)])
        let last = try #require(harness.recorder.replies.last)
        #expect(last == .refused(id: 3, .readOnly), "told to retry, not that the version conflicted")
    }
}
