// swift-tools-version:6.0
// The libFuzzer fuzzers of evstore: one executable per entry point of `FuzzEntry` and
// `DaemonFuzzEntry` (the evstore package's FuzzEntries, which no program links). Build them only with the fuzzer flags (see docs/fuzzing.md or
// `make fuzz`):
//
//   swift build -c release --package-path Fuzz --scratch-path .build/fuzz \
//       -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
import PackageDescription

let package = Package(
    name: "evstore-fuzz",
    dependencies: [.package(name: "evstore", path: "..")],
    targets: [
        // Runs libFuzzer's driver from each fuzzer's entry point.
        .target(name: "FuzzDriver"),
        // The request line decoder and the dispatcher, against a real store in a temporary directory.
        .executableTarget(
            name: "FuzzRequest",
            dependencies: ["FuzzDriver", .product(name: "FuzzEntries", package: "evstore")]
        ),
        // The event codec and validator (input and stored forms) and the JSON scanner.
        .executableTarget(
            name: "FuzzEvent",
            dependencies: [
                "FuzzDriver", .product(name: "EventStore", package: "evstore"),
                .product(name: "FuzzEntries", package: "evstore"),
            ]
        ),
        // The stored-event value: header, zstd frame with or without a dictionary, stored JSON.
        .executableTarget(
            name: "FuzzStoredValue",
            dependencies: [
                "FuzzDriver", .product(name: "EventStore", package: "evstore"),
                .product(name: "FuzzEntries", package: "evstore"),
            ]
        ),
        // The projection record: its form, the compressed frame, the state and status history behind it.
        .executableTarget(
            name: "FuzzProjectionRecord",
            dependencies: [
                "FuzzDriver", .product(name: "EventStore", package: "evstore"),
                .product(name: "FuzzEntries", package: "evstore"),
            ]
        ),
        // The sync stream: preamble, frames, control messages, batches and their events.
        .executableTarget(
            name: "FuzzSyncStream",
            dependencies: ["FuzzDriver", .product(name: "FuzzEntries", package: "evstore")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
