import BeaconProtocol
import BeaconZMQ
import Foundation

/// A set of key prefixes: everything, nothing, or the keys under any of a few prefixes.
public struct PrefixSet: Sendable, Hashable, CustomStringConvertible {
    /// The prefixes, sorted, none under another; `[""]` is everything, `[]` nothing.
    public private(set) var prefixes: [String]

    /// Every key.
    public static let everything = PrefixSet([""])
    /// No key.
    public static let nothing = PrefixSet([])

    /// The keys under any of `prefixes`.
    public init(_ prefixes: [String]) {
        var kept: [String] = []
        for prefix in Set(prefixes).sorted() where !kept.contains(where: { prefix.isUnder($0) }) {
            kept.append(prefix)
        }
        self.prefixes = kept
    }

    /// Whether the set holds no key.
    public var isEmpty: Bool { prefixes.isEmpty }
    /// Whether the set holds every key.
    public var isEverything: Bool { prefixes.count == 1 && prefixes[0].isEmpty }

    /// Whether `key` is in the set.
    public func contains(key: String) -> Bool {
        prefixes.contains { key.isUnder($0) }
    }

    /// Whether every key under `prefix` is in the set.
    public func covers(prefix: String) -> Bool {
        prefixes.contains { prefix.isUnder($0) }
    }

    /// The union of two sets.
    public func union(_ other: PrefixSet) -> PrefixSet { PrefixSet(prefixes + other.prefixes) }

    public var description: String {
        isEverything ? "*" : isEmpty ? "(none)" : prefixes.joined(separator: ",")
    }
}

/// What one peer may do: the keys it may read and write. A peer with no rights may not connect.
public struct AccessRights: Sendable, Hashable {
    /// Keys the peer may get, list, snapshot, follow and replay.
    public var read: PrefixSet
    /// Keys the peer may put and delete.
    public var write: PrefixSet

    /// Rights to everything: what every peer has when no policy is configured.
    public static let everything = AccessRights(read: .everything, write: .everything)

    public init(read: PrefixSet, write: PrefixSet) {
        self.read = read
        self.write = write
    }
}

/// A connecting peer as the daemon identifies it.
public enum Peer: Sendable, Hashable, CustomStringConvertible {
    /// A local process on an ipc socket: its user and group, from the kernel (`SO_PEERCRED`).
    case local(uid: UInt32, gid: UInt32)
    /// A remote client authenticated by CURVE with this public key (Z85).
    case curve(publicKey: String)
    /// A client on a tcp endpoint configured without CURVE (`tcp_insecure = true`).
    case insecure(address: String)

    /// The name the daemon gives the peer in ZAP replies (`User-Id`), logs and errors.
    public var description: String {
        switch self {
        case .local(let uid, let gid): "ipc:\(uid):\(gid)"
        case .curve(let key): "curve:\(key)"
        case .insecure(let address): "tcp:\(address)"
        }
    }

    /// The peer a ``description`` names, or `nil`.
    public init?(userID: String) {
        let parts = userID.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        switch parts[0] {
        case "ipc":
            let ids = parts[1].split(separator: ":")
            guard ids.count == 2, let uid = UInt32(ids[0]), let gid = UInt32(ids[1]) else { return nil }
            self = .local(uid: uid, gid: gid)
        case "curve": self = .curve(publicKey: String(parts[1]))
        case "tcp": self = .insecure(address: String(parts[1]))
        default: return nil
        }
    }
}

/// Who may connect and what they may read and write: the `allow` lines of the configuration.
///
/// With no rule every peer that can open the sockets has every right (the socket files' mode
/// and CURVE are then the only gates). With rules, a peer's rights are the union of the rights
/// of every rule that matches it, and a peer no rule matches is refused at connection.
public struct AccessPolicy: Sendable, Equatable {
    /// Who a rule is for.
    public enum Subject: Sendable, Hashable, CustomStringConvertible {
        /// A local user, by id (`uid:N`, or `user:NAME` resolved when the file is read).
        case uid(UInt32)
        /// Local processes whose primary or supplementary group is this one (`gid:N`, `group:NAME`).
        case gid(UInt32)
        /// Every local process (`local`).
        case local
        /// A CURVE client with this public key (`key:Z85`).
        case key(String)
        /// Every client of a tcp endpoint without CURVE (`insecure`).
        case insecure

        public var description: String {
            switch self {
            case .uid(let uid): "uid:\(uid)"
            case .gid(let gid): "gid:\(gid)"
            case .local: "local"
            case .key(let key): "key:\(key)"
            case .insecure: "insecure"
            }
        }
    }

    /// One `allow` line.
    public struct Rule: Sendable, Equatable {
        public var subject: Subject
        public var rights: AccessRights
        public init(subject: Subject, rights: AccessRights) {
            self.subject = subject
            self.rights = rights
        }
    }

    /// The rules, in file order.
    public var rules: [Rule] = []

    public init(rules: [Rule] = []) { self.rules = rules }

    /// Whether any rule is configured (else every peer has every right).
    public var isEnabled: Bool { !rules.isEmpty }

    /// The rights of `peer`, or `nil` when it may not connect.
    /// - Parameter groups: the groups of a local peer's user (supplementary and primary).
    public func rights(of peer: Peer, groups: Set<UInt32> = []) -> AccessRights? {
        guard isEnabled else { return .everything }
        var read = PrefixSet.nothing
        var write = PrefixSet.nothing
        var matched = false
        for rule in rules where Self.matches(rule.subject, peer, groups: groups) {
            matched = true
            read = read.union(rule.rights.read)
            write = write.union(rule.rights.write)
        }
        return matched ? AccessRights(read: read, write: write) : nil
    }

    private static func matches(_ subject: Subject, _ peer: Peer, groups: Set<UInt32>) -> Bool {
        switch (subject, peer) {
        case (.uid(let uid), .local(let peerUID, _)): uid == peerUID
        case (.gid(let gid), .local(_, let peerGID)): gid == peerGID || groups.contains(gid)
        case (.local, .local): true
        case (.key(let key), .curve(let peerKey)): key == peerKey
        case (.insecure, .insecure): true
        default: false
        }
    }

    /// Every read set some peer can have: the scopes the publish socket keeps apart.
    public var readScopes: [PrefixSet] {
        Array(Set(rules.map(\.rights.read))).sorted { $0.description < $1.description }
    }

    /// Parses the value of an `allow` line: `SUBJECT [read=PREFIXES] [write=PREFIXES]`, where
    /// PREFIXES is `*` (every key) or prefixes separated by commas.
    /// - Throws: a reason for a person when the line is not valid.
    static func parseRule(_ text: String, users: (String) -> UInt32? = AccessPolicy.uid(ofUser:),
                          groups: (String) -> UInt32? = AccessPolicy.gid(ofGroup:)) throws(PolicyError) -> Rule {
        let words = text.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let first = words.first else {
            throw PolicyError("'allow' needs a subject: uid:N, user:NAME, gid:N, group:NAME, local, key:CURVEKEY or insecure")
        }
        let subject = try parseSubject(first, users: users, groups: groups)
        var read: PrefixSet?
        var write: PrefixSet?
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "=") else {
                throw PolicyError("expected read=PREFIXES or write=PREFIXES, not '\(word)'")
            }
            let name = String(word[..<equals])
            let set = try parsePrefixes(String(word[word.index(after: equals)...]), setting: name)
            switch name {
            case "read":
                guard read == nil else { throw PolicyError("'read' is given twice") }
                read = set
            case "write":
                guard write == nil else { throw PolicyError("'write' is given twice") }
                write = set
            default:
                throw PolicyError("unknown right '\(name)' (rights are read and write)")
            }
        }
        return Rule(subject: subject, rights: AccessRights(read: read ?? .nothing, write: write ?? .nothing))
    }

    private static func parseSubject(_ word: String, users: (String) -> UInt32?,
                                     groups: (String) -> UInt32?) throws(PolicyError) -> Subject {
        if word == "local" { return .local }
        if word == "insecure" { return .insecure }
        guard let colon = word.firstIndex(of: ":") else {
            throw PolicyError("unknown subject '\(word)' (use uid:N, user:NAME, gid:N, group:NAME, local, key:CURVEKEY or insecure)")
        }
        let kind = word[..<colon]
        let name = String(word[word.index(after: colon)...])
        switch kind {
        case "uid":
            guard let uid = UInt32(name) else { throw PolicyError("'\(name)' is not a user id") }
            return .uid(uid)
        case "gid":
            guard let gid = UInt32(name) else { throw PolicyError("'\(name)' is not a group id") }
            return .gid(gid)
        case "user":
            guard let uid = users(name) else { throw PolicyError("no user named '\(name)' on this system") }
            return .uid(uid)
        case "group":
            guard let gid = groups(name) else { throw PolicyError("no group named '\(name)' on this system") }
            return .gid(gid)
        case "key":
            guard ZMQCurveKeyPair.isValidKey(name) else {
                throw PolicyError("'\(name)' is not a CURVE public key (40 characters of Z85, as `beacon keygen` prints)")
            }
            return .key(name)
        default:
            throw PolicyError("unknown subject kind '\(kind)' (use uid, user, gid, group, key, local or insecure)")
        }
    }

    private static func parsePrefixes(_ text: String, setting: String) throws(PolicyError) -> PrefixSet {
        if text == "*" { return .everything }
        if text.isEmpty { return .nothing }
        var prefixes: [String] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
            guard !item.isEmpty else {
                throw PolicyError("empty prefix in '\(setting)=\(text)' (use * for every key)")
            }
            if let problem = KeyPath.problem(prefix: item) {
                throw PolicyError("'\(item)' in '\(setting)' is not a valid prefix: \(problem)")
            }
            prefixes.append(item)
        }
        return PrefixSet(prefixes)
    }

    /// The id of the user named `name`, from the system's user database.
    public static func uid(ofUser name: String) -> UInt32? {
        guard let entry = getpwnam(name) else { return nil }
        return entry.pointee.pw_uid
    }

    /// The id of the group named `name`, from the system's group database.
    public static func gid(ofGroup name: String) -> UInt32? {
        guard let entry = getgrnam(name) else { return nil }
        return entry.pointee.gr_gid
    }

    /// The groups of the user with id `uid` (primary `gid` and supplementary groups from the
    /// group database); just `gid` when the user has no entry.
    public static func groups(ofUID uid: UInt32, gid: UInt32) -> Set<UInt32> {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return [gid] }
        var count: Int32 = 64
        var list = [gid_t](repeating: 0, count: Int(count))
        if getgrouplist(name, gid, &list, &count) < 0 {
            list = [gid_t](repeating: 0, count: Int(count))
            _ = getgrouplist(name, gid, &list, &count)
        }
        return Set(list.prefix(Int(max(count, 0)))).union([gid])
    }
}

/// Why an access rule or limit was refused.
public struct PolicyError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Limits that keep one peer from starving others or growing the daemon without bound. A peer
/// is one identity (`Peer`): a local user and group, a CURVE key, or an insecure tcp address.
public struct DaemonLimits: Sendable, Equatable {
    /// Largest encoded value accepted (at most the protocol's 1 MiB).
    public var maxValueBytes = WireLimits.maxValueBytes
    /// Sustained writes per second per peer (0: no limit); a put, delete or transaction is one.
    public var writesPerSecond: UInt32 = 0
    /// Writes a peer may send at once above its rate before it is limited.
    public var writeBurst: UInt32 = 0
    /// Live keys a peer may have created (0: no limit).
    public var keysPerPeer: UInt32 = 0
    /// Requests queued per connection before libzmq stops reading from it (back-pressure).
    public var pendingRequests: Int32 = 10_000
    /// Subscriptions one peer may hold on the publish socket.
    public var subscriptionsPerPeer: UInt32 = 1000
    /// Sessions one peer may hold at once (0: no limit); a `KeepAlive` or a put that would
    /// start one more is refused with `QUOTA_EXCEEDED`.
    public var sessionsPerPeer: UInt32 = 1000
    /// Prefixes one peer's `Snapshot` and `Delta` requests may keep sequenced at once (0: no
    /// limit); beyond it they are answered without a lease (the client repairs instead).
    public var leasesPerPeer: UInt32 = 1000
    /// Connections one peer may hold to the request and publish sockets together (0: no limit):
    /// a local user by uid, a tcp peer by address. The superuser has no such limit.
    public var connectionsPerPeer: UInt32 = 256
    /// Journal size above which puts are refused (deletes still work); 0: no limit.
    public var maxJournalBytes: UInt64 = 0
    /// Bytes of replies one connection has not read, beyond what libzmq holds for it, before the
    /// daemon closes the connection.
    public var replyBufferBytes = 64 << 20
    /// The same for all connections of one peer together: the one holding the most is closed.
    /// The superuser has no such limit.
    public var replyBufferPeerBytes = 256 << 20
    /// The same for all connections together.
    public var replyBufferTotalBytes = 1 << 30
    /// Bytes of publications libzmq may hold, not yet written to every subscriber, before the
    /// daemon closes the subscriber connections that are not reading.
    public var publishBufferBytes = 256 << 20

    public init() {}
}
