import Synchronization

/// How far behind the slowest subscriber is on small publications, without counting each one.
///
/// Publications under ``Publisher/trackedBytes`` are too many to count one by one (each would
/// need a frame of its own memory and a callback). Instead every ``interval``-th of them is a
/// *sentinel*, sent with a callback that says when libzmq lets go of it. libzmq writes each
/// connection's messages in order, so once a sentinel is let go of, every small publication before
/// it was written to every subscriber it went to (or dropped at a high-water mark). The small
/// publications handed over since the last sentinel before the oldest one libzmq still holds are
/// therefore at least as many as any one connection still has queued.
///
/// The loop's; the callbacks run on libzmq's I/O thread and only set a sentinel's flag.
final class SmallPublicationBacklog {
    /// A sentinel: its place among the small publications, and whether libzmq let go of it.
    private struct Sentinel {
        let index: UInt64
        let released: ReleaseFlag
    }

    private final class ReleaseFlag: Sendable {
        private let flag = Atomic<Bool>(false)
        var isSet: Bool { flag.load(ordering: .acquiring) }
        func set() { flag.store(true, ordering: .releasing) }
    }

    /// One small publication in this many is a sentinel.
    static let interval: UInt64 = 1024

    /// Small publications handed to libzmq.
    private(set) var handed: UInt64 = 0
    /// Sentinels libzmq may still hold, oldest first (some behind the oldest may be let go of).
    private var sentinels: [Sentinel] = []
    private var sentinelsAfterLastPrune = 0

    /// Counts one small publication about to be handed over; returns the callback to send it with
    /// when it is a sentinel.
    func handing() -> (@Sendable () -> Void)? {
        handed += 1
        guard handed % Self.interval == 0 else { return nil }
        let flag = ReleaseFlag()
        sentinels.append(Sentinel(index: handed, released: flag))
        // A subscriber that stopped holds its oldest sentinels; the later ones are let go of as
        // its queue is full, and are pruned so that the list stays as long as what it holds.
        if sentinels.count >= 2 * sentinelsAfterLastPrune + 64 {
            let oldest = sentinels[0]
            sentinels.removeAll { $0.released.isSet && $0.index != oldest.index }
            sentinelsAfterLastPrune = sentinels.count
        }
        return { flag.set() }
    }

    /// Small publications handed over since the last sentinel libzmq let go of before the oldest
    /// one it still holds: at least what any one connection still has queued.
    var backlog: UInt64 {
        while let first = sentinels.first, first.released.isSet { sentinels.removeFirst() }
        guard let oldest = sentinels.first else { return handed % Self.interval }
        return handed - oldest.index + Self.interval
    }
}
