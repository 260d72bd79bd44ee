import Testing
@testable import BeaconSignals

@Suite("Core: effects, scopes, errors and cycles", .timeLimit(.minutes(3)))
struct EffectTests {
    @Test("A cleanup runs before each re-run and on dispose")
    func cleanupOrder() {
        let source = MutableSignal(1)
        var log: [String] = []
        let watcher = effect {
            let value = source.value
            log.append("run \(value)")
            onCleanup { log.append("cleanup \(value)") }
        }
        source.value = 2
        watcher.dispose()
        source.value = 3
        #expect(log == ["run 1", "cleanup 1", "run 2", "cleanup 2"])
    }

    @Test("Effects created inside an effect are disposed when it re-runs or is disposed")
    func nestedOwnership() {
        let outer = MutableSignal(0)
        let inner = MutableSignal(0)
        var innerRuns = 0
        let parent = effect {
            _ = outer.value
            _ = effect { _ = inner.value; innerRuns += 1 }
        }
        #expect(innerRuns == 1)
        inner.value = 1
        #expect(innerRuns == 2)
        outer.value = 1          // the old child is disposed, a new one runs
        #expect(innerRuns == 3)
        inner.value = 2          // only the new child runs
        #expect(innerRuns == 4)
        parent.dispose()
        inner.value = 3
        #expect(innerRuns == 4)
    }

    @Test("An EffectScope disposes everything created in it")
    func effectScope() {
        let source = MutableSignal(0)
        var runs = 0
        let scope = EffectScope()
        scope.run {
            _ = effect { _ = source.value; runs += 1 }
            _ = effect { _ = source.value; runs += 1 }
            onCleanup { runs += 100 }
        }
        source.value = 1
        #expect(runs == 4)
        scope.dispose()
        #expect(runs == 104)
        source.value = 2
        #expect(runs == 104)
    }

    @Test("An effect with no owner stops when its last reference goes away")
    func droppedEffectStops() {
        let source = MutableSignal(0)
        var runs = 0
        weak var weakEffect: Effect?
        do {
            let watcher = effect { _ = source.value; runs += 1 }
            weakEffect = watcher
            source.value = 1
            #expect(runs == 2)
        }
        #expect(weakEffect == nil)
        source.value = 2
        #expect(runs == 2)
        #expect(source.node.firstSub == nil)
    }

    @Test("Nothing leaks: signals, computeds and effects are freed after dispose")
    func noLeaks() {
        weak var weakSource: MutableSignal<Int>?
        weak var weakComputed: Computed<Int>?
        weak var weakEffect: Effect?
        do {
            let source = MutableSignal(1)
            let doubled = computed { source.value * 2 }
            let watcher = effect { _ = doubled.value }
            weakSource = source
            weakComputed = doubled
            weakEffect = watcher
            source.value = 2
            watcher.dispose()
        }
        #expect(weakSource == nil)
        #expect(weakComputed == nil)
        #expect(weakEffect == nil)
    }

    @Test("An error thrown in a computed is cached and rethrown until a dependency changes")
    func cachedErrors() throws {
        struct Negative: Error, Equatable { let value: Int }
        let input = MutableSignal(-1)
        var runs = 0
        let checked = computed { () throws -> Int in
            runs += 1
            if input.value < 0 { throw Negative(value: input.value) }
            return input.value * 2
        }
        #expect(throws: Negative(value: -1)) { try checked.get() }
        #expect(throws: Negative(value: -1)) { try checked.get() }
        #expect(runs == 1)
        let downstream = computed { () throws -> Int in try checked.get() + 1 }
        #expect(throws: Negative(value: -1)) { try downstream.get() }
        input.value = 4
        #expect(try checked.get() == 8)
        #expect(try downstream.get() == 9)
        #expect(runs == 2)
    }

    @Test("An effect's error goes to its handler and the graph stays consistent")
    func effectErrors() {
        struct Boom: Error {}
        let source = MutableSignal(0)
        var errors = 0
        var runs = 0
        let watcher = effect(onError: { _ in errors += 1 }) {
            runs += 1
            if source.value == 1 { throw Boom() }
        }
        source.value = 1
        #expect(errors == 1)
        source.value = 2
        #expect(runs == 3 && errors == 1)
        watcher.dispose()
    }

    @Test("An effect loop that never settles is stopped with a clear error")
    func effectLoop() {
        let counter = MutableSignal(0)
        var errors: [SignalError] = []
        let looping = effect(onError: { errors.append($0 as! SignalError) }) {
            counter.value = counter.value + 1
        }
        #expect(errors.count == 1)
        #expect(errors.first?.code == .effectLoop)
        counter.value = 1_000_000
        #expect(errors.count == 2)
        // The graph still works afterwards.
        let settled = computed { counter.value * 2 }
        #expect(settled.value == counter.peek() * 2)
        looping.dispose()
    }

    @Test("An effect that settles by itself runs until it does")
    func settlingEffect() {
        let value = MutableSignal(0)
        let watcher = effect {
            if value.value < 10 { value.value += 1 }
        }
        #expect(value.peek() == 10)
        watcher.dispose()
    }

    @Test("A throwing computed that reads itself gets a cycle error")
    func fallibleCycle() {
        var holder: Computed<Result<Int, any Error>>?
        let selfReading = computed { () throws -> Int in
            try holder!.get() + 1
        }
        holder = selfReading
        #expect(throws: SignalError.self) { try selfReading.get() }
        do {
            _ = try selfReading.get()
        } catch let error as SignalError {
            #expect(error.code == .cycle)
        } catch {
            Issue.record("unexpected error \(error)")
        }
        holder = nil
    }

    @Test("A computed that reads itself stops the process with a clear message")
    func cycleTraps() async {
        await #expect(processExitsWith: .failure) {
            final class Box { var signal: Computed<Int>? }
            let box = Box()
            let c = computed { (box.signal?.value ?? 0) + 1 }
            box.signal = c
            _ = c.value
        }
    }

    @Test("10,000-deep chains evaluate, update and free on a 512 KiB thread stack")
    func deepChainOnSmallStack() async {
        let result = await runOnThread(stackSize: 512 * 1024) { () -> [Int] in
            let head = MutableSignal(0)
            var current = computed { head.value + 1 }
            for _ in 1..<10_000 {
                let previous = current
                current = computed { previous.value + 1 }
            }
            let tail = current
            var seen: [Int] = []
            let watcher = effect { seen.append(tail.value) }
            head.value = 5
            watcher.dispose()
            return seen
        }
        #expect(result == [10_000, 10_005])
    }

    @Test("a 10,000-deep chain that was never read frees on a 512 KiB thread stack")
    func unreadDeepChainFreesOnSmallStack() async {
        // Nothing links the chain: each computed is held only by the next one's closure.
        let freed = await runOnThread(stackSize: 512 * 1024) { () -> Bool in
            let head = MutableSignal(0)
            weak var first: Computed<Int>?
            do {
                var current = computed { head.value + 1 }
                first = current
                for _ in 1..<10_000 {
                    let previous = current
                    current = computed { previous.value + 1 }
                }
            }
            return first == nil
        }
        #expect(freed)
    }
}
