/// The operations the kairo cases need, so that one definition of each case runs on Beacon,
/// on Swift's Observation framework and on any other core. Generic code over a concrete
/// framework is specialised, so the indirection costs nothing at run time.
protocol BenchFramework: AnyObject {
    associatedtype Source
    associatedtype Derived
    associatedtype DerivedArray

    var name: String { get }
    func signal(_ value: Int) -> Source
    func computed(_ body: @escaping () -> Int) -> Derived
    /// A computed array whose every recomputation counts as a change (a new JS object).
    func computedArray(_ body: @escaping () -> [Int]) -> DerivedArray
    func read(_ derived: DerivedArray) -> [Int]
    func read(_ source: Source) -> Int
    func read(_ derived: Derived) -> Int
    func write(_ source: Source, _ value: Int)
    /// Creates an effect the framework keeps until `cleanup()`.
    func effect(_ body: @escaping () -> Void)
    func batch(_ body: () -> Void)
    /// Disposes every effect created so far.
    func cleanup()
}
