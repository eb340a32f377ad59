import Foundation

/// Finds a binary this package builds (named by EVSTORE_BIN_DIR, or next to the test
/// bundle, or in .build/debug).
public func builtBinary(_ name: String) throws -> URL {
    var candidates: [URL] = []
    if let dir = ProcessInfo.processInfo.environment["EVSTORE_BIN_DIR"] { candidates.append(URL(fileURLWithPath: dir)) }
    var bundle = Bundle.main.bundleURL
    for _ in 0..<3 {
        candidates.append(bundle)
        bundle.deleteLastPathComponent()
    }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    candidates.append(root.appendingPathComponent(".build/debug"))
    for dir in candidates {
        let url = dir.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: url.path) { return url }
    }
    throw CocoaError(.fileNoSuchFile, userInfo: [NSFilePathErrorKey: name])
}

/// Whether this test process, and so the binaries built beside it, carry the address or
/// thread sanitizer's runtime (`make test-asan`, `make test-tsan`).
public let builtWithSanitizer: Bool = {
    // RTLD_DEFAULT: the symbols of the process and everything it loaded.
    let everything = UnsafeMutableRawPointer(bitPattern: 0)
    return dlsym(everything, "__asan_init") != nil || dlsym(everything, "__tsan_init") != nil
}()

/// Whether memory figures of the daemon mean what they say: under a sanitizer its shadow
/// memory, redzones and quarantine of freed blocks multiply a process's RSS, so the tests
/// that bound the daemon's memory assert those bounds only in plain builds (`make test`),
/// and still run the attack and check everything else under the sanitizers.
public let memoryBoundsApply = !builtWithSanitizer
