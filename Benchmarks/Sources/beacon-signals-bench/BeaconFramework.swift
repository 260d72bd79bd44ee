import BeaconSignals

/// The cases on BeaconSignals.
final class BeaconFramework: BenchFramework {
    let name = "BeaconSignals"
    let exactRunCounts = true
    private var effects: [Effect] = []

    func signal(_ value: Double) -> MutableSignal<Double> { MutableSignal(value) }
    func computed(_ body: @escaping () -> Double) -> Computed<Double> { BeaconSignals.computed(body) }
    func computedArray(_ body: @escaping () -> [Double]) -> Computed<[Double]> {
        BeaconSignals.computed(equals: { _, _ in false }, body)
    }
    @inline(__always) func read(_ source: MutableSignal<Double>) -> Double { source.value }
    @inline(__always) func read(_ derived: Computed<Double>) -> Double { derived.value }
    @inline(__always) func read(_ derived: Computed<[Double]>) -> [Double] { derived.value }
    @inline(__always) func write(_ source: MutableSignal<Double>, _ value: Double) { source.value = value }
    func effect(_ body: @escaping () -> Void) { effects.append(BeaconSignals.effect(body)) }
    @inline(__always) func batch(_ body: () -> Void) { BeaconSignals.batch(body) }
    func cleanup() {
        for effect in effects {
            effect.dispose()
        }
        effects.removeAll()
    }
}
