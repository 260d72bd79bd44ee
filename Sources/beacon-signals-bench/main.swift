// beacon-signals-bench: cases of js-reactivity-benchmark on BeaconSignals, timed with the same
// rules as the reference figures in ../shared/reference/js-reactivity.md, printed next to the
// fastest JavaScript core measured on this kind of machine.
//
// Usage: beacon-signals-bench [--quick]   (--quick runs fewer iterations and prints no ratios)

let quick = CommandLine.arguments.contains("--quick")

/// Fastest JS figures (ms) from ../shared/reference/js-reactivity.md (alien-signals 3.1.2/3.2.1,
/// preact signals-core 1.14.4 on node 20): the numbers to beat.
let fastestJavaScript: [String: Double] = [
    "avoidablePropagation": 140.8, "broadPropagation": 142.9, "deepPropagation": 56.8,
    "diamond": 123.4, "mux": 129.2, "repeatedObservers": 18.4, "triangle": 41.7,
    "unstable": 20.9, "molBench": 24.7, "cellx1000": 7.8, "cellx2500": 34.2,
]

/// `value` with `decimals` digits after the point, right-aligned in `width` characters.
func formatted(_ value: Double, decimals: Int, width: Int) -> String {
    var scale = 1.0
    for _ in 0..<decimals { scale *= 10 }
    let scaled = (value * scale).rounded()
    let whole = Int(scaled / scale)
    let fraction = Int(abs(scaled).truncatingRemainder(dividingBy: scale))
    var digits = String(fraction)
    while digits.count < decimals { digits = "0" + digits }
    let text = decimals > 0 ? "\(whole).\(digits)" : "\(whole)"
    return String(repeating: " ", count: max(0, width - text.count)) + text
}

func report(_ name: String, _ ms: Double) {
    let padded = name + String(repeating: " ", count: max(0, 22 - name.count))
    let figure = formatted(ms, decimals: 1, width: 9) + " ms"
    if !quick, let js = fastestJavaScript[name] {
        print("\(padded)\(figure)   fastest JS \(formatted(js, decimals: 1, width: 7)) ms   Beacon/JS \(formatted(ms / js, decimals: 2, width: 5))x")
    } else {
        print("\(padded)\(figure)")
    }
}

/// Kairo and molBench rule of the reference figures: 3 warm-ups, then the fastest of 10 runs of
/// 500 iterations.
func runIterations(_ iteration: () -> Void) -> Double {
    for _ in 0..<3 {
        iteration()
    }
    return fastest(of: quick ? 2 : 10) {
        for _ in 0..<(quick ? 50 : 500) {
            iteration()
        }
    }
}

print("BeaconSignals core benchmark (release build; times are per case as in js-reactivity-benchmark)")
let beacon = BeaconFramework()
for (name, make) in kairoCases(beacon) {
    let iteration = make()
    report(name, runIterations(iteration))
    beacon.cleanup()
}

do {
    let (iteration, effects) = molBench()
    report("molBench", runIterations(iteration))
    effects.forEach { $0.dispose() }
}

// cellx rule: the sum of 10 fresh builds, each timed from the first read to the last.
for layers in [1000, 2500] {
    var total = 0.0
    for _ in 0..<(quick ? 2 : 10) {
        let (ms, before, after) = cellx(layers: layers)
        check(before == [-3, -6, -2, 2], "cellx\(layers): first layer \(before)")
        check(after == [-2, -4, 2, 3], "cellx\(layers): last layer \(after)")
        total += ms
    }
    report("cellx\(layers)", total)
}
