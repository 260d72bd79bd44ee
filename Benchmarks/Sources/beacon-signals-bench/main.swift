// beacon-signals-bench: the cases of js-reactivity-benchmark on BeaconSignals, timed with the
// rules of the reference figures in ../shared/reference/js-reactivity.md and printed next to the
// fastest JavaScript core measured on this kind of machine; in the same run, the same graphs on
// Swift's Observation framework and on OpenCombine, with their ratios to BeaconSignals.
//
// Usage: beacon-signals-bench [--quick] [--only beacon|observation|opencombine ...]
//                             [--case SUBSTRING ...]
//   --quick   fewer iterations and runs (a smoke test; the figures are not comparable)
//   --only    run only these frameworks (BeaconSignals always runs unless --only omits it)
//   --case    run only cases whose name contains one of these

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
let usage = """
    usage: beacon-signals-bench [--quick] [--only beacon|observation|opencombine ...] [--case SUBSTRING ...]

    Runs js-reactivity-benchmark's core cases on BeaconSignals, timed by the rules of the reference
    figures, next to the fastest JavaScript core; in the same run, on Observation and OpenCombine.
      --quick   fewer iterations and runs (a smoke test; the figures are not comparable)
      --only    run only these frameworks
      --case    run only cases whose name contains one of these
    """
if arguments.contains("--help") || arguments.contains("-h") {
    print(usage)
    exit(0)
}
let known: Set<String> = ["--quick", "--only", "--case"]
var argumentIndex = 0
while argumentIndex < arguments.count {
    let argument = arguments[argumentIndex]
    guard known.contains(argument) else {
        let message = "beacon-signals-bench: unknown argument '\(argument)'\n\n\(usage)\n"
        _ = message.withCString { write(2, $0, strlen($0)) }
        exit(64)
    }
    argumentIndex += argument == "--quick" ? 1 : 2
}
let quick = arguments.contains("--quick")

func values(of option: String) -> [String] {
    var result: [String] = []
    var index = 0
    while index < arguments.count {
        if arguments[index] == option, index + 1 < arguments.count {
            result.append(arguments[index + 1].lowercased())
            index += 1
        }
        index += 1
    }
    return result
}

let onlyFrameworks = values(of: "--only")
let onlyCases = values(of: "--case")

func wanted(framework: String) -> Bool {
    onlyFrameworks.isEmpty || onlyFrameworks.contains { framework.lowercased().hasPrefix($0) }
}

func wanted(case name: String) -> Bool {
    onlyCases.isEmpty || onlyCases.contains { name.lowercased().contains($0) }
}

/// Fastest JS figures (ms) from ../shared/reference/js-reactivity.md (alien-signals 3.1.2/3.2.1,
/// preact signals-core 1.14.4 on node 20): the numbers to beat.
let fastestJavaScript: [String: Double] = [
    "avoidablePropagation": 140.8, "broadPropagation": 142.9, "deepPropagation": 56.8,
    "diamond": 123.4, "mux": 129.2, "repeatedObservers": 18.4, "triangle": 41.7,
    "unstable": 20.9, "molBench": 24.7, "cellx1000": 7.8, "cellx2500": 34.2,
    "sBench createSignals": 18.6, "sBench createComputations": 415.0, "sBench updateSignals": 482.3,
    "2-10x5 - lazy80%": 260.2, "6-10x10 - dyn25% - lazy80%": 192.3, "4-1000x12 - dyn5%": 447.4,
    "25-1000x5": 702.7, "3-5x500": 150.1, "6-100x15 - dyn50%": 286.7,
]

/// The figures of one case: milliseconds per framework name.
var results: [(name: String, times: [String: Double])] = []

@MainActor
func record(_ name: String, _ framework: String, _ ms: Double) {
    if let index = results.firstIndex(where: { $0.name == name }) {
        results[index].times[framework] = ms
    } else {
        results.append((name, [framework: ms]))
    }
    print("  \(framework.padding(13)) \(name.padding(28)) \(formatted(ms, decimals: 1, width: 10)) ms")
    fflush(nil)
}

/// How often a kairo case is repeated: the reference's rule for BeaconSignals; one warm-up and
/// the fastest of three for the slower comparison frameworks (same work per run, so the ratios
/// hold).
struct Repeats {
    let warmUps: Int
    let runs: Int
    let iterations: Int

    static func kairo(primary: Bool) -> Repeats {
        if quick { return Repeats(warmUps: 1, runs: 2, iterations: 50) }
        return primary ? Repeats(warmUps: 3, runs: 10, iterations: 500) : Repeats(warmUps: 1, runs: 3, iterations: 500)
    }
}

@MainActor
func runCases<F: BenchFramework>(_ f: F, primary: Bool) {
    print("\(f.name):")
    let kairo = Repeats.kairo(primary: primary)
    var iterationCases = kairoCases(f)
    iterationCases.append(("molBench", { molBench(f) }))
    for (name, make) in iterationCases where wanted(case: name) {
        if name == "unstable", let reason = reasonToSkipDynamic(f) {
            print("  \(f.name.padding(13)) \(name.padding(28)) not run: \(reason)")
            continue
        }
        let iteration = make()
        for _ in 0..<kairo.warmUps {
            iteration()
        }
        let ms = fastest(of: kairo.runs) {
            for _ in 0..<kairo.iterations {
                iteration()
            }
        }
        record(name, f.name, ms)
        f.cleanup()
    }

    // cellx: the sum of 10 fresh builds, each timed from the first read to the last.
    for layers in [1000, 2500] where wanted(case: "cellx\(layers)") {
        if let reason = f.reasonToSkip(layers: layers, fanIn: 2) {
            print("  \(f.name.padding(13)) \("cellx\(layers)".padding(28)) not run: \(reason)")
            continue
        }
        var total = 0.0
        for _ in 0..<(quick ? 2 : 10) {
            let (ms, before, after) = cellx(f, layers: layers)
            check(before == [-3, -6, -2, 2], "cellx\(layers): first layer \(before)")
            check(after == [-2, -4, 2, 3], "cellx\(layers): last layer \(after)")
            total += ms
        }
        record("cellx\(layers)", f.name, total)
    }

    // sBench: the fastest of 10 runs of the whole set, per figure.
    if wanted(case: "sBench") {
        var best = SBenchTimes(createSignals: .infinity, createComputations: .infinity, updateSignals: .infinity)
        for _ in 0..<(quick ? 1 : (primary ? 10 : 3)) {
            let times = SBench.run(f)
            best.createSignals = min(best.createSignals, times.createSignals)
            best.createComputations = min(best.createComputations, times.createComputations)
            best.updateSignals = min(best.updateSignals, times.updateSignals)
        }
        record("sBench createSignals", f.name, best.createSignals)
        record("sBench createComputations", f.name, best.createComputations)
        record("sBench updateSignals", f.name, best.updateSignals)
    }

    // Dynamic graphs: 3 warm-ups, then the fastest of 5, each checked against the suite's sum
    // and count of computed runs.
    for config in GraphConfig.suite where wanted(case: config.title) {
        if let reason = f.reasonToSkip(layers: config.totalLayers, fanIn: config.nSources)
            ?? (config.staticFraction < 1 ? reasonToSkipDynamic(f) : nil) {
            print("  \(f.name.padding(13)) \(config.title.padding(28)) not run: \(reason)")
            continue
        }
        let graph = DynamicGraph(f, config)
        let iterations = quick ? config.iterations / 20 : config.iterations
        for _ in 0..<(quick || !primary ? 0 : 3) {
            _ = graph.run(f, iterations: iterations)
        }
        // The comparison frameworks take tens of seconds per run here: one run each.
        let ms = fastest(of: quick || !primary ? 1 : 5) {
            graph.counter.count = 0
            let sum = graph.run(f, iterations: iterations)
            if !quick {
                check(sum == config.expectedSum, "\(config.title): sum \(sum), expected \(config.expectedSum)")
                check(!f.exactRunCounts || graph.counter.count == config.expectedCount,
                      "\(config.title): \(graph.counter.count) computed runs, expected \(config.expectedCount)")
            }
        }
        record(config.title, f.name, ms)
        f.cleanup()
    }
}

print("BeaconSignals core benchmark (release build; js-reactivity-benchmark cases and timing rules)")
let beaconName = "BeaconSignals"
if wanted(framework: beaconName) {
    runCases(BeaconFramework(), primary: true)
}
if wanted(framework: "Observation") {
    runCases(ObservationFramework(), primary: false)
}
if wanted(framework: "OpenCombine") {
    runCases(CombineFramework(), primary: false)
}

print("")
print("case".padding(28) + "  BeaconSignals  fastest JS  Beacon/JS   Observation  /Beacon   OpenCombine  /Beacon")
for (name, times) in results {
    var line = name.padding(28)
    let beacon = times[beaconName]
    line += "  " + (beacon.map { formatted($0, decimals: 1, width: 10) + " ms" } ?? String(repeating: " ", count: 13))
    if let beacon, let js = fastestJavaScript[name], !quick {
        line += formatted(js, decimals: 1, width: 9) + " ms" + formatted(beacon / js, decimals: 2, width: 10) + "x"
    } else {
        line += String(repeating: " ", count: 23)
    }
    for other in ["Observation", "OpenCombine"] {
        if let ms = times[other] {
            line += formatted(ms, decimals: 1, width: 11) + " ms"
            line += beacon.map { formatted($0 > 0 ? ms / $0 : 0, decimals: 1, width: 8) + "x" } ?? "         "
        } else {
            line += String(repeating: " ", count: 23)
        }
    }
    print(line)
}
