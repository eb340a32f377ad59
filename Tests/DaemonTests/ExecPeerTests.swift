@testable import Daemon
import Foundation
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// An `exec:` peer's command runs as the daemon's user: through the socket, only root, the
/// daemon's own user and `exec_users` may give one, whether or not the access lists are set.
@Suite("exec: peers and exec_users")
struct ExecPeerTests {
    /// evctl as another user, on `socket`.
    func evctl(_ user: [String], _ socket: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let evctl = try builtBinary("evctl").path
        return try runProgram(user[0], Array(user.dropFirst()) + [evctl, "--socket", socket] + arguments)
    }

    @Test("with no access list, root, the daemon's user and exec_users get full access, the rest read-write")
    func grants() {
        let open = AccessPolicy(execUsers: [4243], daemonUID: 1000)
        #expect(open.grant(uid: 4242, groups: [4242]).level == .write)
        #expect(open.grant(uid: 0, groups: [0]).level == .full)
        #expect(open.grant(uid: 1000, groups: [1000]).level == .full)
        #expect(open.grant(uid: 4243, groups: [4243]).level == .full)
        #expect(ClientAccess.refusal(ofPeerURL: "exec:/bin/true", level: .write)?.reason == "forbidden")
        #expect(
            ClientAccess.refusal(ofPeerURL: "exec:/bin/true", level: .write)?.message.contains("exec_users") == true)
        #expect(ClientAccess.refusal(ofPeerURL: "unix:///x.sock", level: .write) == nil)
        #expect(ClientAccess.refusal(ofPeerURL: "exec:/bin/true", level: .full) == nil)
        let restricted = AccessPolicy(readGroups: [100], execUsers: [4243], daemonUID: 1000)
        #expect(restricted.grant(uid: 4243, groups: [4243]).level == .full)
        #expect(restricted.grant(uid: 4242, groups: [100]).level == .read)
    }

    @Test(
        "a socket user who is not root nor the daemon's may not add an exec: peer, unless exec_users names it",
        .enabled(if: canSwitchUsers, "needs root to run clients as other users"))
    func execPeersThroughTheSocket() throws {
        // Anyone may open the socket, and no access list is set: the socket's group alone decided before.
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evexec-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"socket_mode":"0666"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let user = asUser(nobody, gid: nobody)
        let refused = try evctl(user, daemon.socketPath, ["peers", "add", "relay", "exec:/bin/true"])
        #expect(refused.status == 77, "\(refused.output)")
        #expect(refused.output.contains("(forbidden)") && refused.output.contains("exec_users"), "\(refused.output)")
        let once = try evctl(user, daemon.socketPath, ["sync", "exec:/bin/true"])
        #expect(once.status == 77, "\(once.output)")
        // A unix:// socket the daemon would open with its own rights falls under the same rule.
        let unix = try evctl(user, daemon.socketPath, ["peers", "add", "other", "unix:///nowhere/evstored.sock"])
        #expect(unix.status == 77, "\(unix.output)")
        // Everything else stays open to it.
        #expect(try evctl(user, daemon.socketPath, ["append", "job/1", "status", "new"]).status == 0)
        let peers = try daemon.client().call("peers.list")["peers"] as? [[String: Any]] ?? []
        #expect(peers.isEmpty, "\(peers)")
        // Root (the test) may.
        _ = try daemon.client().call("peers.add", #"{"name":"mine","url":"exec:/bin/true"}"#)

        // exec_users names it: allowed, from the reload on.
        try #"{"socket_mode":"0666","exec_users":["nobody"]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !daemon.stderr.contains("access for new connections"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        #expect(daemon.stderr.contains("exec_users nobody"), "the access line names them")
        let added = try evctl(user, daemon.socketPath, ["peers", "add", "relay", "exec:/bin/true"])
        #expect(added.status == 0, "\(added.output)")
        let flag = try DaemonProcess(arguments: ["--socket-mode", "0666", "--exec-users", "\(nobody)"])
        defer { flag.removeFiles() }
        let byFlag = try evctl(user, flag.socketPath, ["peers", "add", "relay", "exec:/bin/true"])
        #expect(byFlag.status == 0, "a numeric id, from the flag: \(byFlag.output)")
    }

    @Test(
        "exec: peers of the config file still work, the administrator wrote them: a sync runs the command and moves events both ways"
    )
    func configFilePeers() throws {
        let hq = try DaemonProcess(arguments: ["--node", "hq"])
        defer { hq.removeFiles() }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evexec-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        let evctl = try builtBinary("evctl").path
        let url = "exec:\(evctl) --socket '\(hq.socketPath)' sync-serve"
        let peers = #"{"name":"relay","url":"\#(url)"}"#
        try #"{"peers":[\#(peers)],"sync_interval_s":3600,"backoff_base_s":3600,"backoff_cap_s":3600}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config, "--node", "van"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let listed = try client.call("peers.list")["peers"] as? [[String: Any]] ?? []
        #expect(listed.count == 1 && listed.first?["source"] as? String == "config", "\(listed)")

        _ = try client.call("append", eventsParams([#"{"entity":"job/van","kind":"status","status":"en_route"}"#]))
        _ = try hq.client().call("append", eventsParams([#"{"entity":"job/hq","kind":"status","status":"assigned"}"#]))
        // The first call may join the session the daemon began at start, before the appends;
        // the second begins after them.
        for _ in 0..<2 {
            let outcome = try #require(
                (try client.call("sync", #"{"peer":"relay"}"#)["peers"] as? [[String: Any]])?.first)
            #expect(outcome["error"] is NSNull, "\(outcome)")
            #expect(outcome["name"] as? String == "relay")
        }
        // The command ran and the session went both ways: each side now holds the other's job.
        let there = try hq.client().call("get", #"{"entity":"job/van"}"#)
        #expect((there["status"] as? [String: Any])?["current"] as? String == "en_route")
        let here = try client.call("get", #"{"entity":"job/hq"}"#)
        #expect((here["status"] as? [String: Any])?["current"] as? String == "assigned")
        #expect(try client.call("status")["digest"] as? String == hq.client().call("status")["digest"] as? String)
        let peer = (try client.call("status")["peers"] as? [[String: Any]])?.first { $0["name"] as? String == "relay" }
        #expect(peer?["state"] as? String == "ok" && peer?["pending"] as? Int == 0, "\(peer ?? [:])")
    }
}
