#if Etcd  // etcd fronts are built with the Etcd trait (Package.swift)
import BeaconLocking
import Foundation
import GRPCCore
import GRPCProtobuf

extension EtcdClient {
    /// What a watch reports, in etcd's revision order.
    package enum WatchUpdate: Sendable {
        /// The watch is in place: it reports every change after `startRevision` - 1.
        case created(headRevision: Int64)
        /// Changes under the watched prefix: whole revisions, in order (etcd never splits a
        /// revision across responses unless asked to).
        case events([Etcdserverpb_Event], headRevision: Int64)
        /// Nothing under the prefix changed after the last update through `revision`.
        case progress(revision: Int64)
    }

    /// Watches every key under `prefix` from `startRevision` on, on the preferred member, and
    /// hands each update to `onUpdate` in order.
    ///
    /// Every `progressInterval` it asks the member for progress; a member that answers nothing
    /// for three intervals (frozen, or cut off) ends the watch, as does one that loses its
    /// leader. The next watch goes to the next member.
    /// - Parameters:
    ///   - onUpdate: returns false to end the watch.
    /// - Throws: ``EtcdError``: `.compacted` when `startRevision` was compacted away (with etcd's
    ///   compacted revision); `.unavailable` when the stream ended or failed; `.closed`.
    package func watch(prefix: [UInt8], from startRevision: Int64, progressInterval: Duration = .milliseconds(500),
                       onUpdate: @escaping @Sendable (WatchUpdate) async -> Bool) async throws(EtcdError) {
        try await watch(prefix: prefix, end: Self.rangeEnd(ofPrefix: prefix), from: startRevision, progressInterval: progressInterval,
                        onUpdate: onUpdate)
    }

    /// Watches every key from `prefix` up to (not including) `end`, as ``watch(prefix:from:progressInterval:onUpdate:)``.
    package func watch(prefix: [UInt8], end: [UInt8], from startRevision: Int64, progressInterval: Duration = .milliseconds(500),
                       onUpdate: @escaping @Sendable (WatchUpdate) async -> Bool) async throws(EtcdError) {
        guard let (index, grpc) = watchMember() else { throw EtcdError(.closed, "the etcd client was closed") }
        let create = Etcdserverpb_WatchRequest.with {
            $0.createRequest = .with {
                $0.key = Data(prefix)
                $0.rangeEnd = Data(end)
                $0.startRevision = startRevision
                $0.prevKv = true
            }
        }
        let lastHeard = Locked(ContinuousClock.now)
        let ended = Locked<EtcdError?>(nil)
        do {
            try await Etcdserverpb_Watch.Client(wrapping: grpc).watch(metadata: ["hasleader": "true"]) { writer in
                try await writer.write(create)
                while true {
                    try await Task.sleep(for: progressInterval)
                    if ContinuousClock.now - lastHeard.withLock({ $0 }) > progressInterval * 3 {
                        throw RPCError(code: .unavailable, message: "the member answered no progress request for \(progressInterval * 3)")
                    }
                    try await writer.write(.with { $0.progressRequest = .init() })
                }
            } onResponse: { response in
                for try await reply in response.messages {
                    lastHeard.withLock { $0 = .now }
                    let update: WatchUpdate
                    if reply.canceled {
                        if reply.compactRevision > 0 {
                            throw EtcdError(.compacted, "etcd compacted its history through \(reply.compactRevision)",
                                            compactedRevision: reply.compactRevision)
                        }
                        throw RPCError(code: .unavailable, message: "etcd ended the watch: \(reply.cancelReason)")
                    } else if reply.created {
                        update = .created(headRevision: reply.header.revision)
                    } else if reply.events.isEmpty {
                        update = .progress(revision: reply.header.revision)
                    } else {
                        update = .events(reply.events, headRevision: reply.header.revision)
                    }
                    guard await onUpdate(update) else {
                        ended.withLock { $0 = EtcdError(.closed, "the watch was ended") }
                        return
                    }
                }
                throw RPCError(code: .unavailable, message: "the watch stream ended")
            }
        } catch {
            let failure = Self.classify(error)
            if failure.code == .unavailable { rotate(awayFrom: index) }
            throw failure
        }
        if ended.withLock({ $0 }) != nil { return }
    }

    /// etcd's range end for every key that starts with `prefix`.
    package static func rangeEnd(ofPrefix prefix: [UInt8]) -> [UInt8] {
        var end = prefix
        while let last = end.last {
            if last < 0xFF {
                end[end.count - 1] = last + 1
                return end
            }
            end.removeLast()
        }
        return [0]  // every key
    }
}
#endif
