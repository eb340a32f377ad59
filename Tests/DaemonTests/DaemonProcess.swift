import Foundation
import JSONRPCClient
import TestSupport
import Testing
import UnixSocket

/// A real `evstored` in a temp directory: started as a child process, talked to over its
/// socket, signalled or killed by the test.
final class DaemonProcess: @unchecked Sendable {
    let root: String
    let dataDirectory: String
    let socketPath: String
    let process = Process()
    let stderrPath: String

    /// Starts the daemon and waits until its socket accepts a connection. `launcher`, when
    /// given, is a command that runs evstored in place (`ip netns exec NAME`): evstored's
    /// path and arguments follow it, and it must exec rather than fork, so signals reach
    /// the daemon.
    init(
        root existing: String? = nil, arguments: [String] = [], environment: [String: String] = [:],
        waitForSocket: Bool = true, launcher: [String] = []
    ) throws {
        root =
            existing
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        dataDirectory = root + "/data"
        socketPath = root + "/evstored.sock"
        stderrPath = root + "/stderr-\(UUID().uuidString.prefix(4)).log"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        let evstored = try builtBinary("evstored")
        process.arguments = ["--data-dir", dataDirectory, "--socket", socketPath] + arguments
        if let command = launcher.first {
            process.executableURL = URL(fileURLWithPath: command)
            process.arguments = Array(launcher.dropFirst()) + [evstored.path] + process.arguments!
        } else {
            process.executableURL = evstored
        }
        var env = ProcessInfo.processInfo.environment.filter {
            !$0.key.hasPrefix("EVSTORE_") && $0.key != "NOTIFY_SOCKET"
        }
        env.merge(environment) { $1 }
        process.environment = env
        process.standardError = FileHandle(forWritingAtPath: stderrPath)
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        if waitForSocket { try self.waitForSocket() }
    }

    func waitForSocket(timeout: Double = 20) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let connection = try? UnixConnection.connect(to: socketPath) {
                connection.close()
                return
            }
            if !process.isRunning {
                throw DaemonError("evstored exited with \(process.terminationStatus): \(stderr)")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        throw DaemonError("evstored did not accept connections within \(timeout) s: \(stderr)")
    }

    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    func client() throws -> RPCClient { try RPCClient(path: socketPath) }

    func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// Waits for the process to exit and returns its status.
    @discardableResult
    func waitForExit(timeout: Double = 30) throws -> Int32 {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline {
                kill(process.processIdentifier, SIGKILL)
                throw DaemonError("evstored did not exit within \(timeout) s")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        return process.terminationStatus
    }

    /// SIGTERM and wait; the exit status.
    @discardableResult
    func stop() throws -> Int32 {
        signal(SIGTERM)
        return try waitForExit()
    }

    func removeFiles() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            reap(process)
        }
        try? FileManager.default.removeItem(atPath: root)
    }
}

/// Waits for a killed child to be gone. Foundation notices a child's exit through
/// SIGCHLD; when many children end at once it can miss one, and `waitUntilExit` would then
/// wait forever, so this reaps the child itself after a moment.
func reap(_ process: Process, timeout: Double = 5) {
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning, Date() < deadline {
        var status: Int32 = 0
        if waitpid(process.processIdentifier, &status, WNOHANG) == process.processIdentifier { return }
        Thread.sleep(forTimeInterval: 0.01)
    }
}

struct DaemonError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A JSON-RPC client for tests: the daemon's own client (JSONRPCClient) underneath, with
/// replies as Foundation objects.
final class RPCClient: @unchecked Sendable {
    let link: JSONRPCConnection
    var connection: UnixConnection { link.socket }
    /// The id of the last request sent.
    private(set) var nextID = 0

    init(path: String) throws {
        link = try RPCClient.socketErrors { () throws(ClientError) in try JSONRPCConnection(path: path) }
        try connection.setTimeouts(read: 60, write: 60)
    }

    /// Runs `body`, throwing the socket's own error where the client's wraps one (the tests
    /// check errno codes).
    private static func socketErrors<T>(_ body: () throws(ClientError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            switch error {
            case .connecting(let error), .lost(let error): throw error
            case .tooLong: throw DaemonError("response line too long")
            default: throw DaemonError("\(error)")
            }
        }
    }

    func send(_ line: String) throws { try send(Array(line.utf8) + [0x0A]) }
    func send(_ bytes: [UInt8]) throws { try RPCClient.socketErrors { () throws(ClientError) in try link.write(bytes) } }

    /// The next line from the daemon, nil at the end of the stream.
    func readLine() throws -> String? {
        try RPCClient.socketErrors { () throws(ClientError) in try link.nextLine() }
            .map { String(decoding: $0, as: UTF8.self) }
    }

    func readJSON() throws -> [String: Any] {
        guard let line = try readLine() else { throw DaemonError("the daemon closed the connection") }
        guard let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw DaemonError("not a JSON object: \(line)")
        }
        return object
    }

    /// Sends a request and returns the whole response object.
    func request(_ method: String, _ params: String = "{}") throws -> [String: Any] {
        nextID = try RPCClient.socketErrors { () throws(ClientError) in try link.send(method, params: Array(params.utf8)) }
        let response = try readJSON()
        #expect(response["id"] as? Int == nextID)
        return response
    }

    /// The result of a call that must succeed.
    func call(_ method: String, _ params: String = "{}") throws -> [String: Any] {
        let response = try request(method, params)
        guard let result = response["result"] as? [String: Any] else {
            throw DaemonError("\(method) failed: \(response)")
        }
        return result
    }

    /// The `data.reason` of a call that must fail.
    func failure(_ method: String, _ params: String = "{}") throws -> (reason: String, code: Int, message: String) {
        let response = try request(method, params)
        guard let error = response["error"] as? [String: Any] else {
            throw DaemonError("\(method) did not fail: \(response)")
        }
        let data = error["data"] as? [String: Any]
        return (data?["reason"] as? String ?? "", error["code"] as? Int ?? 0, error["message"] as? String ?? "")
    }
}

/// `{"events":[...]}` from input-form lines.
func eventsParams(_ events: [String]) -> String { #"{"events":[\#(events.joined(separator: ","))]}"# }

/// The workload generator shipped beside the repository, when present.
func workloadScript() -> String? {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
    for candidate in [
        root.appendingPathComponent("../shared/workload/fieldops.py").path,
        root.appendingPathComponent("shared/workload/fieldops.py").path,
    ]
    where FileManager.default.fileExists(atPath: candidate) {
        return candidate
    }
    return nil
}

/// Runs a program to its end; its exit status and what it wrote to stdout and stderr
/// together.
func runProgram(_ path: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    return (exitStatus(of: process), text)
}

/// The exit status of a child that has closed its output. Not `waitUntilExit`: Foundation
/// learns of a child's exit through SIGCHLD, can miss one when many children end at once
/// (a sanitized suite running tests in parallel), and would then wait forever; this reaps
/// the child itself if Foundation has not, and kills it after `timeout`.
func exitStatus(of process: Process, timeout: Double = 60) -> Int32 {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if !process.isRunning { return process.terminationStatus }
        var status: Int32 = 0
        if waitpid(process.processIdentifier, &status, WNOHANG) == process.processIdentifier {
            // WIFEXITED / WEXITSTATUS, else 128 + the signal, as a shell reports it.
            return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
        }
        Thread.sleep(forTimeInterval: 0.01)
    }
    kill(process.processIdentifier, SIGKILL)
    reap(process)
    return -1
}
