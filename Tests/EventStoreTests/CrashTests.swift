import Foundation
import Projections
import Testing

@testable import EventStore

/// Finds a binary this package builds (next to the test bundle, or as named by
/// EVSTORE_BIN_DIR).
func builtBinary(_ name: String) throws -> URL {
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

@Suite("Crash safety", .serialized)
struct CrashTests {
    @Test("kill -9 during bulk appends loses no acknowledged batch", arguments: [1, 2, 3, 4, 5])
    func killDuringAppend(round: Int) throws {
        let child = try builtBinary("evstore-append-child")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-crash-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var acknowledged: [ULID] = []
        var rng = SeededGenerator(seed: UInt64(round))
        for run in 0..<3 {
            let process = Process()
            process.executableURL = child
            // A small initial map so some kills land during map growth.
            process.arguments = [dir, "\(50 + 25 * run)", "\(1 << 20)"]
            let pipe = Pipe()
            process.standardOutput = pipe
            try process.run()
            usleep(UInt32.random(in: 150_000...600_000, using: &rng))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            for line in output.split(separator: "\n") where line.hasPrefix("ack ") {
                // A line cut by the kill is not an acknowledgement the test can rely on.
                let fields = line.split(separator: " ").dropFirst(2)
                let ids = fields.compactMap { ULID(String($0)) }
                if ids.count == fields.count { acknowledged += ids }
            }
        }
        #expect(!acknowledged.isEmpty, "the child acknowledged nothing before it was killed")
        let log = try EventLog.open(directory: dir)
        for id in acknowledged { #expect(try log.event(id) != nil, "acknowledged \(id) is missing") }
        #expect(Set(acknowledged).count == acknowledged.count)
        let report = try log.rebuild(verify: true)
        #expect(report.mismatched.isEmpty)
        #expect(!report.digestMismatch)
        #expect(report.events == (try log.statistics().events))
    }
}
