import Foundation

/// A real `nats-server` on 127.0.0.1, in a temp directory of its own: started as a child
/// process, signalled or killed by the test, and started again on the same port and store.
///
/// The first start lets the server pick a free port (`-p -1`) and reads it from the log, so
/// servers of tests running in parallel never race for one; later starts reuse it.
public final class NATSServer: @unchecked Sendable {
    /// The `nats-server` to run: `NATS_SERVER`, or the first of the usual places that has one.
    public static let executable: String? = {
        var candidates = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"]
        if let path = ProcessInfo.processInfo.environment["NATS_SERVER"] { candidates.insert(path, at: 0) }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }()

    /// Whether tests that need a server can run (`.enabled(if: NATSServer.available, ...)`).
    public static var available: Bool { executable != nil }

    /// The temp directory holding the store, the configuration and the logs.
    public let directory: String
    /// The JetStream store (`-sd`), kept across restarts.
    public let storeDirectory: String
    public let jetStream: Bool
    private let configurationPath: String?

    /// The child and its port; the port is 0 before the first start has read it.
    private struct State {
        var process: Process?
        var port = 0
        var starts = 0
    }
    /// Protects the state: a test may signal the server from a callback thread.
    private let lock = NSLock()
    private var state = State()

    /// Starts a server, with JetStream (storing under `storeDirectory`) unless `jetStream`
    /// is false, and with `configuration` as its configuration file when given (the
    /// command-line address, port and JetStream options take precedence over the file's).
    public init(jetStream: Bool = true, configuration: String? = nil) throws {
        guard Self.available else { throw NATSServerError("nats-server is not installed") }
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("nats-\(UUID().uuidString.prefix(8))")
            .path
        storeDirectory = directory + "/store"
        self.jetStream = jetStream
        try FileManager.default.createDirectory(atPath: storeDirectory, withIntermediateDirectories: true)
        if let configuration {
            let path = directory + "/nats.conf"
            try configuration.write(toFile: path, atomically: true, encoding: .utf8)
            configurationPath = path
        } else {
            configurationPath = nil
        }
        do {
            try start()
        } catch {
            remove()
            throw error
        }
    }

    deinit { remove() }

    /// The port clients connect to.
    public var port: Int { lock.withLock { state.port } }

    /// `nats://127.0.0.1:PORT`.
    public var url: String { "nats://127.0.0.1:\(port)" }

    /// The server's process id, nil when it is not running.
    public var pid: Int32? {
        lock.withLock { state.process.flatMap { $0.isRunning ? $0.processIdentifier : nil } }
    }

    /// Starts the server (again), on the same port and store directory, and waits until it
    /// says it is ready and accepts a connection.
    public func start(timeout: Double = 20) throws {
        let (port, logPath) = lock.withLock {
            state.starts += 1
            return (state.port, directory + "/server-\(state.starts).log")
        }
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable!)
        var arguments: [String] = []
        if let configurationPath { arguments += ["-c", configurationPath] }
        arguments += ["-a", "127.0.0.1", "-p", port == 0 ? "-1" : String(port)]
        if jetStream { arguments += ["-js", "-sd", storeDirectory] }
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle(forWritingAtPath: logPath)
        try process.run()
        lock.withLock { state.process = process }

        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let log = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
            if log.contains("Server is ready"), let listening = Self.clientPort(in: log), Self.accepts(port: listening)
            {
                lock.withLock { state.port = listening }
                return
            }
            if !process.isRunning || Self.exited(process) {
                throw NATSServerError("nats-server exited at start: \(log)")
            }
            Thread.sleep(forTimeInterval: 0.02)
        }
        stop(signal: SIGKILL)
        throw NATSServerError("nats-server was not ready within \(timeout) s: \(log)")
    }

    /// Sends `signal` to the server (safe from any thread). SIGSTOP returns once every thread
    /// of the server has stopped (`kill` returns before a busy thread on another core has),
    /// or after 5 s; any other signal does not wait.
    public func signal(_ signal: Int32) {
        guard let pid else { return }
        kill(pid, signal)
        guard signal == SIGSTOP else { return }
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline, !Self.allThreadsStopped(pid) { Thread.sleep(forTimeInterval: 0.005) }
    }

    /// Whether every thread of `pid` is in the stopped state (`T` in its `/proc` stat).
    static func allThreadsStopped(_ pid: Int32) -> Bool {
        guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task"), !tasks.isEmpty
        else { return false }
        return tasks.allSatisfy { task in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return false }
            // The state follows the command name, which is in parentheses.
            return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first == "T"
        }
    }

    /// Sends `signal` (SIGTERM: a clean shutdown; SIGKILL: a crash) and waits until the
    /// process is gone, killing it after `timeout`.
    public func stop(signal: Int32 = SIGTERM, timeout: Double = 10) {
        guard let process = lock.withLock({ state.process }) else { return }
        if process.isRunning { kill(process.processIdentifier, signal) }
        let deadline = Date().addingTimeInterval(timeout)
        while !Self.exited(process) {
            if Date() > deadline {
                kill(process.processIdentifier, SIGKILL)
                _ = Self.exited(process, waitingUpTo: 5)
                break
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
        lock.withLock { state.process = nil }
    }

    /// The logs of every start, oldest first.
    public var log: String {
        let starts = lock.withLock { state.starts }
        return (1...max(starts, 1)).map {
            (try? String(contentsOfFile: directory + "/server-\($0).log", encoding: .utf8)) ?? ""
        }.joined()
    }

    /// Kills the server and deletes its directory.
    public func remove() {
        stop(signal: SIGKILL)
        try? FileManager.default.removeItem(atPath: directory)
    }

    // MARK: Internal

    /// Whether `process` has exited, reaping it if Foundation has not: Foundation learns of a
    /// child's exit through SIGCHLD and can miss one when many children end at once (a
    /// sanitized suite running tests in parallel), so this asks `waitpid` itself.
    private static func exited(_ process: Process, waitingUpTo seconds: Double = 0) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        repeat {
            if !process.isRunning { return true }
            var status: Int32 = 0
            let reaped = waitpid(process.processIdentifier, &status, WNOHANG)
            if reaped == process.processIdentifier || (reaped < 0 && errno == ECHILD) { return true }
            if seconds > 0 { Thread.sleep(forTimeInterval: 0.01) }
        } while Date() < deadline
        return false
    }

    /// The port of "Listening for client connections on 127.0.0.1:PORT".
    private static func clientPort(in log: String) -> Int? {
        let marker = "Listening for client connections on 127.0.0.1:"
        guard let range = log.range(of: marker, options: .backwards) else { return nil }
        return Int(log[range.upperBound...].prefix { $0.isNumber })
    }

    /// Whether a TCP connection to 127.0.0.1:port succeeds.
    private static func accepts(port: Int) -> Bool {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A port on 127.0.0.1 nothing listens on (bound and released at once), for tests of a
    /// refused connection.
    public static func unusedPort() -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        return bound ? Int(UInt16(bigEndian: address.sin_port)) : 1
    }
}

public struct NATSServerError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
