import BeaconJournal
import BeaconProtocol

/// The loop's bookkeeping of who may do what, and of what each peer uses: rights by ZAP user
/// id, read scopes of the publish socket, subscriptions, write rates and keys per peer.
/// Loop thread only.
struct AccessControl {
    private(set) var policy: AccessPolicy
    private(set) var limits: DaemonLimits
    /// Rights by ZAP user id (`Peer.description`); `nil` value: the peer has none now.
    private var grants: [String: AccessRights?] = [:]
    /// The read sets seen on the publish socket; the index names the scope's control topics.
    private(set) var scopes: [PrefixSet] = []
    private var scopeIndex: [PrefixSet: Int] = [:]
    /// Subscriptions counted per peer, and who holds each subscribed topic.
    private var held: [String: Int] = [:]
    private var holders: [[UInt8]: [String: Int]] = [:]
    private var buckets: [String: TokenBucket] = [:]
    /// Live keys each peer created, and the creator of each such key (only with a key limit).
    private var owned: [String: Int] = [:]
    private var owners: [String: String] = [:]

    init(policy: AccessPolicy, limits: DaemonLimits) {
        self.policy = policy
        self.limits = limits
    }

    /// Whether requests need their sender's identity: for rules, or for a limit counted per peer.
    /// Without either, the request path skips looking it up.
    var needsPeerIdentity: Bool {
        policy.isEnabled || limits.writesPerSecond > 0 || limits.keysPerPeer > 0
    }

    /// Rights with nothing in them.
    static let none = AccessRights(read: .nothing, write: .nothing)

    /// Takes a reloaded policy and limits; rights are worked out again as peers show up.
    /// - Returns: whether a peer seen before has other rights now: under other rules, or because
    ///   the system's groups changed (membership is looked up again, not remembered).
    @discardableResult
    mutating func reload(policy: AccessPolicy, limits: DaemonLimits) -> Bool {
        self.policy = policy
        self.limits = limits
        let rightsChanged = grants.contains { userID, before in
            Peer(userID: userID).flatMap { peer in policy.rights(of: peer, groups: Self.groups(of: peer)) } != before
        }
        grants.removeAll()
        buckets.removeAll()
        if limits.keysPerPeer == 0 {
            owned.removeAll()
            owners.removeAll()
        }
        return rightsChanged
    }

    /// Forgets every subscription: the publish socket was opened anew.
    mutating func resetSubscriptions() {
        held.removeAll()
        holders.removeAll()
        scopes.removeAll()
        scopeIndex.removeAll()
    }

    // MARK: Rights

    /// The rights of the peer a ZAP user id names; no rights when it names none or the policy
    /// has none for it.
    mutating func rights(userID: String?) -> AccessRights {
        guard let userID else { return policy.isEnabled ? Self.none : .everything }
        if let known = grants[userID] { return known ?? Self.none }
        let rights = Peer(userID: userID).flatMap { peer in policy.rights(of: peer, groups: Self.groups(of: peer)) }
        grants[userID] = .some(rights)
        return rights ?? Self.none
    }

    /// Decides a connection (ZAP): the rights the peer will have, or `nil` to refuse it.
    mutating func admit(_ peer: Peer) -> AccessRights? {
        if case .curve = peer, !policy.isEnabled { return nil }  // CURVE clients need a key: rule
        let rights = policy.rights(of: peer, groups: Self.groups(of: peer))
        grants[peer.description] = .some(rights)
        return rights
    }

    private static func groups(of peer: Peer) -> Set<UInt32> {
        if case .local(let uid, let gid) = peer { return AccessPolicy.groups(ofUID: uid, gid: gid) }
        return []
    }

    // MARK: Publish socket

    /// The topics to subscribe a peer with `rights` to for its subscription `topic`, or `nil`
    /// when it may not have it. Control topics (`!`) become the heartbeat and commit topics of
    /// the peer's read scope. Everything (the empty prefix) becomes one subscription per
    /// possible first byte of a key, so that it matches neither other scopes' control topics
    /// nor bundles (`#P#`, granted to those who may read all of P).
    mutating func topics(forSubscription topic: [UInt8], rights: AccessRights) -> [[UInt8]]? {
        if topic.first == UInt8(ascii: "!") {
            guard policy.isEnabled else { return [topic] }
            guard !rights.read.isEmpty else { return nil }
            let scope = scope(of: rights.read)
            return [Array(heartbeatTopic(scope: scope).utf8), Array(commitTopic(scope: scope).utf8)]
        }
        let bundled = WireTopic.bundledPrefix(topic)
        guard let prefix = bundled ?? String(validating: topic, as: UTF8.self), KeyPath.problem(prefix: prefix) == nil,
              rights.read.covers(prefix: prefix)
        else { return nil }
        if policy.isEnabled { _ = scope(of: rights.read) }  // the diffs it receives carry only marks this scope may read
        // A bundle topic names its prefix exactly (no key holds `#`). The empty prefix stands for
        // every key, not for every topic: other scopes' control topics and bundles stay out.
        if bundled == nil && prefix.isEmpty { return Self.keyFirstBytes.map { [$0] } }
        return [topic]
    }

    /// Every byte a key can start with.
    static let keyFirstBytes: [UInt8] = (0...255).map(UInt8.init).filter { KeyPath.problem(key: String(decoding: [$0], as: UTF8.self)) == nil }

    /// The number of the scope of peers that may read `read`.
    mutating func scope(of read: PrefixSet) -> Int {
        if let index = scopeIndex[read] { return index }
        scopes.append(read)
        scopeIndex[read] = scopes.count - 1
        return scopes.count - 1
    }

    /// The heartbeat topic of a scope: `!h`, or `!h#N#` with a policy.
    func heartbeatTopic(scope: Int) -> String {
        policy.isEnabled ? "\(WireTopic.heartbeat)#\(scope)#" : WireTopic.heartbeat
    }

    /// The commit-marker topic of a scope: `!c`, or `!c#N#` with a policy.
    func commitTopic(scope: Int) -> String {
        policy.isEnabled ? "\(WireTopic.commit)#\(scope)#" : WireTopic.commit
    }

    /// The marks of a diff of `key` that every read scope able to receive it may read: a mark
    /// for a prefix tells how many keys under it the revision changed and when one last changed,
    /// so a reader of `key` that may not read the whole prefix must not see it. The peers
    /// following a prefix whose mark is left out repair from the journal (proto/PROTOCOL.md §6).
    func marks(_ marks: [Beacon_V1_PrefixMark], everyReaderOf key: String) -> [Beacon_V1_PrefixMark] {
        marks.filter { mark in scopes.allSatisfy { !$0.contains(key: key) || $0.covers(prefix: mark.prefix) } }
    }

    /// Counts a subscription of `peer`; `false` when the peer holds its limit already (the
    /// subscription is then refused and not counted).
    mutating func countSubscription(_ topic: [UInt8], peer: String) -> Bool {
        guard limits.subscriptionsPerPeer == 0 || held[peer, default: 0] < Int(limits.subscriptionsPerPeer) else { return false }
        held[peer, default: 0] += 1
        holders[topic, default: [:]][peer, default: 0] += 1
        return true
    }

    /// Releases a counted subscription. `peer` is `nil` when libzmq reports the subscriptions of
    /// a closed connection (it gives no identity then): one holder of the topic is released.
    /// - Returns: whether a counted subscription was released.
    mutating func releaseSubscription(_ topic: [UInt8], peer: String?) -> Bool {
        guard var byPeer = holders[topic],
              let holder = peer.flatMap({ byPeer[$0] != nil ? $0 : nil }) ?? (peer == nil ? byPeer.keys.first : nil)
        else { return false }
        byPeer[holder, default: 1] -= 1
        if byPeer[holder] == 0 { byPeer[holder] = nil }
        holders[topic] = byPeer.isEmpty ? nil : byPeer
        held[holder, default: 1] -= 1
        if held[holder] == 0 { held[holder] = nil }
        return true
    }

    // MARK: Writes

    /// Takes one write from `peer`'s allowance; the milliseconds to wait when it has none left.
    mutating func takeWrite(peer: String, now: UInt64) -> UInt32? {
        guard limits.writesPerSecond > 0 else { return nil }
        let rate = Double(limits.writesPerSecond)
        let burst = Double(max(limits.writeBurst, limits.writesPerSecond))
        var bucket = buckets[peer] ?? TokenBucket(tokens: burst, updatedMilliseconds: now)
        defer { buckets[peer] = bucket }
        bucket.tokens = min(burst, bucket.tokens + Double(now &- bucket.updatedMilliseconds) * rate / 1000)
        bucket.updatedMilliseconds = now
        if bucket.tokens >= 1 {
            bucket.tokens -= 1
            return nil
        }
        return UInt32(((1 - bucket.tokens) * 1000 / rate).rounded(.up))
    }

    /// Whether `peer` may create `creates` more keys.
    @inline(__always)  // a caller reading it from a class property copies only what it reads
    func mayCreate(_ creates: Int, peer: String) -> Bool {
        limits.keysPerPeer == 0 || creates == 0 || owned[peer, default: 0] + creates <= Int(limits.keysPerPeer)
    }

    /// Notes who created and who ended keys (only with a key limit). Keys found in the journal
    /// at start-up belong to nobody.
    mutating func recordOwnership(of changes: [JournalChange], peer: String?) {
        guard limits.keysPerPeer > 0 else { return }
        for change in changes {
            if change.kind == .put {
                if change.version == 1, let peer {
                    owners[change.key] = peer
                    owned[peer, default: 0] += 1
                }
            } else if let owner = owners.removeValue(forKey: change.key) {
                owned[owner, default: 1] -= 1
                if owned[owner] == 0 { owned[owner] = nil }
            }
        }
    }
}

/// A token bucket: a rate with a burst allowance.
struct TokenBucket {
    var tokens: Double
    var updatedMilliseconds: UInt64
}
