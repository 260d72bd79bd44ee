import Testing
@testable import BeaconSignals

@Suite("Core: push-pull propagation", .timeLimit(.minutes(3)))
struct PropagationTests {
    @Test("A diamond's join recomputes once per write and never sees a mix of old and new")
    func diamondIsGlitchFree() {
        let source = MutableSignal(1)
        let left = computed { source.value * 2 }
        let right = computed { source.value * 3 }
        var joinRuns = 0
        var seen: [(Int, Int)] = []
        let join = computed { () -> Int in
            joinRuns += 1
            seen.append((left.value, right.value))
            return left.value + right.value
        }
        var effectRuns = 0
        let watcher = effect { _ = join.value; effectRuns += 1 }
        #expect(joinRuns == 1 && effectRuns == 1)
        source.value = 2
        #expect(join.value == 10)
        #expect(joinRuns == 2)
        #expect(effectRuns == 2)
        source.value = 5
        #expect(joinRuns == 3 && effectRuns == 3)
        // Every evaluation saw both sides from the same source value.
        #expect(seen.allSatisfy { $0.0 * 3 == $0.1 * 2 })
        watcher.dispose()
    }

    @Test("Computeds are lazy and cached: nothing runs until read, nothing re-runs without a change")
    func lazyAndCached() {
        let a = MutableSignal(1)
        var runs = 0
        let doubled = computed { () -> Int in runs += 1; return a.value * 2 }
        #expect(runs == 0)
        #expect(doubled.value == 2)
        #expect(doubled.value == 2)
        #expect(runs == 1)
        a.value = 3
        #expect(runs == 1)
        #expect(doubled.value == 6)
        #expect(runs == 2)
    }

    @Test("Equality cut-off: an unchanged result runs nothing downstream")
    func avoidablePropagation() {
        let head = MutableSignal(0)
        var parityRuns = 0
        let parity = computed { () -> Int in parityRuns += 1; return head.value % 2 }
        var downstreamRuns = 0
        let downstream = computed { () -> Int in downstreamRuns += 1; return parity.value + 100 }
        var effectRuns = 0
        let watcher = effect { _ = downstream.value; effectRuns += 1 }
        head.value = 2
        head.value = 4
        #expect(parityRuns == 3)
        #expect(downstreamRuns == 1)
        #expect(effectRuns == 1)
        head.value = 5
        #expect(downstreamRuns == 2 && effectRuns == 2)
        watcher.dispose()
    }

    @Test("Writing an equal value to a source does nothing; custom equality decides for other types")
    func sourceEquality() {
        struct Box { var id: Int; var payload: String }
        let box = MutableSignal(Box(id: 1, payload: "a"), equals: { $0.id == $1.id })
        let plain = MutableSignal(7)
        var runs = 0
        let watcher = effect { _ = box.value; _ = plain.value; runs += 1 }
        box.value = Box(id: 1, payload: "b")
        plain.value = 7
        #expect(runs == 1)
        box.value = Box(id: 2, payload: "b")
        #expect(runs == 2)
        let always = MutableSignal(Box(id: 1, payload: "a"))
        var alwaysRuns = 0
        let second = effect { _ = always.value; alwaysRuns += 1 }
        always.value = Box(id: 1, payload: "a")
        #expect(alwaysRuns == 2)
        watcher.dispose()
        second.dispose()
    }

    @Test("Dynamic dependencies: a branch no longer read is no longer a dependency")
    func dynamicDependencies() {
        let useLeft = MutableSignal(true)
        let left = MutableSignal("L")
        let right = MutableSignal("R")
        var runs = 0
        let chosen = computed { () -> String in runs += 1; return useLeft.value ? left.value : right.value }
        let watcher = effect { _ = chosen.value }
        #expect(runs == 1)
        right.value = "R2"
        #expect(runs == 1)
        useLeft.value = false
        #expect(chosen.value == "R2" && runs == 2)
        left.value = "L2"
        #expect(runs == 2)
        right.value = "R3"
        #expect(chosen.value == "R3" && runs == 3)
        watcher.dispose()
    }

    @Test("A computed nobody watches holds no subscriptions and is freed when dropped")
    func unwatchedComputedIsFreed() {
        let source = MutableSignal(1)
        weak var weakComputed: Computed<Int>?
        do {
            let c = computed { source.value + 1 }
            weakComputed = c
            #expect(c.value == 2)
            #expect(source.node.firstSub == nil)
            let watcher = effect { _ = c.value }
            #expect(source.node.firstSub != nil)
            watcher.dispose()
            #expect(source.node.firstSub == nil)
            source.value = 5
            #expect(c.value == 6)
        }
        #expect(weakComputed == nil)
    }

    @Test("Nested batches return values and flush effects once, at the end of the outermost")
    func nestedBatch() {
        let a = MutableSignal(0)
        let b = MutableSignal(0)
        var seen: [Int] = []
        let watcher = effect { seen.append(a.value + b.value) }
        let result = batch { () -> String in
            a.value = 1
            let inner = batch { () -> Int in
                b.value = 2
                return a.value + b.value
            }
            #expect(seen == [0])
            a.value = 10
            return "inner saw \(inner)"
        }
        #expect(result == "inner saw 3")
        #expect(seen == [0, 12])
        watcher.dispose()
    }

    @Test("untracked and peek read without making a dependency")
    func untrackedReads() {
        let tracked = MutableSignal(1)
        let hidden = MutableSignal(1)
        let hiddenComputed = computed { hidden.value * 10 }
        var runs = 0
        let watcher = effect {
            _ = tracked.value
            _ = untracked { hidden.value }
            _ = hiddenComputed.peek()
            runs += 1
        }
        hidden.value = 2
        #expect(runs == 1)
        tracked.value = 2
        #expect(runs == 2)
        #expect(hiddenComputed.peek() == 20)
        watcher.dispose()
    }

    @Test("A signal read many times by one computed is one dependency")
    func repeatedReads() {
        let head = MutableSignal(1)
        var runs = 0
        let sum = computed { () -> Int in
            runs += 1
            return (0..<30).reduce(0) { total, _ in total + head.value }
        }
        let watcher = effect { _ = sum.value }
        var links = 0
        var link = sum.node.firstDep
        while let current = link { links += 1; link = current.nextDep }
        #expect(links == 1)
        head.value = 2
        #expect(sum.value == 60 && runs == 2)
        watcher.dispose()
    }

    @Test("Graphs freed and rebuilt, and dependencies switched back and forth, keep exact values")
    func linksAreRecycledAndReleased() {
        // Each round frees 3,000 links, more than a thread keeps for reuse, so both the reuse
        // list and the return to malloc are exercised; the switching computeds churn a few links
        // per write through the reuse list.
        for round in 0..<3 {
            let sources = (0..<10).map { MutableSignal($0) }
            let row = (0..<1000).map { index in
                computed { sources[index % 10].value + sources[(index + 1) % 10].value }
            }
            let switching = (0..<1000).map { index in
                computed { sources[0].value % 2 == 0 ? row[index].value : -sources[1].value }
            }
            var effectRuns = 0
            var total = 0
            let watcher = effect {
                effectRuns += 1
                total = switching.reduce(0) { $0 + $1.value }
            }
            // sources[0] = 0 (even): each switching node reads its row node.
            #expect(total == (0..<1000).reduce(0) { $0 + $1 % 10 + ($1 + 1) % 10 })
            for write in 1...20 {
                sources[0].value = round * 100 + write
                let even = (round * 100 + write) % 2 == 0
                let expected = even
                    ? (0..<1000).reduce(0) { sum, index in
                        sum + sources[index % 10].peek() + sources[(index + 1) % 10].peek()
                    }
                    : -1000
                #expect(total == expected)
            }
            #expect(effectRuns == 21)
            watcher.dispose()
        }
    }

    @Test("Many writes to one signal in a batch run each of its 1,000 effects once, with the last value")
    func repeatedWritesInABatch() {
        let source = MutableSignal(0)
        var runs = Array(repeating: 0, count: 1000)
        var seen = Array(repeating: -1, count: 1000)
        let watchers = (0..<1000).map { index in
            effect {
                runs[index] += 1
                seen[index] = source.value
            }
        }
        batch {
            for value in 1...500 {
                source.value = value
            }
        }
        #expect(runs.allSatisfy { $0 == 2 })
        #expect(seen.allSatisfy { $0 == 500 })
        for watcher in watchers {
            watcher.dispose()
        }
    }

    @Test("A write in a batch after a read brought a dependent up to date reaches it again")
    func writeAfterReadInABatch() {
        let source = MutableSignal(0)
        var doubledRuns = 0
        let doubled = computed { () -> Int in doubledRuns += 1; return source.value * 2 }
        var seen: [Int] = []
        let watcher = effect { seen.append(doubled.value) }
        var readInside = -1
        batch {
            source.value = 1
            readInside = doubled.value
            source.value = 2
            source.value = 3
        }
        #expect(readInside == 2)
        #expect(seen == [0, 6])
        #expect(doubledRuns == 3)
        #expect(doubled.value == 6)
        watcher.dispose()
    }

    @Test("An effect created in a batch after a write sees the batch's later writes")
    func newSubscriberInABatch() {
        let source = MutableSignal(0)
        var outer: [Int] = []
        let first = effect { outer.append(source.value) }
        var inner: [Int] = []
        var second: Effect?
        batch {
            source.value = 1
            second = effect { inner.append(source.value) }
            source.value = 2
        }
        #expect(outer == [0, 2])
        #expect(inner == [1, 2])
        first.dispose()
        second?.dispose()
    }

    @Test("An effect that writes its own source twice in one run is re-run, as with one write")
    func effectWritesItsSourceTwice() {
        let source = MutableSignal(0)
        var runs = 0
        let watcher = effect {
            runs += 1
            let current = source.value
            if current < 10 {
                source.value = current + 1
                source.value = current + 2
            }
        }
        #expect(source.value == 10)
        #expect(runs == 6)
        watcher.dispose()
    }

    @Test("A write reaches an effect that started reading the signal after an earlier write in the same run")
    func subscriberAddedBetweenWrites() {
        let source = MutableSignal(0)
        var otherRuns = 0
        let other = effect { _ = source.value; otherRuns += 1 }
        var runs = 0
        let writer = effect {
            runs += 1
            if source.peek() < 6 {
                source.value = 5
                _ = source.value
                source.value = 6
            }
        }
        #expect(runs == 2)
        #expect(otherRuns == 2)
        #expect(source.value == 6)
        other.dispose()
        writer.dispose()
    }
}
