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
