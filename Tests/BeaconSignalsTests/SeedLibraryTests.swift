import Observation
import Testing
@testable import BeaconSignals

@Suite("Seed libraries: operators, events, buses, timing", .timeLimit(.minutes(3)))
struct SeedLibraryTests {
    @Test("onValue delivers changes; atOnce delivers the current value first; a dispose bag stops both")
    func onValueAndAtOnce() {
        let source = MutableSignal(1)
        var changes: [Int] = []
        var all: [Int] = []
        let bag = DisposeBag()
        bag += source.onValue { changes.append($0) }
        bag += source.atOnce().onValue { all.append($0) }
        source.value = 2
        source.value = 2
        source.value = 3
        bag.dispose()
        source.value = 4
        #expect(changes == [2, 3])
        #expect(all == [1, 2, 3])
        #expect(bag.count == 0)
    }

    @Test("map, distinct, filter, latestTwo, combineLatest, merge and flatMapLatest on signals")
    func stateOperators() {
        let a = MutableSignal(1)
        let b = MutableSignal("x")
        let doubled = a.map { $0 * 2 }
        let parity = a.map { $0 % 2 }.distinct()
        var parityChanges = 0
        let watcher = parity.onValue { _ in parityChanges += 1 }
        let evens = a.filter(initial: 0) { $0 % 2 == 0 }
        let pairs = a.latestTwo()
        let both = combineLatest(a.readOnly(), b.readOnly())
        let other = MutableSignal(100)
        let merged = a.readOnly().merge(other)
        let useA = MutableSignal(true)
        let switched = useA.flatMapLatest { $0 ? a.map { "a\($0)" } : b.readOnly() }
        a.value = 3
        #expect(doubled.value == 6)
        #expect(parityChanges == 0)
        a.value = 4
        #expect(parityChanges == 1)
        #expect(evens.value == 4)
        a.value = 5
        #expect(evens.value == 4)
        #expect(pairs.value.previous == 4 && pairs.value.current == 5)
        #expect(both.value == (5, "x"))
        other.value = 7
        #expect(merged.value == 7)
        a.value = 6
        #expect(merged.value == 6)
        #expect(switched.value == "a6")
        useA.value = false
        #expect(switched.value == "x")
        watcher.dispose()
    }

    @Test("Event signals: observe, once, stop by decision, owners, removal, replay of the last event")
    func eventSignals() {
        let events = EventSignal<Int>()
        var all: [Int] = []
        var once: [Int] = []
        var untilThree: [Int] = []
        let token = events.observe { all.append($0) }
        events.observeOnce { once.append($0) }
        events.observeUntilStopped { untilThree.append($0); return $0 >= 3 ? .stop : .continue }
        var owner: NSObjectLike? = NSObjectLike()
        var owned: [Int] = []
        events.observe(owner: owner!) { owned.append($0) }
        events.fire(1)
        owner = nil
        events.fire(3)
        events.fire(5)
        token.dispose()
        events.fire(6)
        #expect(all == [1, 3, 5])
        #expect(once == [1])
        #expect(untilThree == [1, 3])
        #expect(owned == [1])
        #expect(events.observerCount == 0)

        let past = EventSignal<String>(replaysLast: true)
        past.fire("first")
        past.fire("latest")
        var late: [String] = []
        let lateToken = past.observe { late.append($0) }
        past.fire("next")
        #expect(late == ["latest", "next"])
        past.removeAllObservers()
        past.fire("gone")
        #expect(late == ["latest", "next"])
        lateToken.dispose()
    }

    @Test("Event operators: map, filter, distinct, latestTwo, merge (union) and flatMapLatest")
    func eventOperators() {
        let source = EventSignal<Int>()
        let other = EventSignal<Int>()
        var mapped: [String] = []
        var filtered: [Int] = []
        var distinct: [Int] = []
        var pairs: [String] = []
        var merged: [Int] = []
        let bag = DisposeBag()
        let m = source.map { "#\($0)" }
        bag += m.observe { mapped.append($0) }
        let f = source.filter { $0 > 1 }
        bag += f.observe { filtered.append($0) }
        let d = source.distinct()
        bag += d.observe { distinct.append($0) }
        let l = source.latestTwo()
        bag += l.observe { pairs.append("\($0.0)>\($0.1)") }
        let u = source.merge(other)
        bag += u.observe { merged.append($0) }
        for value in [1, 1, 2, 3] {
            source.fire(value)
        }
        other.fire(9)
        #expect(mapped == ["#1", "#1", "#2", "#3"])
        #expect(filtered == [2, 3])
        #expect(distinct == [1, 2, 3])
        #expect(pairs == ["1>1", "1>2", "2>3"])
        #expect(merged == [1, 1, 2, 3, 9])

        let selector = EventSignal<Int>()
        let inners = [EventSignal<String>(), EventSignal<String>()]
        var flattened: [String] = []
        let flat = selector.flatMapLatest { inners[$0] }
        bag += flat.observe { flattened.append($0) }
        selector.fire(0)
        inners[0].fire("a")
        selector.fire(1)
        inners[0].fire("ignored")
        inners[1].fire("b")
        #expect(flattened == ["a", "b"])
        bag.dispose()
    }

    @Test("A keyed bus registers each listener at most once per key and forgets dead listeners")
    func eventBus() {
        let bus = EventBus<String, Int>()
        let listener = NSObjectLike()
        var received: [String] = []
        bus.listen(to: "battery", listener: listener) { received.append("first \($0)") }
        bus.listen(to: "battery", listener: listener) { received.append("second \($0)") }
        var temporary: NSObjectLike? = NSObjectLike()
        bus.listen(to: "battery", listener: temporary!) { received.append("temp \($0)") }
        #expect(bus.listenerCount(for: "battery") == 2)
        temporary = nil
        #expect(bus.post(1, to: "battery") == 1)
        #expect(bus.post(2, to: "net") == 0)
        bus.stopListening(to: "battery", listener: listener)
        bus.post(3, to: "battery")
        #expect(received == ["second 1"])
    }

    @Test("debounce and throttle follow an injected clock exactly")
    func timingOperators() {
        let clock = ManualScheduler()
        let source = MutableSignal(0)
        let debounced = source.debounce(.milliseconds(100), scheduler: clock)
        let throttled = source.throttle(.milliseconds(100), scheduler: clock)
        var debouncedSeen: [Int] = []
        var throttledSeen: [Int] = []
        let w1 = debounced.onValue { debouncedSeen.append($0) }
        let w2 = throttled.onValue { throttledSeen.append($0) }
        source.value = 1                       // t=0: throttle passes 1 at once
        clock.advance(by: .milliseconds(50))
        source.value = 2                       // t=50: held by both
        clock.advance(by: .milliseconds(30))
        source.value = 3                       // t=80
        clock.advance(by: .milliseconds(20))   // t=100: throttle's trailing 3
        #expect(throttledSeen == [1, 3])
        #expect(debouncedSeen == [])
        clock.advance(by: .milliseconds(80))   // t=180: debounce fires 3 (80 + 100)
        #expect(debouncedSeen == [3])
        clock.advance(by: .milliseconds(200))
        #expect(debouncedSeen == [3])
        #expect(throttledSeen == [1, 3])
        #expect(debounced.value == 3 && throttled.value == 3)
        w1.dispose()
        w2.dispose()
    }

    @Test("A model's signal properties notify as one object, once per batch")
    func signalModel() {
        final class Player: SignalModel {
            let name = MutableSignal("Ann")
            let score = MutableSignal(0)
            let plain = 5
        }
        let player = Player()
        var notified: [String] = []
        let watcher = player.observeChanges { notified.append("\($0.name.peek()):\($0.score.peek())") }
        player.score.value = 1
        batch {
            player.name.value = "Bo"
            player.score.value = 2
        }
        #expect(notified == ["Ann:1", "Bo:2"])
        watcher.dispose()
    }

    @Test("Observation tracking sees individual signals")
    func observationBridge() {
        let count = MutableSignal(0)
        let other = MutableSignal(0)
        let observedCount = count.observable()
        let observedOther = other.observable()
        let changes = Counter()
        withObservationTracking {
            _ = observedCount.value
        } onChange: {
            changes.increment()
        }
        other.value = 1
        #expect(changes.value == 0)
        count.value = 1
        #expect(changes.value == 1)
        #expect(observedCount.value == 1 && observedOther.value == 1)
    }
}

/// A plain object to own registrations.
final class NSObjectLike {}

/// A thread-safe counter for `@Sendable` callbacks.
final class Counter: @unchecked Sendable {
    private var count = 0
    func increment() { count += 1 }
    var value: Int { count }
}
