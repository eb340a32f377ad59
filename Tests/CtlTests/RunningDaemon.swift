import Foundation
import TestSupport
import UnixSocket

/// An `evstored` started in a temp directory for one test: `evstored --data-dir D --socket S`.
final class RunningDaemon: @unchecked Sendable {
    let directory: String
    let socketPath: String
    let process = Process()

    static var isAvailable: Bool { (try? builtBinary("evstored")) != nil }

    /// Starts the daemon (in `directory`, when given, to reuse its store) and waits until its
    /// socket accepts a connection.
    init(directory existing: String? = nil, arguments: [String] = []) throws {
        directory = try existing ?? makeTemporaryDirectory("evd")
        socketPath = directory + "/s.sock"
        process.executableURL = try builtBinary("evstored")
        process.arguments = ["--data-dir", directory + "/data", "--socket", socketPath] + arguments
        process.environment = cleanEnvironment()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: try emptyFile(directory + "/stderr.log"))
        try process.run()
        try waitUntilListening()
    }

    func waitUntilListening(timeout: Double = 10) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let connection = try? UnixConnection.connect(to: socketPath) {
                connection.close()
                return
            }
            guard process.isRunning else {
                throw TestFailure("evstored exited with \(process.terminationStatus): \(log)")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw TestFailure("evstored did not accept a connection within \(timeout) s: \(log)")
    }

    var log: String { (try? String(contentsOfFile: directory + "/stderr.log", encoding: .utf8)) ?? "" }

    /// SIGTERM (or another signal), then waits for the exit.
    func stop(_ signal: Int32 = SIGTERM) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, signal)
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Stops the daemon and removes its directory.
    func remove() {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The environment without the EVSTORE_* settings of whoever runs the tests.
func cleanEnvironment(_ extra: [String: String] = [:]) -> [String: String] {
    var environment = ProcessInfo.processInfo.environment.filter {
        !$0.key.hasPrefix("EVSTORE_") && $0.key != "NOTIFY_SOCKET" && $0.key != "XDG_RUNTIME_DIR"
    }
    environment.merge(extra) { $1 }
    return environment
}

/// A new directory under the temp directory; short, so socket paths in it stay short.
func makeTemporaryDirectory(_ prefix: String) throws -> String {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        .path
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

func emptyFile(_ path: String) throws -> String {
    guard FileManager.default.createFile(atPath: path, contents: nil) else {
        throw TestFailure("cannot create \(path)")
    }
    return path
}
