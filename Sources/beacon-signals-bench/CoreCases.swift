import BeaconSignals

// molBench and cellx from js-reactivity-benchmark, on BeaconSignals.

@inline(never)
func fib(_ n: Int) -> Int {
    n < 2 ? 1 : fib(n - 1) + fib(n - 2)
}

func hard(_ n: Int) -> Int {
    n + fib(16)
}

/// molBench: a small graph with expensive nodes, two batches per iteration.
func molBench() -> (() -> Void, [Effect]) {
    let numbers = Array(0..<5)
    var results: [Int] = []
    let a = MutableSignal(0)
    let b = MutableSignal(0)
    let c = computed { a.value % 2 + b.value % 2 }
    // Like the JS original, a new array of objects every time: no equality cut-off.
    let d = computed(equals: { (_: [Int], _: [Int]) in false }) {
        numbers.map { $0 + a.value % 2 - b.value % 2 }
    }
    let e = computed { hard(c.value + a.value + d.value[0]) }
    let f = computed { hard(d.value[2] != 0 ? d.value[2] : b.value) }
    let g = computed { c.value + (c.value != 0 ? c.value : e.value % 2) + d.value[4] + f.value }
    let effects = [
        effect { results.append(hard(g.value)) },
        effect { results.append(g.value) },
        effect { results.append(hard(f.value)) },
    ]
    var i = 0
    return ({
        i += 1
        results.removeAll(keepingCapacity: true)
        batch {
            b.value = 1
            a.value = 1 + i * 2
        }
        batch {
            a.value = 2 + i * 2
            b.value = 2
        }
        // The JS case checks nothing; here at least the effects must have run.
        check(!results.isEmpty, "molBench: no effect ran")
    }, effects)
}

/// cellx: `layers` layers of four computeds each, every one watched by an effect; returns the
/// time to read the last layer, batch-write the first and read the last layer again.
func cellx(layers: Int) -> (ms: Double, before: [Int], after: [Int]) {
    let start = (MutableSignal(1), MutableSignal(2), MutableSignal(3), MutableSignal(4))
    var effects: [Effect] = []
    effects.reserveCapacity(layers * 4)
    var layer: (Signal<Int>, Signal<Int>, Signal<Int>, Signal<Int>) = (start.0, start.1, start.2, start.3)
    for _ in 0..<layers {
        let m = layer
        let s = (
            computed { m.1.value } as Signal<Int>,
            computed { m.0.value - m.2.value } as Signal<Int>,
            computed { m.1.value + m.3.value } as Signal<Int>,
            computed { m.2.value } as Signal<Int>
        )
        effects.append(effect { _ = s.0.value })
        effects.append(effect { _ = s.1.value })
        effects.append(effect { _ = s.2.value })
        effects.append(effect { _ = s.3.value })
        layer = s
    }
    let end = layer
    var before: [Int] = []
    var after: [Int] = []
    let ms = time {
        before = [end.0.value, end.1.value, end.2.value, end.3.value]
        batch {
            start.0.value = 4
            start.1.value = 3
            start.2.value = 2
            start.3.value = 1
        }
        after = [end.0.value, end.1.value, end.2.value, end.3.value]
    }
    for effect in effects {
        effect.dispose()
    }
    return (ms, before, after)
}
