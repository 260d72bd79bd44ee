// The dynamic dependency-graph cases of js-reactivity-benchmark (from Reactively's bench):
// rectangular graphs of computeds over a row of sources, some nodes dropping a dependency
// depending on a value, built with the suite's seeded generator so that the expected sums and
// run counts of the original apply unchanged.

/// One configuration of the suite (its `perfTests` list).
struct GraphConfig {
    let width: Int
    let totalLayers: Int
    /// The share of nodes that always read all their sources; the others drop one.
    let staticFraction: Double
    let nSources: Int
    /// The share of the last row that is read.
    let readFraction: Double
    let iterations: Int
    let expectedSum: Double
    let expectedCount: Int

    /// The suite's title, e.g. `6-10x10 - dyn25% - lazy80%`.
    var title: String {
        func percent(_ x: Double) -> String { "\(Int((x * 100).rounded()))%" }
        let dynamic = staticFraction < 1 ? " - dyn" + percent(1 - staticFraction) : ""
        let lazy = readFraction < 1 ? " - lazy" + percent(1 - readFraction) : ""
        return "\(nSources)-\(width)x\(totalLayers)\(dynamic)\(lazy)"
    }

    static let suite: [GraphConfig] = [
        GraphConfig(width: 10, totalLayers: 5, staticFraction: 1, nSources: 2, readFraction: 0.2,
                    iterations: 600_000, expectedSum: 19_199_968, expectedCount: 3_480_000),
        GraphConfig(width: 10, totalLayers: 10, staticFraction: 3.0 / 4, nSources: 6, readFraction: 0.2,
                    iterations: 15_000, expectedSum: 302_310_782_860, expectedCount: 1_155_000),
        GraphConfig(width: 1000, totalLayers: 12, staticFraction: 0.95, nSources: 4, readFraction: 1,
                    iterations: 7000, expectedSum: 29_355_933_696_000, expectedCount: 1_463_000),
        GraphConfig(width: 1000, totalLayers: 5, staticFraction: 1, nSources: 25, readFraction: 1,
                    iterations: 3000, expectedSum: 1_171_484_375_000, expectedCount: 732_000),
        GraphConfig(width: 5, totalLayers: 500, staticFraction: 1, nSources: 3, readFraction: 1,
                    iterations: 500, expectedSum: 3.0239642676898464e241, expectedCount: 1_246_500),
        GraphConfig(width: 100, totalLayers: 15, staticFraction: 0.5, nSources: 6, readFraction: 1,
                    iterations: 2000, expectedSum: 15_664_996_402_790_400, expectedCount: 1_078_000),
    ]
}

/// The suite's generator: sfc32 seeded by xmur3a("seed"), both on 32-bit words as in JavaScript.
struct SuiteRandom {
    private var a: UInt32, b: UInt32, c: UInt32, d: UInt32

    init(seed: String = "seed") {
        var h: UInt32 = 2_166_136_261
        let units = Array(seed.utf16)
        for unit in units {
            var k = UInt32(unit) &* 3_432_918_353
            k = (k << 15) | (k >> 17)
            h ^= k &* 461_845_907
            h = (h << 13) | (h >> 19)
            h = h &* 5 &+ 3_864_292_196
        }
        h ^= UInt32(units.count)
        func next() -> UInt32 {
            h ^= h >> 16
            h = h &* 2_246_822_507
            h ^= h >> 13
            h = h &* 3_266_489_909
            h ^= h >> 16
            return h
        }
        a = next()
        b = next()
        c = next()
        d = next()
    }

    /// The next value in [0, 1).
    mutating func next() -> Double {
        var t = a &+ b
        a = b ^ (b >> 9)
        b = c &+ (c << 3)
        c = (c << 21) | (c >> 11)
        d = d &+ 1
        t = t &+ d
        c = c &+ t
        return Double(t) / 4_294_967_296
    }
}

/// A built graph: its sources, the leaves that are read, and the count of computed runs.
struct DynamicGraph<F: BenchFramework> {
    let sources: [F.Source]
    let readLeaves: [F.Derived]
    let counter: Counter

    init(_ f: F, _ config: GraphConfig) {
        sources = (0..<config.width).map { f.signal(Double($0)) }
        let counter = Counter()
        self.counter = counter
        var random = SuiteRandom()
        var row = Self.makeRow(f, sources, config, counter, &random, SourceReader<F>.self)
        for _ in 1..<(config.totalLayers - 1) {
            row = Self.makeRow(f, row, config, counter, &random, DerivedReader<F>.self)
        }
        var pick = SuiteRandom()
        var leaves = row
        let skip = Int((Double(leaves.count) * (1 - config.readFraction)).rounded())
        for _ in 0..<skip {
            leaves.remove(at: Int((pick.next() * Double(leaves.count)).rounded(.down)))
        }
        readLeaves = leaves
        let read = leaves
        f.effect {
            for leaf in read {
                blackHole(f.read(leaf))
            }
        }
    }

    /// Writes one source per iteration (in a batch) and reads the leaves; returns their sum.
    func run(_ f: F, iterations: Int) -> Double {
        for i in 0..<iterations {
            f.batch {
                let index = i % sources.count
                f.write(sources[index], Double(i + index))
            }
            for leaf in readLeaves {
                blackHole(f.read(leaf))
            }
        }
        return readLeaves.reduce(0.0) { $0 + f.read($1) }
    }

    @inline(__always)
    private static func makeRow<Reader: NodeReader>(
        _ f: F, _ previous: [Reader.Node], _ config: GraphConfig, _ counter: Counter,
        _ random: inout SuiteRandom, _ reader: Reader.Type
    ) -> [F.Derived] where Reader.Framework == F {
        previous.indices.map { index in
            let inputs = (0..<config.nSources).map { previous[(index + $0) % previous.count] }
            if random.next() < config.staticFraction {
                return f.computed {
                    counter.count += 1
                    var sum = 0.0
                    for input in inputs {
                        sum += Reader.read(f, input)
                    }
                    return sum
                }
            }
            // Dynamic: depending on the first input's value, skip one of the others.
            let first = inputs[0]
            let tail = Array(inputs.dropFirst())
            return f.computed {
                counter.count += 1
                var sum = Reader.read(f, first)
                // JavaScript's `sum & 1` and `sum % tail.length`.
                let shouldDrop = Int64(jsRemainder(sum, 4_294_967_296)) & 1 != 0
                let dropIndex = jsRemainder(sum, Double(tail.count))
                for i in tail.indices {
                    if shouldDrop && Double(i) == dropIndex {
                        continue
                    }
                    sum += Reader.read(f, tail[i])
                }
                return sum
            }
        }
    }
}

/// Reads one kind of node (a source or a computed) of a framework. A type parameter rather than
/// a closure, so that the specialised graph calls the framework's `read` directly: a closure
/// taking a generic node is called with the node passed indirectly, retained around each call.
protocol NodeReader {
    associatedtype Framework: BenchFramework
    associatedtype Node
    static func read(_ f: Framework, _ node: Node) -> Double
}

enum SourceReader<Framework: BenchFramework>: NodeReader {
    @inline(__always)
    static func read(_ f: Framework, _ node: Framework.Source) -> Double { f.read(node) }
}

enum DerivedReader<Framework: BenchFramework>: NodeReader {
    @inline(__always)
    static func read(_ f: Framework, _ node: Framework.Derived) -> Double { f.read(node) }
}
