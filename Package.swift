// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "evstore",
    products: [
        .library(name: "EventStore", targets: ["EventStore"]),
        .library(name: "Projections", targets: ["Projections"]),
        .executable(name: "evstored", targets: ["evstored"]),
        .executable(name: "evstore-bench", targets: ["Bench"]),
    ],
    targets: [
        .systemLibrary(
            name: "CLMDB",
            pkgConfig: "lmdb",
            providers: [.apt(["liblmdb-dev"])]
        ),
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]
        ),
        .target(name: "Projections"),
        .target(
            name: "EventStore",
            dependencies: ["CLMDB", "CZstd", "Projections"]
        ),
        // Unix stream sockets: the only place the daemon and the CLI touch socket syscalls.
        .target(name: "UnixSocket"),
        .target(
            name: "Daemon",
            dependencies: ["EventStore", "Projections", "UnixSocket"]
        ),
        .executableTarget(name: "evstored", dependencies: ["Daemon"], path: "Sources/evstored"),
        .executableTarget(
            name: "Bench",
            dependencies: ["EventStore", "Projections", "CLMDB", "CZstd"],
            path: "Benchmarks/Bench"
        ),
        // A child process for crash tests: appends batches, prints each acknowledged one.
        .executableTarget(
            name: "evstore-append-child",
            dependencies: ["EventStore"],
            path: "Tests/Helpers/AppendChild"
        ),
        // Shared by the test targets only.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        .testTarget(name: "ProjectionsTests", dependencies: ["Projections", "TestSupport"]),
        .testTarget(name: "EventStoreTests", dependencies: ["EventStore", "Projections", "TestSupport"]),
        .testTarget(name: "UnixSocketTests", dependencies: ["UnixSocket"]),
        .testTarget(
            name: "DaemonTests",
            dependencies: ["Daemon", "EventStore", "Projections", "UnixSocket", "TestSupport"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
