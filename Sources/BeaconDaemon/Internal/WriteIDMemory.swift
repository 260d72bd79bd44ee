/// The write ids of the last committed writes and their revisions, so that a retried write is
/// answered with its first outcome instead of applied twice. Holds at most `capacity` ids; the
/// oldest go first.
struct WriteIDMemory {
    let capacity: Int
    private var revisions: [[UInt8]: UInt64] = [:]
    /// Ids in the order they were remembered; those before `start` are forgotten.
    private var order: [[UInt8]] = []
    private var start = 0

    init(capacity: Int) {
        precondition(capacity > 0, "a write id memory holds at least one id")
        self.capacity = capacity
    }

    /// How many ids are remembered.
    var count: Int { revisions.count }

    /// The revision the write with `writeID` committed at, if it is remembered.
    func revision(of writeID: [UInt8]) -> UInt64? { revisions[writeID] }

    /// Remembers that the write with `writeID` committed at `revision`, forgetting the oldest id
    /// beyond the capacity.
    mutating func remember(_ writeID: [UInt8], revision: UInt64) {
        if revisions.updateValue(revision, forKey: writeID) == nil {
            order.append(writeID)
        }
        if revisions.count > capacity {
            revisions[order[start]] = nil
            start += 1
            if start > capacity {
                order.removeFirst(start)
                start = 0
            }
        }
    }

    /// Forgets every id (a relay that took another history).
    mutating func removeAll() {
        revisions.removeAll()
        order.removeAll()
        start = 0
    }
}
