import Synchronization

/// Bytes handed to libzmq and not yet let go of by it: added by the loop when it hands a message
/// over, taken off on libzmq's I/O thread once the message is written out (to every connection
/// it went to) or dropped. The two threads share it through an atomic only.
/// A count may roll up into wider ones (a connection's into its peer's and everyone's): what is
/// handed to it is counted in each.
final class BytesInFlight: Sendable {
    private let bytes = Atomic<Int>(0)
    /// Wider counts that include this one.
    private let parents: [BytesInFlight]

    init(within parents: [BytesInFlight] = []) {
        self.parents = parents
    }

    /// Bytes libzmq holds now.
    var value: Int { bytes.load(ordering: .acquiring) }

    /// Counts `count` bytes handed over; returns what to call once libzmq lets go of them.
    func hand(_ count: Int) -> @Sendable () -> Void {
        bytes.wrappingAdd(count, ordering: .relaxed)
        for parent in parents { parent.bytes.wrappingAdd(count, ordering: .relaxed) }
        return {
            self.bytes.wrappingSubtract(count, ordering: .releasing)
            for parent in self.parents { parent.bytes.wrappingSubtract(count, ordering: .releasing) }
        }
    }
}
