#if Etcd  // the Etcd trait (Package.swift)
import BeaconEtcd
import BeaconProtocol
import Foundation

/// One Beacon write (a put, a delete, or a transaction of them) as one etcd transaction, and
/// etcd's answer as Beacon's.
///
/// The transaction compares what Beacon's rules ask (`if_version`, `create_only`, a delete's key
/// existing, the write id not applied yet), and on success writes the keys, the commit clock and
/// the write id; on failure it reads the write id and each key, so that the answer can say which
/// rule failed, or that the write was applied before (a retry). So it may be sent again, through
/// any front: it is applied at most once. A write its client sent without a write id gets one of
/// the front's, so that the front itself can send it again when a connection to etcd closes
/// under it.
struct EtcdWritePlan {
    let ops: [WriteOp]
    /// The write id in etcd: the client's, in its namespace, or one the front made.
    let writeID: [UInt8]
    /// Whether ``writeID`` is the client's: a write found applied is then a client's retry.
    let isClientsWriteID: Bool
    let layout: EtcdLayout

    /// What etcd's answer means for the client.
    enum Outcome {
        /// Applied at `revision`: the keys' versions after it, in operation order.
        case applied(revision: UInt64, versions: [UInt64])
        /// Applied before, at `revision` (the write id was found): by the client's earlier try, or
        /// — with a write id of the front's — by the front's own.
        case replayed(revision: UInt64)
        /// A rule failed; nothing was applied.
        case refused(Refusal)
    }

    /// Refuses what a front cannot turn into one etcd transaction.
    /// - Parameters:
    ///   - ops: the operations, with their sessions already in their writer's namespace.
    /// - Throws: `INVALID_ARGUMENT` for a key twice in one transaction (etcd applies each key at
    ///   most once per transaction).
    /// - Parameter writeID: the client's write id in its namespace; empty: the front makes one.
    init(ops: [WriteOp], writeID: [UInt8], layout: EtcdLayout) throws(Refusal) {
        var seen = Set<String>()
        for (index, op) in ops.enumerated() {
            guard seen.insert(op.key).inserted else {
                throw WritePath.rejection(.invalidArgument, "key '\(op.key)' appears twice in one transaction; an etcd front writes each key once per transaction",
                                          key: op.key, index: index, current: 0, operations: ops.count)
            }
        }
        self.ops = ops
        isClientsWriteID = !writeID.isEmpty
        // A leading 0 byte: never a client's (those start with the peer's name).
        self.writeID = writeID.isEmpty ? [0] + (0..<16).map { _ in UInt8.random(in: 0...255) } : writeID
        self.layout = layout
    }

    /// The sessions the write binds keys to: each needs its lease before the transaction is sent.
    var sessions: [[UInt8]] {
        var sessions: [[UInt8]] = []
        for op in ops {
            if case .put(_, _, _, let session) = op.action, !session.isEmpty, !sessions.contains(session) { sessions.append(session) }
        }
        return sessions
    }

    /// The transaction, committed at wall-clock time `now`; the write id's key goes on
    /// `writeIDLease`, a key bound to a session on that session's lease in `sessionLeases`.
    func request(nowMilliseconds now: UInt64, writeIDLease: Int64, sessionLeases: [[UInt8]: Int64] = [:]) -> Etcdserverpb_TxnRequest {
        var txn = Etcdserverpb_TxnRequest()
        txn.compare.append(.with {
            $0.key = layout.writeIDKey(writeID)
            $0.target = .create
            $0.result = .equal
            $0.createRevision = 0
        })
        txn.failure.append(.with { $0.requestRange = .with { $0.key = layout.writeIDKey(writeID) } })
        for op in ops {
            let key = layout.dataKey(op.key)
            func compareVersion(_ result: Etcdserverpb_Compare.CompareResult, _ version: UInt64) {
                txn.compare.append(.with {
                    $0.key = key
                    $0.target = .version
                    $0.result = result
                    $0.version = Int64(clamping: version)
                })
            }
            if let expected = op.ifVersion { compareVersion(.equal, expected) }
            switch op.action {
            case .put(let encoded, let createOnly, let ttl, let session):
                if createOnly { compareVersion(.equal, 0) }
                let (expiresAt, overflow) = now.addingReportingOverflow(ttl)
                txn.success.append(.with {
                    $0.requestPut = .with {
                        $0.key = key
                        $0.value = EtcdLayout.storedValue(encodedValue: encoded, modTimeMilliseconds: now,
                                                          expiresAtMilliseconds: ttl == 0 ? 0 : overflow ? .max : expiresAt)
                        $0.lease = session.isEmpty ? 0 : sessionLeases[session] ?? 0
                        $0.prevKv = true
                    }
                })
            case .delete:
                compareVersion(.greater, 0)
                txn.success.append(.with { $0.requestDeleteRange = .with { $0.key = key } })
            }
            txn.failure.append(.with { $0.requestRange = .with { $0.key = key } })
        }
        txn.success.append(.with {
            $0.requestPut = .with {
                $0.key = layout.clockKey
                $0.value = EtcdLayout.clockValue(milliseconds: now, isExpiry: false)
            }
        })
        txn.success.append(.with {
            $0.requestPut = .with {
                $0.key = layout.writeIDKey(writeID)
                $0.lease = writeIDLease
            }
        })
        return txn
    }

    /// An expiry of `key` as of its write at `modRevision`: applied only if that write is still
    /// its last (every front tries it; one applies it).
    static func expiry(of key: String, modRevision: UInt64, nowMilliseconds now: UInt64, layout: EtcdLayout) -> Etcdserverpb_TxnRequest {
        .with {
            $0.compare = [.with {
                $0.key = layout.dataKey(key)
                $0.target = .mod
                $0.result = .equal
                $0.modRevision = Int64(clamping: modRevision)
            }]
            $0.success = [
                .with { $0.requestDeleteRange = .with { $0.key = layout.dataKey(key) } },
                .with { $0.requestPut = .with { $0.key = layout.clockKey; $0.value = EtcdLayout.clockValue(milliseconds: now, isExpiry: true) } },
            ]
        }
    }

    /// What etcd's answer to ``request(nowMilliseconds:writeIDLease:sessionLeases:)`` means.
    func outcome(of response: Etcdserverpb_TxnResponse) -> Outcome {
        let revision = UInt64(max(response.header.revision, 0))
        if response.succeeded {
            let versions = ops.indices.map { index -> UInt64 in
                guard case .put = ops[index].action, index < response.responses.count else { return 0 }
                let previous = response.responses[index].responsePut
                return previous.hasPrevKv ? UInt64(max(previous.prevKv.version, 0)) + 1 : 1
            }
            return .applied(revision: revision, versions: versions)
        }
        var reads = response.responses[...]
        if let applied = reads.popFirst()?.responseRange.kvs.first {
            return .replayed(revision: UInt64(max(applied.createRevision, 0)))
        }
        for (index, op) in ops.enumerated() {
            let version = UInt64(max(reads.popFirst()?.responseRange.kvs.first?.version ?? 0, 0))
            func refusal(_ code: Refusal.Code, _ message: String) -> Outcome {
                .refused(WritePath.rejection(code, message, key: op.key, index: index, current: version, operations: ops.count))
            }
            if let expected = op.ifVersion, expected != version {
                return refusal(.versionConflict, "key '\(op.key)' is at version \(version), not \(expected)")
            }
            switch op.action {
            case .put(_, let createOnly, _, _) where createOnly && version > 0:
                return refusal(.alreadyExists, "key '\(op.key)' already exists (version \(version))")
            case .delete where version == 0:
                return refusal(.notFound, "key '\(op.key)' does not exist")
            default:
                continue
            }
        }
        // Every rule holds now: the state changed between etcd's compare and its reads.
        return .refused(Refusal(.versionConflict, "a key of this write changed while it was decided; send it again"))
    }
}

/// The etcd transaction a front sends for a client's put, for a benchmark that sends it to etcd
/// itself: what etcd, and the fronts following it, spend on a front's write without the front
/// that forwards it.
package enum EtcdFrontTransaction {
    /// The transaction for `put` from the peer named `peer`, under etcd prefix `prefix`, with the
    /// write id's key on lease `writeIDLease`.
    package static func put(_ put: Beacon_V1_Put, peer: String, prefix: String, nowMilliseconds: UInt64,
                            writeIDLease: Int64) throws -> Etcdserverpb_TxnRequest {
        let writeID = put.writeID.isEmpty ? [] : Array(peer.utf8) + [0] + Array(put.writeID)
        return try EtcdWritePlan(ops: [WriteOp(put)], writeID: writeID, layout: EtcdLayout(prefix: prefix))
            .request(nowMilliseconds: nowMilliseconds, writeIDLease: writeIDLease)
    }
}
#endif
