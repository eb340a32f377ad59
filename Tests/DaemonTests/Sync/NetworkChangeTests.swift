import Foundation
import TestSupport
import Testing
import UnixSocket

/// The network comes back: a node in a network namespace of its own, whose peer failed
/// and is an hour of backoff away, syncs as soon as a link with an address comes up in
/// that namespace. The peer is reached through a Unix socket, which works across network
/// namespaces, so the new link is only the signal.
@Suite("The network comes back", .serialized)
struct NetworkChangeTests {
    func status(_ daemon: DaemonProcess) throws -> [String: Any] { try daemon.client().call("status") }

    func peer(_ daemon: DaemonProcess) throws -> [String: Any]? {
        (try status(daemon)["peers"] as? [[String: Any]])?.first
    }

    /// The time limit only guards against a hang: the test's own waits are bounded (20 s
    /// for the first failure, 30 s for the sync), but under the address sanitizer, with the
    /// whole suite running beside it on two CPUs, its wall time has passed two minutes.
    @Test(
        "a failing peer an hour of backoff away is synced within 3 s of a link coming up with an address",
        .enabled(if: NetworkNamespace.usable, NetworkNamespace.unusableReason), .timeLimit(.minutes(30)))
    func linkUpSyncsAtOnce() throws {
        let namespace = try NetworkNamespace()
        defer { namespace.delete() }
        let hqRoot = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evhq-\(UUID().uuidString.prefix(8))"
        )
        .path
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evnode-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer {
            try? FileManager.default.removeItem(atPath: hqRoot)
            try? FileManager.default.removeItem(atPath: root)
        }
        let config = """
            {"peers":[{"name":"hq","url":"unix://\(hqRoot)/evstored.sock"}],
             "sync_interval_s":3600,"backoff_base_s":3600,"backoff_cap_s":3600}
            """
        try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let node = try DaemonProcess(
            root: root, arguments: ["--config", root + "/evstored.json", "--node", "van"],
            launcher: namespace.launcher)
        defer { node.removeFiles() }

        // hq is down: the first attempt fails, and the next is about an hour away.
        var deadline = Date().addingTimeInterval(20)
        while Date() < deadline, (try peer(node)?["failures"] as? Int ?? 0) < 1 {
            Thread.sleep(forTimeInterval: 0.05)
        }
        let failed = try #require(try peer(node))
        #expect(failed["state"] as? String == "retrying", "\(failed)")
        #expect((failed["last_error"] as? [String: Any])?["reason"] as? String == "unreachable")
        #expect(!node.stderr.contains("cannot watch the network"), "\(node.stderr)")

        // hq comes back with an event; the node does not notice on its own.
        let hq = try DaemonProcess(root: hqRoot, arguments: ["--node", "hq"])
        defer { hq.removeFiles() }
        _ = try hq.client().call(
            "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"assigned"}"#]))
        Thread.sleep(forTimeInterval: 3)
        #expect(try status(node)["events"] as? Int == 0)
        #expect(try peer(node)?["failures"] as? Int == 1)

        // A link with an address comes up in the node's namespace.
        try namespace.run(["link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        try namespace.run(["addr", "add", "10.9.9.1/24", "dev", "v0"])
        try namespace.run(["link", "set", "v1", "up"])
        try namespace.run(["link", "set", "v0", "up"])
        let linkUp = Date()
        var syncStarted: Date?
        var synced: Date?
        deadline = linkUp.addingTimeInterval(30)
        while Date() < deadline, synced == nil {
            if syncStarted == nil, node.stderr.contains("the network changed") { syncStarted = Date() }
            if try status(node)["events"] as? Int == 1 { synced = Date() }
            Thread.sleep(forTimeInterval: 0.02)
        }
        let arrived = try #require(synced, "the node did not sync after the link came up: \(node.stderr)")
        let started = syncStarted ?? arrived
        let toStart = started.timeIntervalSince(linkUp)
        let toSync = arrived.timeIntervalSince(linkUp)
        print("link-up to sync start: \(Int(toStart * 1000)) ms; to the event present: \(Int(toSync * 1000)) ms")
        #expect(toSync < 3, "synced \(toSync) s after the link came up")
        #expect(node.stderr.contains("the network changed: syncing 1 peer that failed before, backoff reset"))
        let after = try #require(try peer(node))
        #expect(after["state"] as? String == "ok", "\(after)")
        #expect(try status(node)["digest"] as? String == status(hq)["digest"] as? String)
    }
}
