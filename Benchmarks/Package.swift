// swift-tools-version:6.1
// Benchmarks that need more than Beacon itself: the reactive core beside Observation and
// OpenCombine. A package of its own, so that Beacon's users and its first `make run` never
// build OpenCombine. Run with `make bench-core` from the repository's root.
import PackageDescription

let package = Package(
    name: "BeaconBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "Beacon", path: ".."),
        .package(url: "https://github.com/OpenCombine/OpenCombine.git", from: "0.14.0"),
    ],
    targets: [
        .executableTarget(name: "beacon-signals-bench", dependencies: [
            .product(name: "BeaconSignals", package: "Beacon"),
            .product(name: "OpenCombine", package: "OpenCombine"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)
