// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "Beacon",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "beacond", targets: ["beacond"]),
        .executable(name: "beacon", targets: ["BeaconCLI"]),
        .library(name: "BeaconDaemon", targets: ["BeaconDaemon"]),
        .library(name: "BeaconWire", targets: ["BeaconWire"]),
        .library(name: "BeaconProtocol", targets: ["BeaconProtocol"]),
        .library(name: "BeaconJournal", targets: ["BeaconJournal"]),
        .library(name: "BeaconZMQ", targets: ["BeaconZMQ"]),
        .library(name: "BeaconSignals", targets: ["BeaconSignals"]),
        .library(name: "Beacon", targets: ["Beacon"]),
    ],
    // `Etcd`: etcd fronts (`beacond --etcd-endpoints`), which bring gRPC, swift-nio and BoringSSL
    // into the build. Off by default: `swift build --traits Etcd`, or `make ETCD=1`.
    traits: [
        .trait(name: "Etcd", description: "beacond as a front of an etcd cluster (gRPC, swift-nio, BoringSSL)"),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-protobuf.git", from: "1.39.0"),
        // Metrics: swift-metrics's API, swift-prometheus's registry and text format behind it.
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        // etcd's v3 API over gRPC (etcd fronts).
        .package(url: "https://github.com/grpc/grpc-swift-2.git", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport.git", from: "2.9.2"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf.git", from: "2.4.1"),
    ],
    targets: [
        // A value behind a pthread mutex, which ThreadSanitizer sees (the package's one lock type).
        .target(name: "BeaconLocking"),

        // The reactive core: pure Swift, no I/O.
        .target(name: "BeaconSignals", dependencies: ["BeaconLocking"]),

        // C libraries, each imported by exactly one Swift target.
        .systemLibrary(name: "CBeaconZMQ", providers: [.apt(["libzmq3-dev"])]),
        .systemLibrary(name: "CBeaconSQLite", providers: [.apt(["libsqlite3-dev"])]),
        // libc's thread CPU affinity, hidden from Swift's Glibc module.
        .systemLibrary(name: "CBeaconKernel"),
        // accept() and accept4() in front of libc's, so that a full descriptor table refuses a
        // connection instead of aborting libzmq (linked into whatever links the daemon).
        .target(name: "CBeaconAcceptGuard"),

        // Thin Swift wrappers over the C libraries.
        .target(name: "BeaconZMQ", dependencies: ["CBeaconZMQ"]),
        .target(name: "BeaconJournal", dependencies: [
            "CBeaconSQLite",
            .product(name: "Logging", package: "swift-log"),
        ]),

        // Wire schema (generated from proto/) and its validation rules.
        .target(name: "BeaconProtocol", dependencies: [
            .product(name: "SwiftProtobuf", package: "swift-protobuf"),
        ]),

        // etcd's v3 API (generated from proto/etcd) behind one small client.
        // Without the `Etcd` trait its sources compile to nothing, and none of gRPC is built.
        .target(name: "BeaconEtcd", dependencies: [
            "BeaconLocking",
            .product(name: "GRPCCore", package: "grpc-swift-2", condition: .when(traits: ["Etcd"])),
            .product(name: "GRPCNIOTransportHTTP2Posix", package: "grpc-swift-nio-transport", condition: .when(traits: ["Etcd"])),
            .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf", condition: .when(traits: ["Etcd"])),
            .product(name: "SwiftProtobuf", package: "swift-protobuf"),
        ]),

        // A small blocking client of the wire protocol: tests, benchmarks and the CLI use it.
        .target(name: "BeaconWire", dependencies: ["BeaconZMQ", "BeaconProtocol"]),

        // The client library: remote signals mirrored into the reactive core.
        .target(name: "Beacon", dependencies: ["BeaconSignals", "BeaconWire", "BeaconZMQ", "BeaconProtocol", "BeaconJournal"]),

        // The daemon as a library, so that tests can run it in-process.
        .target(name: "BeaconDaemon", dependencies: [
            "BeaconLocking", "BeaconZMQ", "BeaconJournal", "BeaconProtocol", "BeaconWire", "CBeaconKernel", "CBeaconAcceptGuard",
            .target(name: "BeaconEtcd", condition: .when(traits: ["Etcd"])),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            .product(name: "CoreMetrics", package: "swift-metrics"),
            .product(name: "Prometheus", package: "swift-prometheus"),
        ]),

        .executableTarget(name: "beacond", dependencies: [
            "BeaconDaemon",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
        .executableTarget(name: "BeaconCLI", dependencies: [
            "BeaconWire", "BeaconProtocol", "BeaconZMQ",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        // The daemon's, client's and peers' benchmarks (the reactive core's, which compares with
        // OpenCombine, is a package of its own: Benchmarks/).
        .executableTarget(name: "beacon-bench", dependencies: [
            "Beacon", "BeaconDaemon", "BeaconJournal", "BeaconWire", "BeaconZMQ", "BeaconProtocol", "BeaconLocking",
            .target(name: "BeaconEtcd", condition: .when(traits: ["Etcd"])),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),

        // The client library's example (docs/CLIENT.md): a computed over two remote signals, printed from an effect.
        .executableTarget(name: "beacon-example", dependencies: ["Beacon"]),
        // A client process the end-to-end tests start, freeze and read.
        .executableTarget(name: "beacon-client-probe", dependencies: ["Beacon"], path: "Tests/ClientProbe"),
        // A wire client the access tests run under other user ids and CURVE keys.
        .executableTarget(name: "beacon-access-probe", dependencies: ["BeaconWire", "BeaconProtocol", "BeaconZMQ", "BeaconLocking"],
                          path: "Tests/AccessProbe"),

        .testTarget(name: "BeaconSignalsTests", dependencies: ["BeaconSignals", "BeaconLocking"]),
        .testTarget(name: "BeaconZMQTests", dependencies: ["BeaconZMQ", "BeaconTestSupport"]),
        .testTarget(name: "BeaconWireTests", dependencies: ["BeaconWire", "BeaconProtocol", "BeaconTestSupport"]),
        // What several test targets share (a seeded generator, systemd's notification socket, a patient client, an etcd cluster).
        .target(name: "BeaconTestSupport", dependencies: ["BeaconWire", "BeaconDaemon", "BeaconJournal", "BeaconLocking",
                                                         .target(name: "BeaconEtcd", condition: .when(traits: ["Etcd"]))],
                path: "Tests/BeaconTestSupport"),
        .testTarget(name: "BeaconEtcdTests", dependencies: ["BeaconEtcd", "BeaconTestSupport"]),
        .testTarget(name: "BeaconJournalTests", dependencies: ["BeaconJournal", "BeaconTestSupport"]),
        .testTarget(name: "BeaconProtocolTests", dependencies: ["BeaconProtocol", "BeaconTestSupport"]),
        .testTarget(name: "BeaconDaemonTests", dependencies: ["BeaconDaemon", "BeaconWire", "BeaconJournal", "BeaconTestSupport",
                                                              .target(name: "BeaconEtcd", condition: .when(traits: ["Etcd"]))]),
        .testTarget(name: "BeaconEndToEndTests", dependencies: ["Beacon", "BeaconWire", "BeaconProtocol", "BeaconJournal", "BeaconZMQ", "BeaconLocking",
                                                                "BeaconTestSupport", .target(name: "BeaconEtcd", condition: .when(traits: ["Etcd"]))]),
    ],
    swiftLanguageModes: [.v6]
)
