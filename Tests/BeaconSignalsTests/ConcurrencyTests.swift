import Dispatch
import Testing
@testable import BeaconSignals

@Suite("Threading: async values and the inbox", .timeLimit(.minutes(3)))
struct ConcurrencyTests {
    @Test("values() yields the current value, then every change, and ends on cancellation",
          .timeLimit(.minutes(3)))
    @MainActor
    func asyncValues() async {
        let source = MutableSignal(1)
        var iterator = source.values().makeAsyncIterator()
        #expect(await iterator.next() == 1)
        source.value = 2
        source.value = 3
        #expect(await iterator.next() == 2)
        #expect(await iterator.next() == 3)

        let task = Task { @MainActor in
            var seen: [Int] = []
            for await value in source.values() {
                seen.append(value)
            }
            return seen
        }
        await Task.yield()
        task.cancel()
        let seen = await task.value
        #expect(seen.count <= 1)
    }

    @Test("Writes posted from other threads land in one batch per drain, in order",
          .timeLimit(.minutes(3)))
    func inbox() async {
        let a = MutableSignal(0)
        let b = MutableSignal(0)
        var runs = 0
        var seen: [(Int, Int)] = []
        let watcher = effect {
            seen.append((a.value, b.value))
            runs += 1
        }
        struct Change: Sendable { let a: Int; let b: Int }
        let inbox = SignalInbox<Change>()
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<4 {
                group.addTask {
                    for i in 0..<250 {
                        inbox.post(Change(a: thread * 1000 + i, b: thread * 1000 + i))
                    }
                }
            }
        }
        #expect(inbox.pendingCount == 1000)
        let applied = inbox.drain { change in
            a.value = change.a
            b.value = change.b
        }
        #expect(applied == 1000)
        #expect(runs == 2)
        #expect(seen.allSatisfy { $0.0 == $0.1 })
        watcher.dispose()
    }
}
