import BeaconJournal
import BeaconProtocol
import BeaconZMQ
import Foundation
import SwiftProtobuf

/// A write applied to the store and waiting for its group commit. Its reply, if a client asked
/// for it, waits in the reply queue for the commit.
struct StagedWrite {
    /// Whether the daemon wrote it itself (an expiry, an ended session).
    var isDaemons: Bool
    var changes: [JournalChange]
    var undo: SignalStore.Undo
    var writeID: [UInt8]?
}

/// One operation of a write, with its value already encoded and checked for structure.
struct WriteOp {
    enum Action {
        case put(encodedValue: [UInt8], createOnly: Bool, ttlMilliseconds: UInt64, session: [UInt8])
        case delete
    }

    var key: String
    var action: Action
    var ifVersion: UInt64?
    /// A problem with the value found while encoding it, reported with the operation's index.
    var valueProblem: (code: Refusal.Code, message: String)?

    init(key: String, action: Action, ifVersion: UInt64?) {
        self.key = key
        self.action = action
        self.ifVersion = ifVersion
    }

    /// The operation a decoded put or delete asks for.
    init?(_ op: Beacon_V1_TxnOp) {
        switch op.op {
        case .put(let put):
            self.init(put)
        case .delete(let delete):
            self.init(delete)
        case nil:
            return nil
        }
    }

    init(_ delete: Beacon_V1_Delete) {
        self.init(key: delete.key, action: .delete, ifVersion: delete.hasIfVersion ? delete.ifVersion : nil)
    }

    init(_ put: Beacon_V1_Put) {
        var encoded: [UInt8] = []
        var problem: (Refusal.Code, String)?
        if let structural = put.value.structuralProblem() {
            problem = (.invalidValue, structural.description)
        } else if let bytes: [UInt8] = try? put.value.serializedBytes() {
            encoded = bytes
            if let size = Beacon_V1_Value.sizeProblem(encodedBytes: bytes.count) { problem = (.valueTooLarge, size.description) }
        } else {
            problem = (.invalidValue, "value cannot be encoded")
        }
        self.init(key: put.key, action: .put(encodedValue: encoded, createOnly: put.createOnly, ttlMilliseconds: put.ttlMs,
                                             session: Array(put.session)),
                  ifVersion: put.hasIfVersion ? put.ifVersion : nil)
        valueProblem = problem
    }
}

extension WriteOp {
    /// What is wrong with the operation's key or value, whatever the state.
    var inputProblem: (code: Refusal.Code, message: String)? {
        if let problem = KeyPath.problem(key: key) { return (.invalidKey, problem.description) }
        return valueProblem
    }

    /// What is wrong with a put's session or time to live, whatever the state.
    var limitProblem: (code: Refusal.Code, message: String)? {
        guard case .put(_, _, let ttl, let session) = action else { return nil }
        if session.count > WireLimits.maxSessionBytes {
            return (.invalidArgument, "session is \(session.count) bytes; the limit is \(WireLimits.maxSessionBytes)")
        }
        if ttl > WireLimits.maxTTLMilliseconds {
            return (.invalidArgument, "ttl_ms is \(ttl); the limit is \(WireLimits.maxTTLMilliseconds)")
        }
        return nil
    }

    /// What is wrong with a write of `count` operations, whatever they are.
    static func countProblem(_ count: Int) -> (code: Refusal.Code, message: String)? {
        if count == 0 { return (.invalidArgument, "a transaction needs at least one operation") }
        if count > WireLimits.maxTxnOps { return (.tooManyOperations, "\(count) operations; the limit is \(WireLimits.maxTxnOps)") }
        return nil
    }
}
