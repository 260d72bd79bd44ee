// molBench and cellx from js-reactivity-benchmark.

@inline(never)
func fib(_ n: Int) -> Int {
    n < 2 ? 1 : fib(n - 1) + fib(n - 2)
}

func hard(_ n: Double) -> Double {
    n + Double(fib(16))
}

/// JavaScript's `%` on numbers.
@inline(__always)
func jsRemainder(_ x: Double, _ y: Double) -> Double {
    x.truncatingRemainder(dividingBy: y)
}

/// molBench: a small graph with expensive nodes, two batches per iteration.
func molBench<F: BenchFramework>(_ f: F) -> () -> Void {
    let numbers = (0..<5).map(Double.init)
    let results = Counter()
    let a = f.signal(0)
    let b = f.signal(0)
    let c = f.computed { jsRemainder(f.read(a), 2) + jsRemainder(f.read(b), 2) }
    // Like the JS original, a new array of objects every time: no equality cut-off.
    let d = f.computedArray { numbers.map { $0 + jsRemainder(f.read(a), 2) - jsRemainder(f.read(b), 2) } }
    let e = f.computed { hard(f.read(c) + f.read(a) + f.read(d)[0]) }
    let ff = f.computed { hard(f.read(d)[2] != 0 ? f.read(d)[2] : f.read(b)) }
    let g = f.computed {
        f.read(c) + (f.read(c) != 0 ? f.read(c) : jsRemainder(f.read(e), 2)) + f.read(d)[4] + f.read(ff)
    }
    f.effect { blackHole(hard(f.read(g))); results.count += 1 }
    f.effect { blackHole(f.read(g)); results.count += 1 }
    f.effect { blackHole(hard(f.read(ff))); results.count += 1 }
    var i = 0.0
    return {
        i += 1
        results.count = 0
        f.batch {
            f.write(b, 1)
            f.write(a, 1 + i * 2)
        }
        f.batch {
            f.write(a, 2 + i * 2)
            f.write(b, 2)
        }
        // The JS case checks nothing; here at least the effects must have run.
        check(results.count > 0, "molBench: no effect ran")
    }
}

/// cellx: `layers` layers of four computeds each, every one watched by an effect; returns the
/// time to read the last layer, batch-write the first and read the last layer again.
func cellx<F: BenchFramework>(_ f: F, layers: Int) -> (ms: Double, before: [Double], after: [Double]) {
    let start = (f.signal(1), f.signal(2), f.signal(3), f.signal(4))
    func watch(_ s: (F.Derived, F.Derived, F.Derived, F.Derived)) {
        f.effect { blackHole(f.read(s.0)) }
        f.effect { blackHole(f.read(s.1)) }
        f.effect { blackHole(f.read(s.2)) }
        f.effect { blackHole(f.read(s.3)) }
    }
    var layer = (
        f.computed { f.read(start.1) },
        f.computed { f.read(start.0) - f.read(start.2) },
        f.computed { f.read(start.1) + f.read(start.3) },
        f.computed { f.read(start.2) }
    )
    watch(layer)
    for _ in 1..<layers {
        let m = layer
        layer = (
            f.computed { f.read(m.1) },
            f.computed { f.read(m.0) - f.read(m.2) },
            f.computed { f.read(m.1) + f.read(m.3) },
            f.computed { f.read(m.2) }
        )
        watch(layer)
    }
    let end = layer
    var before: [Double] = []
    var after: [Double] = []
    let ms = time {
        before = [f.read(end.0), f.read(end.1), f.read(end.2), f.read(end.3)]
        f.batch {
            f.write(start.0, 4)
            f.write(start.1, 3)
            f.write(start.2, 2)
            f.write(start.3, 1)
        }
        after = [f.read(end.0), f.read(end.1), f.read(end.2), f.read(end.3)]
    }
    f.cleanup()
    return (ms, before, after)
}
