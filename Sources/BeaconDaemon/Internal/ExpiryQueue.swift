/// A min-heap of key expiry times. Entries may be stale (the key was rewritten); the daemon
/// checks each against the store when it comes due.
struct ExpiryQueue {
    struct Item {
        var atMilliseconds: UInt64
        var key: String
        var modRevision: UInt64
    }

    private var heap: [Item] = []

    var isEmpty: Bool { heap.isEmpty }
    var count: Int { heap.count }
    var next: Item? { heap.first }

    mutating func insert(_ item: Item) {
        heap.append(item)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].atMilliseconds < heap[parent].atMilliseconds else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    mutating func removeFirst() -> Item? {
        guard !heap.isEmpty else { return nil }
        heap.swapAt(0, heap.count - 1)
        let first = heap.removeLast()
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var smallest = parent
            if left < heap.count && heap[left].atMilliseconds < heap[smallest].atMilliseconds { smallest = left }
            if right < heap.count && heap[right].atMilliseconds < heap[smallest].atMilliseconds { smallest = right }
            if smallest == parent { break }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
        return first
    }
}
