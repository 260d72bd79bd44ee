@testable import BeaconDaemon
import Testing
import BeaconTestSupport

@Suite("Connection ledger: connections per peer and in all", .offThePool, .timeLimit(.minutes(3)))
struct ConnectionLedgerTests {
    @Test("A peer at its limit is shed; others, and root, still get in; a close makes room again")
    func perPeerLimit() {
        var ledger = ConnectionLedger(perPeer: 2, total: 100)
        #expect(ledger.accepted(fd: 10, on: .requests, from: .user(5001)) == .keep)
        #expect(ledger.accepted(fd: 11, on: .subscribers, from: .user(5001)) == .keep)
        #expect(ledger.accepted(fd: 12, on: .requests, from: .user(5001)) == .shedPeerLimit)
        #expect(ledger.accepted(fd: 13, on: .requests, from: .user(5002)) == .keep)
        for fd in Int32(20)..<25 { #expect(ledger.accepted(fd: fd, on: .requests, from: .user(0)) == .keep) }
        #expect(ledger.count(.requests) == 7 && ledger.count(.subscribers) == 1)
        #expect(ledger.count(of: .user(5001)) == 3, "a shed connection holds its descriptor until it is gone")
        #expect(ledger.shed == 1)
        ledger.closed(fd: 12)
        #expect(ledger.accepted(fd: 14, on: .requests, from: .user(5001)) == .shedPeerLimit, "still two kept")
        ledger.closed(fd: 10)
        ledger.closed(fd: 14)
        #expect(ledger.accepted(fd: 15, on: .requests, from: .user(5001)) == .keep)
        #expect(ledger.count(of: .user(5001)) == 2)
    }

    @Test("Beyond the total nobody gets in, root included; the total leaves a quarter of the descriptors free")
    func totalLimit() {
        var ledger = ConnectionLedger(perPeer: 0, total: 3)
        for fd in Int32(1)...3 { #expect(ledger.accepted(fd: fd, on: .requests, from: .address("127.0.0.1")) == .keep) }
        #expect(ledger.accepted(fd: 4, on: .requests, from: .user(0)) == .shedTotalLimit)
        ledger.closed(fd: 4)
        ledger.closed(fd: 1)
        #expect(ledger.accepted(fd: 5, on: .requests, from: .user(0)) == .keep)
        #expect(ConnectionLedger.total(forDescriptorLimit: 1024) == 768)
        #expect(ConnectionLedger.total(forDescriptorLimit: 65536) == 49152)
        #expect(ConnectionLedger.total(forDescriptorLimit: 100) == 36)
    }

    @Test("A descriptor reported again replaces what it held; a socket closed forgets its connections")
    func reuseAndForget() {
        var ledger = ConnectionLedger(perPeer: 1, total: 100)
        #expect(ledger.accepted(fd: 7, on: .subscribers, from: .user(5001)) == .keep)
        #expect(ledger.accepted(fd: 7, on: .subscribers, from: .user(5001)) == .keep, "the old one was closed unreported")
        #expect(ledger.descriptors == 1)
        #expect(ledger.accepted(fd: 8, on: .requests, from: .user(5002)) == .keep)
        ledger.forgetAll(on: .subscribers)
        #expect(ledger.count(.subscribers) == 0 && ledger.count(.requests) == 1 && ledger.count(of: .user(5001)) == 0)
    }
}
