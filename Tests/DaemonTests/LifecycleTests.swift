import Foundation
import TestSupport
import Testing
import UnixSocket

@Suite("Lifecycle: signals, systemd, the socket file")
struct LifecycleTests {
    @Test("SIGTERM with appends in flight: every answered append is kept, the daemon exits 0")
    func sigtermDrains() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        var lines: [UInt8] = []
        for index in 0..<200 {
            let events = (0..<50).map { #"{"entity":"job/\#(index)-\#($0)","kind":"status","status":"new"}"# }
            lines +=
                Array(#"{"jsonrpc":"2.0","id":\#(index),"method":"append","params":\#(eventsParams(events))}"#.utf8) + [
                    0x0A
                ]
        }
        try client.send(lines)
        daemon.signal(SIGTERM)
        var acknowledged: [String] = []
        var answered = 0
        while let line = try client.readLine() {
            let response = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(response["id"] as? Int == answered, "in order")
            answered += 1
            if let ids = (response["result"] as? [String: Any])?["ids"] as? [String] {
                acknowledged += ids
            } else {
                let reason = ((response["error"] as? [String: Any])?["data"] as? [String: Any])?["reason"] as? String
                #expect(reason == "unavailable", "\(response)")
            }
        }
        #expect(try daemon.waitForExit() == 0)
        #expect(daemon.stderr.contains("stopped cleanly"))
        let again = try DaemonProcess(root: daemon.root)
        let client2 = try again.client()
        var logged: [String] = []
        var after: Int?
        repeat {
            let page = try client2.call("log", after.map { #"{"after":\#($0),"limit":1000}"# } ?? #"{"limit":1000}"#)
            logged += (page["events"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            after = page["next"] as? Int
        } while after != nil
        // Answered appends are all there; one the daemon took but could not answer may be too.
        #expect(Set(acknowledged).isSubset(of: Set(logged)), "answered \(answered) of 200")
        #expect(logged.count - acknowledged.count <= 50 * (200 - answered))
        #expect(Set(logged).count == logged.count)
        try again.stop()
    }

    @Test("READY, STATUS and STOPPING reach NOTIFY_SOCKET; SIGINT stops like SIGTERM")
    func notifiesSystemd() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let receiver = try DatagramReceiver(path: root + "/notify.sock")
        let daemon = try DaemonProcess(
            root: root, environment: ["NOTIFY_SOCKET": receiver.path, "WATCHDOG_USEC": "400000"], waitForSocket: false)
        defer { daemon.removeFiles() }
        var messages: [String] = []
        while !messages.contains(where: { $0.contains("READY=1") }) {
            let message = try #require(try receiver.receive(timeout: 20), "no READY within 20 s: \(daemon.stderr)")
            messages.append(String(decoding: message, as: UTF8.self))
        }
        let ready = try #require(messages.last)
        #expect(ready.contains("STATUS=serving 0 events"))
        #expect(ready.contains("MAINPID=\(daemon.process.processIdentifier)"))
        // The socket accepts by the time READY is sent.
        _ = try daemon.client().call("status")
        // Watchdog pings come at least every half interval.
        let ping = try #require(try receiver.receive(timeout: 2))
        #expect(String(decoding: ping, as: UTF8.self) == "WATCHDOG=1")
        daemon.signal(SIGINT)
        var stopping = false
        while let message = try receiver.receive(timeout: 10) {
            if String(decoding: message, as: UTF8.self).contains("STOPPING=1") {
                stopping = true
                break
            }
        }
        #expect(stopping)
        #expect(try daemon.waitForExit() == 0)
    }

    @Test("the socket file gets mode 0660 by default, or the configured mode")
    func socketMode() throws {
        for (arguments, mode) in [([String](), 0o660), (["--socket-mode", "0600"], 0o600)] {
            let daemon = try DaemonProcess(arguments: arguments)
            defer { daemon.removeFiles() }
            let attributes = try FileManager.default.attributesOfItem(atPath: daemon.socketPath)
            #expect((attributes[.posixPermissions] as? Int) == mode)
            #expect(attributes[.type] as? FileAttributeType == .typeSocket)
            try daemon.stop()
            #expect(!FileManager.default.fileExists(atPath: daemon.socketPath), "removed at a clean stop")
        }
    }

    @Test("the socket's group is the configured one; an unknown group stops the start with a message")
    func socketGroup() throws {
        let group = getgid()
        let daemon = try DaemonProcess(arguments: ["--socket-group", "\(group)"])
        defer { daemon.removeFiles() }
        let attributes = try FileManager.default.attributesOfItem(atPath: daemon.socketPath)
        #expect((attributes[.groupOwnerAccountID] as? NSNumber)?.uint32Value == group)
        try daemon.stop()
        let unknown = try DaemonProcess(
            root: daemon.root, arguments: ["--socket-group", "no-such-group-evstore"], waitForSocket: false)
        #expect(try unknown.waitForExit() == 73)
        #expect(unknown.stderr.contains("no group \"no-such-group-evstore\""))
    }

    @Test("a stale socket from a killed daemon is replaced; a live one is not taken over")
    func staleAndLiveSockets() throws {
        let first = try DaemonProcess()
        defer { first.removeFiles() }
        _ = try first.client().call("append", eventsParams([#"{"entity":"job/1","kind":"delete"}"#]))
        first.signal(SIGKILL)
        _ = try first.waitForExit()
        #expect(FileManager.default.fileExists(atPath: first.socketPath), "kill -9 leaves the socket file")
        let second = try DaemonProcess(root: first.root)
        #expect(try second.client().call("status")["events"] as? Int == 1)
        // A third on the same socket refuses to start, and says why.
        let third = try DaemonProcess(
            root: first.root, arguments: ["--data-dir", first.root + "/other"], waitForSocket: false)
        #expect(try third.waitForExit() == 69)
        #expect(third.stderr.contains("another daemon is serving this socket"))
        _ = try second.client().call("status")
        try second.stop()
    }

    @Test("a data directory moved to another machine takes a fresh node id, says so, and keeps its events")
    func machineChangeRenewsNodeID() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let machineFile = root + "/machine-id"
        try "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n".write(toFile: machineFile, atomically: true, encoding: .utf8)
        let first = try DaemonProcess(root: root, arguments: ["--machine-id-file", machineFile])
        defer { first.removeFiles() }
        let client = try first.client()
        _ = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let before = try #require((try client.call("status")["node"] as? [String: Any])?["id"] as? String)
        try first.stop()
        // The same machine: the same node.
        let again = try DaemonProcess(root: root, arguments: ["--machine-id-file", machineFile])
        #expect((try again.client().call("status")["node"] as? [String: Any])?["id"] as? String == before)
        try again.stop()
        // Another machine (its machine-id differs): a new node id, logged; the events stay.
        try "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\n".write(toFile: machineFile, atomically: true, encoding: .utf8)
        let moved = try DaemonProcess(root: root, arguments: ["--machine-id-file", machineFile])
        let status = try moved.client().call("status")
        let after = try #require((status["node"] as? [String: Any])?["id"] as? String)
        #expect(after != before)
        #expect(status["events"] as? Int == 1)
        #expect(moved.stderr.contains("first used on another machine") && moved.stderr.contains(before))
        let appended = try moved.client().call(
            "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"done"}"#]))
        let id = try #require((appended["ids"] as? [String])?.first)
        let log = try moved.client().call("log", #"{"entity":"job/1"}"#)
        let origins = (log["events"] as? [[String: Any]] ?? []).map { "\($0["id"] ?? "") \($0["origin"] ?? "")" }
        #expect(origins.contains("\(id) \(after)"))
        #expect(origins.contains { $0.hasSuffix(before) })
        try moved.stop()
    }

    @Test("SIGHUP re-reads the config file and applies the limits")
    func reloadOnHangup() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"max_line_bytes": 100000, "node": "gateway-1"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let pad = String(repeating: "a", count: 50_000)
        let line = #"{"jsonrpc":"2.0","id":1,"method":"status","params":{"pad":"\#(pad)"}}"#
        let before = try daemon.client()
        try before.send(line)
        #expect(
            (try before.readJSON()["error"] as? [String: Any])?["code"] as? Int == -32602,
            "under the limit: params checked")
        try #"{"max_line_bytes": 10000, "node": "gateway-1"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains("configuration reloaded"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        let after = try daemon.client()
        try after.send(line)
        let response = try after.readJSON()
        #expect(((response["error"] as? [String: Any])?["data"] as? [String: Any])?["reason"] as? String == "too_large")
        // A broken file is reported and changes nothing.
        try "{not json".write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        while !daemon.stderr.contains("not reloaded"), Date() < deadline.addingTimeInterval(10) {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(daemon.stderr.contains("not reloaded"))
        #expect(((try after.call("status"))["node"] as? [String: Any])?["name"] as? String == "gateway-1")
        try daemon.stop()
    }

    @Test("SIGHUP applies what the option table marks as reloading and names the rest, which a restart applies")
    func reloadNamesWhatNeedsARestart() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"node": "gateway-1", "max_page_bytes": 1048576, "max_peers": 64}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        _ = try client.call("peers.add", #"{"name":"one","url":"unix://\#(root)/one.sock"}"#)
        try #"""
        {"node": "gateway-2", "max_page_bytes": 2097152, "max_peers": 1, "durability": "relaxed",
         "socket_mode": "0600", "request_threads": 4}
        """#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains("configuration reloaded"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        // In the order of the option table.
        #expect(
            daemon.stderr.contains(
                "configuration reloaded; a restart applies socket_mode, node, durability, request_threads, max_page_bytes"
            ),
            "\(daemon.stderr)")
        // Those wait for the restart: the node keeps its name.
        #expect(((try client.call("status"))["node"] as? [String: Any])?["name"] as? String == "gateway-1")
        // max_peers reloads: a second peer is refused now.
        let added = try client.request("peers.add", #"{"name":"two","url":"unix://\#(root)/two.sock"}"#)
        #expect(((added["error"] as? [String: Any])?["message"] as? String)?.contains("max_peers") == true, "\(added)")
        _ = try daemon.stop()
    }

    @Test("evstored --help, --version, bad flags and bad config files")
    func commandLine() throws {
        func run(_ arguments: [String], environment: [String: String] = [:]) throws -> (Int32, String, String) {
            let process = Process()
            process.executableURL = try builtBinary("evstored")
            process.arguments = arguments
            process.environment = environment
            let out = Pipe()
            let err = Pipe()
            process.standardOutput = out
            process.standardError = err
            try process.run()
            let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            return (process.terminationStatus, stdout, stderr)
        }
        let help = try run(["--help"])
        #expect(help.0 == 0 && help.1.contains("--data-dir") && help.1.contains("EVSTORE_SOCKET"))
        #expect(try run(["--version"]).1.hasPrefix("evstored "))
        let unknown = try run(["--no-such-flag"])
        #expect(unknown.0 == 64 && unknown.2.contains("unknown option '--no-such-flag'"))
        #expect(try run(["positional"]).0 == 64)
        #expect(try run(["--socket"]).0 == 64)
        let missing = try run(["--config", "/nonexistent/evstored.json"])
        #expect(missing.0 == 78 && missing.2.contains("/nonexistent/evstored.json"))
        let badValue = try run(["--durability", "sometimes"])
        #expect(badValue.0 == 78 && badValue.2.contains("\"full\" or \"relaxed\""))
        let badEnvironment = try run([], environment: ["EVSTORE_MAX_EVENT_BYTES": "lots"])
        #expect(badEnvironment.0 == 78 && badEnvironment.2.contains("EVSTORE_MAX_EVENT_BYTES"))
    }
}

@Suite("Socket activation")
struct SocketActivationTests {
    static let activator = "/usr/bin/systemd-socket-activate"

    @Test(
        "started by systemd-socket-activate, the daemon serves the socket it was passed",
        .enabled(if: FileManager.default.isExecutableFile(atPath: activator)))
    func socketActivation() throws {
        let activator = SocketActivationTests.activator
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let socket = root + "/activated.sock"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: activator)
        process.arguments = ["-l", socket, try builtBinary("evstored").path, "--data-dir", root + "/data"]
        let log = root + "/stderr.log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: log)
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("EVSTORE_") }
        try process.run()
        defer {
            if process.isRunning { process.terminate() }
            process.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: socket), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        // The first connection starts the daemon on the activator's socket.
        let client = try RPCClient(path: socket)
        _ = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        #expect(try client.call("status")["events"] as? Int == 1)
        let stderr = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(stderr.contains("serving the socket systemd passed"))
    }
}

@Suite("systemd units")
struct SystemdUnitTests {
    @Test(
        "evstored.service, evstored.socket, evstore-metrics.service and .timer, evstore-nats.service pass systemd-analyze verify",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze")))
    func unitsVerify() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let (status, text) = try runProgram(
            "/bin/sh",
            [
                root.appendingPathComponent("systemd/verify.sh").path, try builtBinary("evstored").path,
                try builtBinary("evctl").path, try builtBinary("evstore-nats").path,
            ])
        #expect(status == 0, "\(text)")
        #expect(text.contains("systemd units: ok"))
    }
}
