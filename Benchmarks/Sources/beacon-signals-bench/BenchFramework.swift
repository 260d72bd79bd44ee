/// The operations the benchmark cases need, so that one definition of each case runs on
/// BeaconSignals, on Swift's Observation framework and on OpenCombine. Generic code over a
/// concrete framework is specialised, so the indirection costs nothing at run time.
///
/// Values are `Double`, like the JavaScript numbers of the original cases (the 5x500 dynamic
/// graph sums to about 3e241, and its expected result is that exact double).
protocol BenchFramework: AnyObject, SendableMetatype {
    associatedtype Source
    associatedtype Derived
    associatedtype DerivedArray

    var name: String { get }
    /// Whether the framework runs each computed and effect exactly as often as a glitch-free core
    /// with an equality cut-off does. Only then do the cases check run counts; every framework
    /// must produce the right values.
    var exactRunCounts: Bool { get }
    /// Why the framework cannot run a graph of `layers` layers whose nodes read `fanIn` nodes of
    /// the layer before in reasonable time, if it cannot.
    func reasonToSkip(layers: Int, fanIn: Int) -> String?
    /// Whether a computed's dependencies follow what it reads each time (not only the first).
    var tracksDynamicDependencies: Bool { get }

    func signal(_ value: Double) -> Source
    func computed(_ body: @escaping () -> Double) -> Derived
    /// A computed array whose every recomputation counts as a change (a new JS object).
    func computedArray(_ body: @escaping () -> [Double]) -> DerivedArray
    func read(_ source: Source) -> Double
    func read(_ derived: Derived) -> Double
    func read(_ derived: DerivedArray) -> [Double]
    func write(_ source: Source, _ value: Double)
    /// Creates an effect the framework keeps until `cleanup()`.
    func effect(_ body: @escaping () -> Void)
    func batch(_ body: () -> Void)
    /// Disposes every effect created so far.
    func cleanup()
}

extension BenchFramework {
    func reasonToSkip(layers: Int, fanIn: Int) -> String? { nil }
    var tracksDynamicDependencies: Bool { true }
}

/// Why a case whose dependencies change cannot run on `f`, if it cannot.
func reasonToSkipDynamic<F: BenchFramework>(_ f: F) -> String? {
    f.tracksDynamicDependencies ? nil : "its dependencies change with its inputs; pipelines are wired once"
}
