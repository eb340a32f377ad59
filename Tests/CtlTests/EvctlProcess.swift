import Foundation
import TestSupport

/// What a finished `evctl` run printed and returned.
struct EvctlResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    var lines: [String] { stdout.split(separator: "\n").map(String.init) }

    /// Standard output as one JSON object.
    func json() throws -> [String: Any] {
        try jsonObject(stdout)
    }

    var description: String { "status \(status)\nstdout: \(stdout)\nstderr: \(stderr)" }
}

func jsonObject(_ text: String) throws -> [String: Any] {
    guard let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any] else {
        throw TestFailure("not a JSON object: \(text)")
    }
    return object
}

/// The built `evctl`, run as a child process with its output in files (no pipe to fill up).
final class EvctlProcess: @unchecked Sendable {
    let process = Process()
    let directory: String

    init(
        _ arguments: [String], socket: String? = nil, environment: [String: String] = [:], stdin: String? = nil,
        workingDirectory: String? = nil, executable: URL? = nil
    ) throws {
        directory = try makeTemporaryDirectory("evctl")
        process.executableURL = try executable ?? builtBinary("evctl")
        process.arguments = (socket.map { ["--socket", $0] } ?? []) + arguments
        process.environment = cleanEnvironment(environment)
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        process.standardOutput = FileHandle(forWritingAtPath: try emptyFile(directory + "/stdout"))
        process.standardError = FileHandle(forWritingAtPath: try emptyFile(directory + "/stderr"))
        if let stdin {
            try Data(stdin.utf8).write(to: URL(fileURLWithPath: directory + "/stdin"))
            process.standardInput = FileHandle(forReadingAtPath: directory + "/stdin")
        } else {
            process.standardInput = FileHandle.nullDevice
        }
        try process.run()
    }

    var stdout: String { (try? String(contentsOfFile: directory + "/stdout", encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: directory + "/stderr", encoding: .utf8)) ?? "" }

    /// Waits until standard output satisfies `condition`, up to `timeout` seconds.
    func waitForOutput(timeout: Double = 20, _ condition: (String) -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if condition(stdout) { return }
            guard process.isRunning else { break }
            Thread.sleep(forTimeInterval: 0.02)
        }
        if condition(stdout) { return }
        throw TestFailure(
            "evctl did not print what was expected within \(timeout) s\nstdout: \(stdout)\nstderr: \(stderr)")
    }

    /// Waits for the exit (killing it after `timeout` seconds) and returns what it printed.
    func finish(timeout: Double = 120) -> EvctlResult {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        let result = EvctlResult(status: process.terminationStatus, stdout: stdout, stderr: stderr)
        try? FileManager.default.removeItem(atPath: directory)
        return result
    }

    /// Kills a process that runs until stopped (`log --follow`) and returns what it printed.
    /// SIGKILL, because a child of the test runner starts with most signals blocked.
    func stop() -> EvctlResult {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        return finish(timeout: 10)
    }
}

/// Runs `evctl arguments...` to the end.
func evctl(_ arguments: String..., socket: String? = nil, environment: [String: String] = [:], stdin: String? = nil)
    throws -> EvctlResult
{
    try EvctlProcess(arguments, socket: socket, environment: environment, stdin: stdin).finish()
}

func evctl(
    _ arguments: [String], socket: String? = nil, environment: [String: String] = [:], stdin: String? = nil,
    workingDirectory: String? = nil
) throws -> EvctlResult {
    try EvctlProcess(
        arguments, socket: socket, environment: environment, stdin: stdin, workingDirectory: workingDirectory
    ).finish()
}

/// Any program run as `EvctlProcess` runs evctl: output in files, a clean environment plus
/// `environment`.
func runProgram(_ path: String, _ arguments: [String], environment: [String: String] = [:]) throws -> EvctlResult {
    try EvctlProcess(arguments, environment: environment, executable: URL(fileURLWithPath: path)).finish()
}
