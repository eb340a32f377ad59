import Foundation
import TestSupport
import Testing
import UnixSocket

/// Many writes while a peer is away (seed checklist: "generate a large number of writes
/// while offline, then verify the batch syncs correctly on reconnect").
@Suite("A saturated queue")
struct SaturatedQueueTests {
    /// `count` status events over a few thousand entities, as `evctl append --file` reads them.
    static func writeEvents(_ count: Int, to path: String) throws {
        var text = ""
        text.reserveCapacity(count * 64)
        let statuses = ["new", "assigned", "en_route", "on_site", "done"]
        for index in 0..<count {
            text += #"{"entity":"job/\#(index % 5000)","kind":"status","status":"\#(statuses[index % 5])"}"#
            text += "\n"
        }
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    func status(_ daemon: DaemonProcess) throws -> [String: Any] { try daemon.client().call("status") }

    func pending(_ daemon: DaemonProcess, peer: String) -> Int? {
        guard let peers = (try? status(daemon))?["peers"] as? [[String: Any]] else { return nil }
        return peers.first { $0["name"] as? String == peer }?["pending"] as? Int
    }

    @Test(
        "100k events appended while the peer is down reach it in one background pass; pending counts down batch by batch"
    )
    func hundredThousand() throws {
        let count = 100_000
        let peerRoot = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evsat-b-\(UUID().uuidString.prefix(8))"
        ).path
        var peer = try DaemonProcess(root: peerRoot, arguments: ["--node", "hq"])
        defer { peer.removeFiles() }
        try peer.stop()

        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evsat-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = """
            {"peers":[{"name":"hq","url":"unix://\(peer.socketPath)"}],
             "sync_interval_s":1,"backoff_base_s":1,"backoff_cap_s":1}
            """
        try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let node = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json", "--node", "van"])
        defer { node.removeFiles() }

        try SaturatedQueueTests.writeEvents(count, to: root + "/events.ndjson")
        let appendStarted = Date()
        let appended = try runProgram(
            try builtBinary("evctl").path, ["--socket", node.socketPath, "append", "--file", root + "/events.ndjson"])
        let appendSeconds = Date().timeIntervalSince(appendStarted)
        #expect(appended.status == 0, "\(appended.output.suffix(500))")
        #expect(try status(node)["events"] as? Int == count)
        #expect(pending(node, peer: "hq") == count, "nothing reached the peer while it was down")

        // The peer returns; status is polled as the background session runs.
        peer = try DaemonProcess(root: peerRoot, arguments: ["--node", "hq"])
        let syncStarted = Date()
        var seen: [Int] = []
        let deadline = Date().addingTimeInterval(300)
        while Date() < deadline {
            if let value = pending(node, peer: "hq") { seen.append(value) }
            if seen.last == 0, (try? status(peer)["events"] as? Int) == count { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let syncSeconds = Date().timeIntervalSince(syncStarted)
        #expect(try status(peer)["events"] as? Int == count)
        #expect(try status(peer)["digest"] as? String == status(node)["digest"] as? String)
        #expect(seen.contains { $0 > 0 && $0 < count }, "pending was seen between 0 and \(count): \(seen.suffix(20))")
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 >= $1 }, "pending never went up: \(seen)")
        // One session delivered everything. Pending reaches 0 with the last ack, before the
        // session has ended and logged its line: wait for the line.
        var sessions: [Substring] = []
        let logged = Date().addingTimeInterval(60)
        while sessions.isEmpty, Date() < logged {
            sessions = node.stderr.split(separator: "\n").filter { $0.contains("sync with hq: sent ") }
            if sessions.isEmpty { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(sessions.first?.contains("sent \(count),") == true, "\(sessions)")
        print(
            "saturated queue: appended \(count) in \(String(format: "%.1f", appendSeconds)) s, delivered in \(String(format: "%.1f", syncSeconds)) s from the peer's start (\(sessions.first ?? ""))"
        )
    }
}
