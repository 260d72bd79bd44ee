// sBench from js-reactivity-benchmark (after Solid's bench.cjs): creating signals, creating
// effects over 0, 1, 2, 4 or 1000 sources (and 1 source shared by 2, 4, 8 or 1000 effects), and
// updating sources watched by such effects. Each sub-case is timed from after its sources exist
// to after its effects are disposed; the updates run inside one batch, as the harness does.

/// The three figures the reference reports for sBench, in milliseconds.
struct SBenchTimes {
    var createSignals = 0.0
    var createComputations = 0.0
    var updateSignals = 0.0
}

enum SBench {
    static let count = 100_000

    /// Runs every sub-case once on `f` and returns the three totals.
    static func run<F: BenchFramework>(_ f: F) -> SBenchTimes {
        var times = SBenchTimes()
        times.createSignals = measure(f, n: count, sources: count) { _, _ in {} }
        let creates: [(Int, Int, (F, Int, [F.Source]) -> () -> Void)] = [
            (count, 0, create0to1), (count, count, create1to1), (count / 2, count, create2to1),
            (count / 4, count, create4to1), (count / 1000, count, create1000to1),
            (count, count / 2, create1toN(2)), (count, count / 4, create1toN(4)),
            (count, count / 8, create1toN(8)), (count, count / 1000, create1toN(1000)),
        ]
        for (n, sources, body) in creates {
            times.createComputations += measure(f, n: n, sources: sources) { body(f, $0, $1) }
        }
        let updates: [(Int, Int, (F, Int, [F.Source]) -> () -> Void)] = [
            (count * 4, 1, updateNto1(1)), (count * 2, 2, updateNto1(2)), (count, 4, updateNto1(4)),
            (count / 250, 1000, updateNto1(1000)), (count, 1, update1toN(2)),
            (count, 1, update1toN(4)), (count, 1, update1toN(1000)),
        ]
        for (n, sources, body) in updates {
            times.updateSignals += measure(f, n: n, sources: sources) { body(f, $0, $1) }
        }
        return times
    }

    /// The harness's `run`: three small warm-ups, then one timed build and update.
    private static func measure<F: BenchFramework>(
        _ f: F, n: Int, sources count: Int, _ body: (Int, [F.Source]) -> () -> Void
    ) -> Double {
        for _ in 0..<3 {
            let sources = (0..<count).map { f.signal(Double($0)) }
            let update = body(n / 100, sources)
            f.batch(update)
            f.cleanup()
        }
        let sources = (0..<count).map { f.signal(Double($0)) }
        for source in sources {
            blackHole(f.read(source) + f.read(source) + f.read(source))
        }
        let start = nowMilliseconds()
        let update = body(n, sources)
        f.batch(update)
        f.cleanup()
        return nowMilliseconds() - start
    }

    private static func create0to1<F: BenchFramework>(_ f: F, _ n: Int, _ sources: [F.Source]) -> () -> Void {
        for i in 0..<n {
            let value = Double(i)
            f.effect { blackHole(value) }
        }
        return {}
    }

    private static func create1to1<F: BenchFramework>(_ f: F, _ n: Int, _ sources: [F.Source]) -> () -> Void {
        for i in 0..<n {
            let s1 = sources[i]
            f.effect { blackHole(f.read(s1)) }
        }
        return {}
    }

    private static func create2to1<F: BenchFramework>(_ f: F, _ n: Int, _ sources: [F.Source]) -> () -> Void {
        for i in 0..<n {
            let s1 = sources[i * 2], s2 = sources[i * 2 + 1]
            f.effect { blackHole(f.read(s1) + f.read(s2)) }
        }
        return {}
    }

    private static func create4to1<F: BenchFramework>(_ f: F, _ n: Int, _ sources: [F.Source]) -> () -> Void {
        for i in 0..<n {
            let s1 = sources[i * 4], s2 = sources[i * 4 + 1], s3 = sources[i * 4 + 2], s4 = sources[i * 4 + 3]
            f.effect { blackHole(f.read(s1) + f.read(s2) + f.read(s3) + f.read(s4)) }
        }
        return {}
    }

    private static func create1000to1<F: BenchFramework>(_ f: F, _ n: Int, _ sources: [F.Source]) -> () -> Void {
        for i in 0..<n {
            let offset = i * 1000
            f.effect {
                var sum = 0.0
                for j in 0..<1000 {
                    sum += f.read(sources[offset + j])
                }
                blackHole(sum)
            }
        }
        return {}
    }

    /// `n / fanOut` sources, each read by `fanOut` effects.
    private static func create1toN<F: BenchFramework>(_ fanOut: Int) -> (F, Int, [F.Source]) -> () -> Void {
        { f, n, sources in
            for i in 0..<(n / fanOut) {
                let s1 = sources[i]
                for _ in 0..<fanOut {
                    f.effect { blackHole(f.read(s1)) }
                }
            }
            return {}
        }
    }

    /// One effect over `fanIn` sources; `n` writes to the first.
    private static func updateNto1<F: BenchFramework>(_ fanIn: Int) -> (F, Int, [F.Source]) -> () -> Void {
        { f, n, sources in
            let read = Array(sources.prefix(fanIn))
            f.effect {
                var sum = 0.0
                for source in read {
                    sum += f.read(source)
                }
                blackHole(sum)
            }
            let s1 = sources[0]
            return {
                for i in 0..<n {
                    f.write(s1, Double(i))
                }
            }
        }
    }

    /// `fanOut` effects over one source; `n` writes to it (`n / 10` for 1000 effects).
    private static func update1toN<F: BenchFramework>(_ fanOut: Int) -> (F, Int, [F.Source]) -> () -> Void {
        { f, n, sources in
            let s1 = sources[0]
            for _ in 0..<fanOut {
                f.effect { blackHole(f.read(s1)) }
            }
            let writes = fanOut == 1000 ? n / 10 : n
            return {
                for i in 0..<writes {
                    f.write(s1, Double(i))
                }
            }
        }
    }
}
