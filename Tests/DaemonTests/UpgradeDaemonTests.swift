import Foundation
import TestSupport
import Testing

/// `evstored` started on a data directory 0.4.0 left (the store-format-2 fixture): it
/// upgrades the store at start and serves it, with the commit sequence.
@Suite("Daemon on a 0.4.0 store")
struct UpgradeDaemonTests {
    @Test("evstored opens a format-2 store written by 0.4.0: same events, digest and states, seqs 1...N")
    func daemonUpgradesAndServes() throws {
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/store-format-2/a")
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evd-up-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root + "/data", withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: fixture.appendingPathComponent("data.mdb").path, toPath: root + "/data/data.mdb")
        let daemon = try DaemonProcess(root: root)
        defer { daemon.removeFiles() }
        let expected = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: fixture.appendingPathComponent("status.json")))
                as? [String: Any])
        let client = try daemon.client()
        let status = try client.call("status")
        let events = try #require(expected["events"] as? Int)
        #expect(status["events"] as? Int == events)
        #expect(status["seq"] as? Int == events)
        #expect(status["digest"] as? String == expected["digest"] as? String)
        // The log in seq order is 0.4.0's log in id order.
        let logged = try String(contentsOf: fixture.appendingPathComponent("log.ndjson"), encoding: .utf8)
            .split(separator: "\n").map(String.init)
        var lines: [String] = []
        var after = 0
        while true {
            try client.send(#"{"jsonrpc":"2.0","id":1,"method":"log","params":{"after":\#(after),"limit":500}}"#)
            let line = try #require(try client.readLine())
            let page = try #require(
                (try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["result"] as? [String: Any]
            )
            for event in page["events"] as? [[String: Any]] ?? [] {
                after = event["seq"] as? Int ?? after
                var stripped = event
                stripped["seq"] = nil
                let data = try JSONSerialization.data(withJSONObject: stripped, options: [.sortedKeys])
                lines.append(String(decoding: data, as: UTF8.self))
            }
            if !(page["next"] is Int) { break }
        }
        let normalized = try logged.map {
            String(
                decoding: try JSONSerialization.data(
                    withJSONObject: try JSONSerialization.jsonObject(with: Data($0.utf8)), options: [.sortedKeys]),
                as: UTF8.self)
        }
        #expect(lines == normalized)
        #expect(after == events)
        let rebuild = try client.call("rebuild", #"{"verify":true}"#)
        #expect((rebuild["mismatched"] as? [Any])?.isEmpty == true && rebuild["digest_mismatch"] as? Bool == false)
        #expect(rebuild["unsequenced"] as? Int == 0)
        // Appends go on from N + 1.
        let appended = try client.call("append", eventsParams([#"{"entity":"job/new","kind":"delete"}"#]))
        #expect((appended["revs"] as? [String: Any])?["job/new"] as? Int == events + 1)
        _ = try daemon.stop()
    }
}
