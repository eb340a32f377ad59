// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "evstore",
    products: [
        .library(name: "EventStore", targets: ["EventStore"]),
        .library(name: "Projections", targets: ["Projections"]),
        // For the fuzzers in Fuzz/ alone: their entry points, which no program links.
        .library(name: "FuzzEntries", targets: ["FuzzEntries"]),
        .executable(name: "evstored", targets: ["evstored"]),
        .executable(name: "evctl", targets: ["evctl"]),
        .executable(name: "evstore-nats", targets: ["evstore-nats"]),
        .executable(name: "evstore-bench", targets: ["Bench"]),
        .executable(name: "evstore-socket-bench", targets: ["SocketBench"]),
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
        // The kernel's route netlink structs and constants (headers only, nothing to link).
        .systemLibrary(name: "CNetlink"),
        .systemLibrary(name: "CEpoll"),
        // CRC-32C with SSE 4.2's instruction, the sync frames' checksum (headers only).
        .systemLibrary(name: "CChecksum"),
        // sync_file_range(2), for blob files written while they arrive (headers only).
        .systemLibrary(name: "CFileIO"),
        .systemLibrary(
            name: "CNats",
            pkgConfig: "libnats",
            providers: [.apt(["libnats-dev"])]
        ),
        // libcrypto: Ed25519, to derive an NKey's public key from its seed (libnats links
        // libcrypto already), and SHA-256 for the store's content hashes, which sync
        // compares to find events held with other content under one id.
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        .target(name: "Projections"),
        // The one version of every program and package.
        .target(name: "Version"),
        // The exponential backoff with jitter the peer schedule and the bridge wait by.
        .target(name: "Backoff"),
        .target(
            name: "EventStore",
            dependencies: ["CLMDB", "CZstd", "CCrypto", "CFileIO", "Projections"]
        ),
        // Unix stream sockets (and the route netlink socket): the only place the daemon and
        // the CLI touch socket syscalls.
        .target(name: "UnixSocket", dependencies: ["CNetlink", "CEpoll"]),
        // Command-line argument parsing for evctl and evstored (help and usage go out
        // through UnixSocket's FileDescriptor).
        .target(name: "Arguments", dependencies: ["UnixSocket"]),
        // Log lines to standard error or the journal, in the shape of swift-log's Logger.
        .target(name: "Logging", dependencies: ["UnixSocket"]),
        // The configuration layers (file, environment, command line) of evstored and evstore-nats.
        .target(name: "LayeredConfiguration", dependencies: ["Projections"]),
        // The JSON-RPC client of evctl, the NATS bridge and the tests.
        .target(name: "JSONRPCClient", dependencies: ["UnixSocket", "Projections"]),
        // The daemon's layers, each importing only those before it.
        // Threads, health, systemd and the data directory's lock.
        .target(name: "Lifecycle", dependencies: ["UnixSocket", "Logging"]),
        // The JSON-RPC wire: requests parsed, answers and events encoded, error codes.
        .target(name: "Wire", dependencies: ["EventStore", "Projections"]),
        // The one writer thread every commit goes through.
        .target(name: "Writer", dependencies: ["EventStore", "Projections", "UnixSocket", "Logging", "Lifecycle"]),
        // Sync with other nodes: sessions, frames, reconciliation, peers.
        .target(
            name: "Replication",
            dependencies: [
                "CChecksum", "EventStore", "Projections", "UnixSocket", "Logging", "Backoff", "Lifecycle", "Wire",
            ]
        ),
        // The socket: event loops, connections, outboxes, the watch hub, access.
        .target(
            name: "Server",
            dependencies: ["EventStore", "Projections", "UnixSocket", "Logging", "Lifecycle", "Wire", "Writer"]
        ),
        // The methods, the admission stage, the configuration and the daemon's composition.
        .target(
            name: "Daemon",
            dependencies: [
                "EventStore", "Projections", "UnixSocket", "Arguments", "Logging", "Version", "Backoff",
                "LayeredConfiguration", "Lifecycle", "Wire", "Writer", "Replication", "Server",
            ]
        ),
        // The fuzzers' entry points (Fuzz/ and the tests that replay its corpora): each runs one
        // input through the store's or the daemon's code and checks what must hold.
        .target(
            name: "FuzzEntries",
            dependencies: [
                "EventStore", "Projections", "UnixSocket", "Logging", "Lifecycle", "Wire", "Writer", "Replication",
                "Server", "Daemon",
            ]
        ),
        // A NATS JetStream client over libnats: connect, streams, asynchronous publishes.
        .target(name: "JetStream", dependencies: ["CNats", "CCrypto"]),
        // evstore-nats: the daemon's events into a JetStream stream, as a durable consumer.
        .target(
            name: "NATSBridge",
            dependencies: [
                "JetStream", "UnixSocket", "Projections", "Arguments", "Logging", "Version", "Backoff", "JSONRPCClient",
                "LayeredConfiguration",
            ]
        ),
        .executableTarget(name: "evstore-nats", dependencies: ["NATSBridge"], path: "Sources/evstore-nats"),
        .executableTarget(name: "evstored", dependencies: ["Daemon"], path: "Sources/evstored"),
        .executableTarget(
            name: "evctl",
            dependencies: ["Arguments", "UnixSocket", "Projections", "Version", "JSONRPCClient"],
            path: "Sources/ctl"
        ),
        .executableTarget(
            name: "Bench",
            dependencies: ["EventStore", "Projections", "CLMDB", "CZstd"],
            path: "Benchmarks/Bench"
        ),
        .executableTarget(
            name: "SocketBench",
            dependencies: ["UnixSocket"],
            path: "Benchmarks/SocketBench"
        ),
        // A child process for crash tests: appends batches, prints each acknowledged one.
        .executableTarget(
            name: "evstore-append-child",
            dependencies: ["EventStore"],
            path: "Tests/Helpers/AppendChild"
        ),
        // Shared by the test targets only.
        .target(name: "TestSupport", path: "Tests/TestSupport"),
        // The temporary store the store's and the daemon's tests share, which checks itself.
        .target(name: "StoreTestSupport", dependencies: ["EventStore", "Projections"], path: "Tests/StoreTestSupport"),
        .testTarget(name: "ProjectionsTests", dependencies: ["Projections", "TestSupport"]),
        .testTarget(
            name: "EventStoreTests",
            dependencies: ["EventStore", "Projections", "TestSupport", "StoreTestSupport", "FuzzEntries"]
        ),
        .testTarget(name: "UnixSocketTests", dependencies: ["UnixSocket"]),
        .testTarget(name: "ArgumentsTests", dependencies: ["Arguments"]),
        .testTarget(name: "LayeredConfigurationTests", dependencies: ["LayeredConfiguration"]),
        .testTarget(
            name: "DaemonTests",
            dependencies: [
                "Daemon", "Lifecycle", "Wire", "Writer", "Replication", "Server",
                "Arguments", "EventStore", "Projections", "UnixSocket", "Logging", "TestSupport",
                "StoreTestSupport", "JSONRPCClient", "FuzzEntries",
                // The bridge's tests read the stream back.
                "JetStream",
            ]
        ),
        .testTarget(name: "CtlTests", dependencies: ["Projections", "UnixSocket", "TestSupport", "Version"]),
        .testTarget(name: "JetStreamTests", dependencies: ["JetStream", "TestSupport"]),
        .testTarget(name: "NATSBridgeTests", dependencies: ["NATSBridge", "JetStream", "Projections", "TestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
