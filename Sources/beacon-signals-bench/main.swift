// beacon-signals-bench: the js-reactivity-benchmark cases on BeaconSignals, with the same graphs
// built on Swift's Observation framework and OpenCombine, printed side by side.
//
// Usage: beacon-signals-bench [--quick]

let quick = CommandLine.arguments.contains("--quick")

/// Kairo and molBench rule of the reference figures: 3 warm-ups, then the fastest of 10 runs of
/// 500 iterations.
func runKairo<F: BenchFramework>(_ framework: F, _ make: () -> (() -> Void)) -> Double {
    let iteration = make()
    for _ in 0..<3 {
        iteration()
    }
    let result = fastest(of: quick ? 2 : 10) {
        for _ in 0..<(quick ? 50 : 500) {
            iteration()
        }
    }
    framework.cleanup()
    return result
}

let beacon = BeaconFramework()
for (name, make) in kairoCases(beacon) {
    let ms = runKairo(beacon, make)
    print("\(name): \(ms) ms")
}
