import Foundation
import Testing
import UnixSocket

/// Watches are capped per connection and overall: a client that asks for more is refused
/// with `too_many_watches`, the watches held still deliver and others can still watch.
@Suite("Watch limits")
struct WatchLimitTests {
    /// The id in an `event` notification.
    static func notifiedID(_ client: RPCClient) throws -> String? {
        let message = try client.readJSON()
        #expect(message["method"] as? String == "event", "\(message)")
        return ((message["params"] as? [String: Any])?["event"] as? [String: Any])?["id"] as? String
    }

    static func appendOne(_ daemon: DaemonProcess, _ entity: String) throws -> String {
        let result = try daemon.client().call(
            "append", eventsParams([#"{"entity":"\#(entity)","kind":"status","status":"new"}"#]))
        return try #require((result["ids"] as? [String])?.first)
    }

    @Test(
        "past max_watches_per_connection a watch is refused; the connection's watches still deliver; another connection watches"
    )
    func perConnection() throws {
        let daemon = try DaemonProcess(arguments: ["--max-watches-per-connection", "4", "--max-watches", "100"])
        defer { daemon.removeFiles() }
        let greedy = try daemon.client()
        for params in ["{}", #"{"type":"job"}"#, #"{"entity":"job/1"}"#, #"{"entity":"job/2"}"#] {
            #expect(try greedy.call("watch", params)["watching"] as? Bool == true)
        }
        let refused = try greedy.failure("watch", #"{"entity":"job/3"}"#)
        #expect(refused.reason == "too_many_watches")
        #expect(refused.code == -32010)
        #expect(refused.message.contains("max_watches_per_connection is 4"), "\(refused.message)")
        #expect(try greedy.failure("watch").reason == "too_many_watches", "still refused")

        let other = try daemon.client()
        #expect(try other.call("watch", #"{"entity":"job/1"}"#)["watching"] as? Bool == true)

        let id = try WatchLimitTests.appendOne(daemon, "job/1")
        // The unfiltered, the type and the entity watch each get it; job/2's does not.
        for _ in 0..<3 { #expect(try WatchLimitTests.notifiedID(greedy) == id) }
        #expect(try WatchLimitTests.notifiedID(other) == id)
        // The refused connection still answers requests.
        #expect(try greedy.call("status")["node"] != nil)
        try daemon.stop()
    }

    @Test("max_watches holds across connections; closing a connection gives its watches back")
    func overall() throws {
        let daemon = try DaemonProcess(arguments: ["--max-watches-per-connection", "4", "--max-watches", "6"])
        defer { daemon.removeFiles() }
        var first: RPCClient? = try daemon.client()
        for _ in 0..<4 { _ = try first?.call("watch") }
        let second = try daemon.client()
        for _ in 0..<2 { #expect(try second.call("watch", #"{"type":"job"}"#)["watching"] as? Bool == true) }
        let refused = try second.failure("watch")
        #expect(refused.reason == "too_many_watches")
        #expect(refused.message.contains("max_watches is 6"), "\(refused.message)")
        let third = try daemon.client()
        #expect(try third.failure("watch").reason == "too_many_watches")

        first = nil  // closes its socket: the daemon ends its four watches
        let deadline = Date().addingTimeInterval(15)
        var admitted = false
        while !admitted, Date() < deadline {
            let response = try third.request("watch")
            admitted = (response["result"] as? [String: Any])?["watching"] as? Bool == true
            if !admitted { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(admitted, "a closed connection's watches are given back")
        for _ in 0..<3 { #expect(try third.call("watch")["watching"] as? Bool == true) }
        #expect(try third.failure("watch").reason == "too_many_watches", "four on this one, six in all again")

        let id = try WatchLimitTests.appendOne(daemon, "job/9")
        for _ in 0..<2 { #expect(try WatchLimitTests.notifiedID(second) == id) }
        for _ in 0..<4 { #expect(try WatchLimitTests.notifiedID(third) == id) }
        try daemon.stop()
    }

    @Test("1,000 watches pipelined on one connection: 64 (the default) are held, the rest refused, appends go on")
    func pipelinedFlood() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let flood = try daemon.client()
        var lines: [UInt8] = []
        for number in 0..<1000 {
            lines += Array(
                #"{"jsonrpc":"2.0","id":\#(number),"method":"watch","params":{"entity":"job/\#(number)"}}"#.utf8)
            lines.append(0x0A)
        }
        try flood.send(lines)
        var held = 0
        var refused = 0
        for _ in 0..<1000 {
            let response = try flood.readJSON()
            if (response["result"] as? [String: Any])?["watching"] as? Bool == true {
                held += 1
            } else if ((response["error"] as? [String: Any])?["data"] as? [String: Any])?["reason"] as? String
                == "too_many_watches"
            {
                refused += 1
            }
        }
        #expect(held == 64)
        #expect(refused == 936)
        let id = try WatchLimitTests.appendOne(daemon, "job/3")
        #expect(try WatchLimitTests.notifiedID(flood) == id)
        let watcher = try daemon.client()
        #expect(try watcher.call("watch")["watching"] as? Bool == true)
        try daemon.stop()
    }

    @Test("SIGHUP applies a changed max_watches_per_connection to the watches started after")
    func reload() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evw-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"max_watches_per_connection":2}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        for _ in 0..<2 { _ = try client.call("watch") }
        #expect(try client.failure("watch").message.contains("max_watches_per_connection is 2"))

        try #"{"max_watches_per_connection":3}"#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains("configuration reloaded"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(try client.call("watch")["watching"] as? Bool == true)
        #expect(try client.failure("watch").message.contains("max_watches_per_connection is 3"))
        try daemon.stop()
    }
}
