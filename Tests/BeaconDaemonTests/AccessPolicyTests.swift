@testable import BeaconDaemon
import Testing
import BeaconTestSupport

@Suite(.offThePool, .timeLimit(.minutes(3)))
struct AccessPolicyTests {
    @Test func prefixSetsKeepOnlyTheOutermostPrefixes() {
        let set = PrefixSet(["app.x.", "app.", "net.wifi", "app."])
        #expect(set.prefixes == ["app.", "net.wifi"])
        #expect(set.contains(key: "app.x.y") && set.contains(key: "net.wifi.ssid") && !set.contains(key: "net.eth0"))
        #expect(set.covers(prefix: "app.x") && !set.covers(prefix: "ap") && !set.covers(prefix: ""))
        #expect(PrefixSet(["", "app."]).isEverything && PrefixSet.everything.covers(prefix: ""))
        #expect(PrefixSet.nothing.isEmpty && !PrefixSet.nothing.contains(key: "a"))
    }

    @Test func rightsAreTheUnionOfTheMatchingRules() throws {
        let users = { (name: String) -> UInt32? in name == "netd" ? 101 : nil }
        let groups = { (name: String) -> UInt32? in name == "beacon" ? 900 : nil }
        let policy = AccessPolicy(rules: try [
            "user:netd read=* write=net.",
            "group:beacon read=app.,sys. write=app.",
            "uid:1000 read=home.",
            "key:rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7 read=sensor. write=sensor.",
        ].map { try AccessPolicy.parseRule($0, users: users, groups: groups) })
        #expect(policy.rights(of: .local(uid: 101, gid: 101)) == AccessRights(read: .everything, write: PrefixSet(["net."])))
        // uid 1000 in group beacon through a supplementary group.
        let member = try #require(policy.rights(of: .local(uid: 1000, gid: 1000), groups: [1000, 900]))
        #expect(member.read == PrefixSet(["app.", "sys.", "home."]) && member.write == PrefixSet(["app."]))
        #expect(policy.rights(of: .local(uid: 1000, gid: 1000), groups: [1000])?.write == .nothing)
        #expect(policy.rights(of: .local(uid: 4242, gid: 4242)) == nil, "no rule: no connection")
        #expect(policy.rights(of: .curve(publicKey: "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"))?.write == PrefixSet(["sensor."]))
        #expect(policy.rights(of: .insecure(address: "127.0.0.1")) == nil)
        #expect(AccessPolicy().rights(of: .local(uid: 4242, gid: 1)) == .everything, "no policy: everything")
    }

    @Test func badRulesSayWhatIsWrong() {
        func reason(_ text: String) -> String {
            do {
                _ = try AccessPolicy.parseRule(text, users: { _ in nil }, groups: { _ in nil })
                return "accepted"
            } catch {
                return error.description
            }
        }
        #expect(reason("") .contains("needs a subject"))
        #expect(reason("robot read=*").contains("unknown subject 'robot'"))
        #expect(reason("uid:alice").contains("not a user id"))
        #expect(reason("user:nobody-here").contains("no user named 'nobody-here'"))
        #expect(reason("group:nogroup").contains("no group named"))
        #expect(reason("key:tooshort").contains("not a CURVE public key"))
        #expect(reason("local read=app..x").contains("not a valid prefix"))
        #expect(reason("local read=a,,b").contains("empty prefix"))
        #expect(reason("local read=* read=app.").contains("given twice"))
        #expect(reason("local delete=*").contains("unknown right 'delete'"))
        #expect(reason("local app.").contains("expected read=PREFIXES"))
    }

    @Test func peersRoundTripThroughTheirZAPUserID() {
        for peer in [Peer.local(uid: 1000, gid: 100), .curve(publicKey: "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"), .insecure(address: "10.0.0.2")] {
            #expect(Peer(userID: peer.description) == peer)
        }
        #expect(Peer(userID: "ipc:x:1") == nil && Peer(userID: "nonsense") == nil)
        #expect(ServerLoop.peer(domain: AccessDomain.local, address: ":1000:100:4242", mechanism: "NULL", credentials: [])
            == .local(uid: 1000, gid: 100))
        #expect(ServerLoop.peer(domain: AccessDomain.local, address: "", mechanism: "NULL", credentials: []) == nil)
        #expect(ServerLoop.peer(domain: AccessDomain.curve, address: "127.0.0.1", mechanism: "NULL", credentials: []) == nil)
    }

    @Test func theWriteAllowanceRefillsAtItsRate() {
        var limits = DaemonLimits()
        limits.writesPerSecond = 10  // the burst is at least the rate
        var access = AccessControl(policy: AccessPolicy(), limits: limits)
        for _ in 0..<10 { #expect(access.takeWrite(peer: "p", now: 1000) == nil) }
        #expect(access.takeWrite(peer: "p", now: 1000) == 100, "one write per 100 ms")
        #expect(access.takeWrite(peer: "q", now: 1000) == nil, "another peer has its own allowance")
        #expect(access.takeWrite(peer: "p", now: 1050) == 50)
        #expect(access.takeWrite(peer: "p", now: 1100) == nil)
    }
}
