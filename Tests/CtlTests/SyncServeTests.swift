import Foundation
import TestSupport
import Testing
import UnixSocket

/// `evctl sync-serve` relaying JSON-RPC between its standard streams and a real `evstored`.
@Suite(.enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct SyncServeTests {
    static func statusRequest(id: Int) -> String {
        #"{"jsonrpc":"2.0","id":\#(id),"method":"status"}"# + "\n"
    }

    @Test func relaysARequestAndItsReply() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let result = try evctl(["sync-serve"], socket: daemon.socketPath, stdin: SyncServeTests.statusRequest(id: 1))
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.isEmpty, "\(result)")
        #expect(result.lines.count == 1, "\(result)")
        let reply = try result.json()
        #expect(reply["jsonrpc"] as? String == "2.0")
        #expect(reply["id"] as? Int == 1)
        let status = try #require(reply["result"] as? [String: Any], "\(result)")
        #expect(status["node"] != nil, "\(result)")
    }

    @Test func relaysPipelinedRequestsInOrderUntilTheEndOfInput() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let requests = (1...300).map { SyncServeTests.statusRequest(id: $0) }.joined()
        let result = try evctl(["sync-serve"], socket: daemon.socketPath, stdin: requests)
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        let ids = try result.lines.map { try jsonObject($0)["id"] as? Int }
        #expect(ids == (1...300).map { $0 })
    }

    @Test func answersWhileStandardInputStaysOpen() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let evctlPath = try builtBinary("evctl").path
        let (child, connection) = try ChildProcess.spawn(
            [evctlPath, "--socket", daemon.socketPath, "sync-serve"], environment: cleanEnvironment())
        defer { connection.close() }
        try connection.setTimeouts(read: 20, write: 20)
        var reader = LineReader(limit: 1 << 20)
        for id in 1...3 {
            try connection.write(Array(SyncServeTests.statusRequest(id: id).utf8))
            let line = try reader.next { buffer, count in try connection.read(into: &buffer, count: count) }
            guard case .line(let bytes) = line else {
                Issue.record("no reply to request \(id): \(line); stderr: \(child.standardError)")
                return
            }
            #expect(try jsonObject(String(decoding: bytes, as: UTF8.self))["id"] as? Int == id)
        }
        connection.shutdownWriting()
        #expect(try reader.next { buffer, count in try connection.read(into: &buffer, count: count) } == .end)
        #expect(child.wait(timeout: 20) == .exited(0), "\(child.standardError)")
    }

    @Test func anAbsentDaemonExits69() throws {
        let directory = try makeTemporaryDirectory("evctl-none")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/evstored.sock"
        let result = try evctl(["sync-serve"], socket: socket, stdin: SyncServeTests.statusRequest(id: 1))
        #expect(result.status == 69, "\(result)")
        #expect(result.stderr == "evctl: no evstore daemon is listening on \(socket). \(UsageTests.notListening)\n")
        #expect(result.stdout.isEmpty)
    }
}
