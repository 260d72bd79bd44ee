import Testing
@testable import BeaconSignals

/// Holds a signal that is made after the closures that read it.
private final class Box<Value> {
    var signal: Computed<Result<Value, any Error>>?
}

/// What a reader saw: a value, the cycle error, or another error.
private enum Outcome: Equatable, CustomStringConvertible {
    case value(Int)
    case cycle
    case other(String)

    init(_ read: () throws -> Int) {
        do {
            self = .value(try read())
        } catch let error as SignalError where error.code == .cycle {
            self = .cycle
        } catch {
            self = .other("\(error)")
        }
    }

    var description: String {
        switch self {
        case .value(let value): "\(value)"
        case .cycle: "cycle"
        case .other(let text): "error \(text)"
        }
    }
}

/// `x` reads `y` while `on` is true, and `y` reads `x`: a cycle that `on` closes and opens.
private struct SwitchableCycle {
    let on = MutableSignal(false)
    let box = Box<Int>()
    let x: Computed<Result<Int, any Error>>
    let y: Computed<Result<Int, any Error>>

    init() {
        let on = self.on, box = self.box
        x = computed { () throws -> Int in
            on.value ? try box.signal!.get() : 0
        }
        let x = self.x
        y = computed { () throws -> Int in try x.get() + 1 }
        box.signal = y
    }

    /// Lets go of the closures' reference to `y`, so that the graph can be freed.
    func release() {
        box.signal = nil
    }
}

@Suite("Core: cycles among throwing computeds give .cycle, whoever watches them", .timeLimit(.minutes(3)))
struct CycleTests {
    @Test("A watched computed that starts reading itself gives .cycle, and its value once the switch is off")
    func watchedSelfRead() {
        let on = MutableSignal(false)
        let box = Box<Int>()
        let c = computed { () throws -> Int in
            on.value ? try box.signal!.get() + 1 : 0
        }
        box.signal = c
        var seen: [Outcome] = []
        let watcher = effect { seen.append(Outcome { try c.get() }) }
        on.value = true
        on.value = false
        #expect(seen == [.value(0), .cycle, .value(0)])
        on.value = true
        #expect(seen == [.value(0), .cycle, .value(0), .cycle])
        watcher.dispose()
        box.signal = nil
    }

    @Test("A watched cycle through another computed gives .cycle to every reader and leaves none behind")
    func watchedCycleThroughAnother() {
        let cycle = SwitchableCycle()
        let (on, x, y) = (cycle.on, cycle.x, cycle.y)
        var seenX: [Outcome] = []
        let watcher = effect { seenX.append(Outcome { try x.get() }) }
        on.value = true
        #expect(seenX == [.value(0), .cycle])
        #expect(Outcome { try y.get() } == .cycle)
        on.value = false
        #expect(seenX == [.value(0), .cycle, .value(0)])
        #expect(Outcome { try y.get() } == .value(1))
        watcher.dispose()
        cycle.release()
    }

    @Test("A cycle through a computed evaluated before gives .cycle instead of stopping the process")
    func cycleThroughEvaluatedComputed() {
        let cycle = SwitchableCycle()
        let (on, x, y) = (cycle.on, cycle.x, cycle.y)
        #expect(Outcome { try y.get() } == .value(1))
        on.value = true
        #expect(Outcome { try x.get() } == .cycle)
        #expect(Outcome { try y.get() } == .cycle)
        on.value = false
        #expect(Outcome { try x.get() } == .value(0))
        #expect(Outcome { try y.get() } == .value(1))
        cycle.release()
    }

    @Test("Effects on both computeds of a cycle see .cycle while it stands and values after it breaks")
    func effectsOnBothEnds() {
        let cycle = SwitchableCycle()
        let (on, x, y) = (cycle.on, cycle.x, cycle.y)
        var seenX: [Outcome] = []
        var seenY: [Outcome] = []
        let watchX = effect { seenX.append(Outcome { try x.get() }) }
        let watchY = effect { seenY.append(Outcome { try y.get() }) }
        for _ in 0..<3 {
            on.value = true
            #expect(seenX.last == .cycle)
            #expect(seenY.last == .cycle)
            on.value = false
            #expect(seenX.last == .value(0))
            #expect(seenY.last == .value(1))
        }
        #expect(seenX.count == 7)
        #expect(seenY.count == 7)
        watchX.dispose()
        watchY.dispose()
        cycle.release()
    }

    @Test("A standing cycle settles: reading it again and again recomputes nothing and re-runs no effect")
    func standingCycleSettles() {
        let on = MutableSignal(false)
        let other = MutableSignal(0)
        let box = Box<Int>()
        var runsOfX = 0
        let x = computed { () throws -> Int in
            runsOfX += 1
            return on.value ? try box.signal!.get() : 0
        }
        let y = computed { () throws -> Int in try x.get() + 1 }
        box.signal = y
        var runs = 0
        let watcher = effect {
            runs += 1
            _ = Outcome { try x.get() }
        }
        on.value = true
        let settledRuns = runs
        let settledComputations = runsOfX
        for step in 1...5 {
            other.value = step
            #expect(Outcome { try y.get() } == .cycle)
            #expect(Outcome { try x.get() } == .cycle)
        }
        #expect(runs == settledRuns)
        #expect(runsOfX == settledComputations)
        // Unwatched, every write elsewhere makes a read validate the cycle again.
        watcher.dispose()
        for step in 6...10 {
            other.value = step
            #expect(Outcome { try x.get() } == .cycle)
            #expect(Outcome { try y.get() } == .cycle)
        }
        #expect(runsOfX == settledComputations)
        box.signal = nil
    }

    @Test("Computeds dropped while their cycle is broken are freed")
    func brokenCycleIsFreed() {
        weak var weakX: Computed<Result<Int, any Error>>?
        weak var weakY: Computed<Result<Int, any Error>>?
        let on = MutableSignal(false)
        do {
            let box = Box<Int>()
            let x = computed { () throws -> Int in
                on.value ? try box.signal!.get() : 0
            }
            let y = computed { () throws -> Int in try x.get() + 1 }
            box.signal = y
            weakX = x
            weakY = y
            let watcher = effect { _ = Outcome { try y.get() } }
            on.value = true
            on.value = false
            watcher.dispose()
            box.signal = nil
        }
        #expect(weakX == nil)
        #expect(weakY == nil)
    }

    @Test("A cycle of non-throwing computeds, closed after a first read, still stops the process")
    func plainCycleTrapsWhenWatched() async {
        await #expect(processExitsWith: .failure) {
            final class PlainBox { var signal: Computed<Int>? }
            let on = MutableSignal(false)
            let box = PlainBox()
            let x = computed { on.value ? box.signal!.value : 0 }
            let y = computed { x.value + 1 }
            box.signal = y
            let watcher = effect { _ = y.value }
            on.value = true
            watcher.dispose()
        }
    }
}
