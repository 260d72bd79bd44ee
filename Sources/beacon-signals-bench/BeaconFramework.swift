import BeaconSignals

/// The kairo cases on BeaconSignals.
final class BeaconFramework: BenchFramework {
    let name = "Beacon"
    private var effects: [Effect] = []

    func signal(_ value: Int) -> MutableSignal<Int> { MutableSignal(value) }
    func computed(_ body: @escaping () -> Int) -> Computed<Int> { BeaconSignals.computed(body) }
    func computedArray(_ body: @escaping () -> [Int]) -> Computed<[Int]> {
        BeaconSignals.computed(equals: { _, _ in false }, body)
    }
    @inline(__always) func read(_ source: MutableSignal<Int>) -> Int { source.value }
    @inline(__always) func read(_ derived: Computed<Int>) -> Int { derived.value }
    @inline(__always) func read(_ derived: Computed<[Int]>) -> [Int] { derived.value }
    @inline(__always) func write(_ source: MutableSignal<Int>, _ value: Int) { source.value = value }
    func effect(_ body: @escaping () -> Void) { effects.append(BeaconSignals.effect(body)) }
    @inline(__always) func batch(_ body: () -> Void) { BeaconSignals.batch(body) }
    func cleanup() {
        for effect in effects {
            effect.dispose()
        }
        effects.removeAll()
    }
}
