@testable import Daemon
import Foundation
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// The daemon reaches a `unix://` peer with its own user and groups. A client that may only
/// read and write must not borrow them: pointed at another daemon whose access lists leave
/// the client out, or at a socket only root may open, `sync` is refused unless the URL
/// reaches a configured peer; and whatever a socket that does not speak the protocol says
/// is described, never quoted back.
@Suite("A unix:// URL is no confused deputy")
struct DeputyTests {
    func evctl(_ user: [String], _ socket: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let evctl = try builtBinary("evctl").path
        return try runProgram(user[0], Array(user.dropFirst()) + [evctl, "--socket", socket] + arguments)
    }

    func events(_ daemon: DaemonProcess) throws -> Int { try daemon.client().call("status")["events"] as! Int }

    func append(_ daemon: DaemonProcess, _ entity: String) throws {
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"\#(entity)","kind":"status","status":"new"}"#]))
    }

    func temporaryRoot() throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evdep-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        return root
    }

    @Test("the rule: a unix:// URL through the API needs full access, as exec: does")
    func rule() {
        #expect(Methods.refusal(ofSocketURL: "unix:///run/other/evstored.sock", level: .write)?.reason == "forbidden")
        #expect(
            Methods.refusal(ofSocketURL: "unix:///run/other/evstored.sock", level: .write)?.message.contains(
                "exec_users") == true)
        #expect(Methods.refusal(ofSocketURL: "unix:///run/other/evstored.sock", level: .full) == nil)
        #expect(Methods.refusal(ofSocketURL: "ssh://hq.example", level: .write) == nil)
    }

    @Test(
        "a read-write client's sync with another daemon's socket is forbidden and nothing crosses; root's works; a configured peer works for that client",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func deputy() throws {
        // The other daemon lets nobody in: only the group daemon may write, and root.
        let other = try DaemonProcess(arguments: ["--socket-mode", "0666", "--write-groups", "daemon"])
        defer { other.removeFiles() }
        try append(other, "job/other")
        // The hq daemon is the node's configured peer.
        let hq = try DaemonProcess(arguments: ["--node", "hq"])
        defer { hq.removeFiles() }
        try append(hq, "job/hq")
        let root = try temporaryRoot()
        let config = root + "/evstored.json"
        try #"{"socket_mode":"0666","sync_interval_s":3600,"peers":[{"name":"hq","url":"unix://\#(hq.socketPath)"}]}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        let node = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { node.removeFiles() }
        try append(node, "job/node")
        // The first background sync with hq, at start, is over before the counts are taken.
        func hqSynced() throws -> Bool {
            let peers = try node.client().call("status")["peers"] as? [[String: Any]] ?? []
            guard peers.first?["last_success"] is String else { return false }
            return try events(node) == 2
        }
        let synced = Date().addingTimeInterval(20)
        while Date() < synced, try !hqSynced() { Thread.sleep(forTimeInterval: 0.05) }
        #expect(try hqSynced())
        let before = (node: try events(node), other: try events(other))

        // nobody has read-write access to the node, none to the other daemon.
        let user = asUser(nobody, gid: nobody)
        #expect(try evctl(user, other.socketPath, ["status"]).status != 0, "the other daemon refuses nobody itself")
        let refused = try evctl(user, node.socketPath, ["sync", "unix://\(other.socketPath)"])
        #expect(refused.status == 77, "\(refused.output)")
        #expect(refused.output.contains("(forbidden)") && refused.output.contains("unix://"), "\(refused.output)")
        let added = try evctl(user, node.socketPath, ["peers", "add", "other", "unix://\(other.socketPath)"])
        #expect(added.status == 77, "peers.add would be the way around the rule: \(added.output)")
        // A socket only root may open: refused the same way, before a byte is read from it.
        let rootOnly = try evctl(user, node.socketPath, ["sync", "unix:///run/evstore-root-only.sock"])
        #expect(rootOnly.status == 77, "\(rootOnly.output)")
        #expect(try events(node) == before.node && (try events(other)) == before.other, "nothing crossed")
        let peers = try node.client().call("peers.list")["peers"] as? [[String: Any]] ?? []
        #expect(peers.compactMap { $0["name"] as? String } == ["hq"], "\(peers)")

        // The configured peer, by name and by its URL however spelled: allowed.
        try append(hq, "job/hq-2")
        let byName = try evctl(user, node.socketPath, ["sync", "hq"])
        #expect(byName.status == 0, "\(byName.output)")
        #expect(try events(node) == before.node + 1, "hq's new event arrived")
        try append(hq, "job/hq-3")
        let hqDirectory = (hq.socketPath as NSString).deletingLastPathComponent
        let spelled = "unix://\(hqDirectory)/./evstored.sock"
        let bySpelling = try evctl(user, node.socketPath, ["sync", spelled])
        #expect(bySpelling.status == 0, "\(bySpelling.output)")
        #expect(try events(node) == before.node + 2, "and the next")

        // Root (the test) may sync with any socket.
        let outcome = try node.client().call("sync", #"{"peer":"unix://\#(other.socketPath)"}"#)
        let outcomes = outcome["peers"] as? [[String: Any]] ?? []
        #expect(outcomes.first?["error"] is NSNull, "\(outcome)")
        #expect(try events(other) == before.other + 4)
        #expect(try events(node) == before.node + 3)
    }

    @Test(
        "a socket that does not speak the protocol is described, never quoted: not in the answer, the log or status",
        arguments: ["raw", "after a preamble"])
    func notQuoted(kind: String) throws {
        let secret = "secret-token-XYZ"
        let peer = try ScriptedPeer(handshake: false) { _, channel in
            if kind == "raw" {
                try channel.connection.write(Array("HTTP/1.1 200 OK \(secret)\r\nContent-Length: 0\r\n\r\n".utf8))
            } else {
                // The protocol's first line, then a hello frame whose payload is not a message.
                try channel.writePreamble()
                try channel.write(Frame(kind: .hello, payload: Array(#"{"token":"\#(secret)""#.utf8)))
            }
            Thread.sleep(forTimeInterval: 0.2)
        }
        defer { peer.finish() }
        let daemon = try DaemonProcess(arguments: ["--sync-interval-s", "3600"])
        defer { daemon.removeFiles() }
        _ = try daemon.client().call("peers.add", #"{"name":"portal","url":"\#(peer.url)"}"#)
        let deadline = Date().addingTimeInterval(20)
        var status = try daemon.client().call("status")
        while Date() < deadline, ((status["peers"] as? [[String: Any]])?.first?["failures"] as? Int ?? 0) < 1 {
            Thread.sleep(forTimeInterval: 0.05)
            status = try daemon.client().call("status")
        }
        let failed = try #require((status["peers"] as? [[String: Any]])?.first)
        let error = try #require(failed["last_error"] as? [String: Any], "\(failed)")
        let message = error["message"] as? String ?? ""
        #expect(error["reason"] as? String == (kind == "raw" ? "not_evstore" : "protocol"), "\(error)")
        #expect(!message.contains(secret) && !message.contains("HTTP"), "\(message)")
        #expect(
            kind == "raw" ? message.contains("bytes that are not a preamble") : message.contains("not valid JSON"),
            "\(message)")
        #expect(!daemon.stderr.contains(secret), "\(daemon.stderr)")
        let serialized = String(decoding: try JSONSerialization.data(withJSONObject: status), as: UTF8.self)
        #expect(!serialized.contains(secret))
    }
}
