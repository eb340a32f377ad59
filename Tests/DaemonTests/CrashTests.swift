import Foundation
import TestSupport
import Testing

/// `kill -9` of the daemon in the middle of a bulk `evctl append --file`, again and again.
@Suite("Crash: kill -9 during bulk appends", .serialized)
struct DaemonCrashTests {
    /// (entity, kind) of each line of a workload file, in order.
    func summaries(_ path: String) throws -> [String] {
        try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map { line in
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            return "\(object?["entity"] as? String ?? "?") \(object?["kind"] as? String ?? "?")"
        }
    }

    /// Every event of the store, in id order, as (id, "entity kind").
    func storedEvents(_ daemon: DaemonProcess) throws -> [(id: String, summary: String)] {
        let client = try daemon.client()
        var out: [(String, String)] = []
        var after: Int?
        repeat {
            let page = try client.call("log", after.map { #"{"after":\#($0),"limit":5000}"# } ?? #"{"limit":5000}"#)
            for event in page["events"] as? [[String: Any]] ?? [] {
                out.append(
                    (
                        event["id"] as? String ?? "",
                        "\(event["entity"] as? String ?? "?") \(event["kind"] as? String ?? "?")"
                    ))
            }
            after = page["next"] as? Int
        } while after != nil
        return out
    }

    /// Writes `count` events to `file`: the field workload when its generator is at hand,
    /// else jobs that are edited and walked through statuses.
    func writeWorkload(_ file: String, count: Int, seed: Int) throws {
        if let script = workloadScript() {
            let generate = Process()
            generate.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            generate.arguments = ["python3", script, "--events", "\(count)", "--seed", "\(seed)"]
            _ = FileManager.default.createFile(atPath: file, contents: nil)
            generate.standardOutput = FileHandle(forWritingAtPath: file)
            try generate.run()
            generate.waitUntilExit()
            if generate.terminationStatus == 0 { return }
        }
        let statuses = ["assigned", "en_route", "on_site", "done"]
        var text = ""
        for index in 0..<count {
            let job = "job/s\(seed)-\(index / 5)"
            if index % 5 == 0 {
                text +=
                    #"{"entity":"\#(job)","kind":"edit","fields":{"customer":"c\#(index)","address":"\#(index) Main St"}}"#
            } else {
                text += #"{"entity":"\#(job)","kind":"status","status":"\#(statuses[index % 5 - 1])"}"#
            }
            text += "\n"
        }
        try text.write(toFile: file, atomically: true, encoding: .utf8)
    }

    @Test("acknowledged events survive kill -9, once each, and what was committed is a prefix of the file")
    func killDuringBulkAppend() throws {
        let evctl = try builtBinary("evctl")
        var daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let root = daemon.root
        var rng = SystemRandomNumberGenerator()
        var held: [(id: String, summary: String)] = []
        var midway = 0
        for round in 0..<10 {
            let file = root + "/workload-\(round).ndjson"
            try writeWorkload(file, count: 20_000, seed: 100 + round)
            let lines = try summaries(file)

            let client = Process()
            client.executableURL = evctl
            client.arguments = ["--socket", daemon.socketPath, "--json", "append", "--file", file, "--batch", "500"]
            let output = Pipe()
            client.standardOutput = output
            client.standardError = FileHandle.nullDevice
            try client.run()
            // Kill once the first batch is acknowledged, at a random moment after it.
            var received = Data()
            while !received.contains(0x0A) {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                received += chunk
            }
            Thread.sleep(forTimeInterval: Double.random(in: 0...0.5, using: &rng))
            daemon.signal(SIGKILL)
            received += output.fileHandleForReading.readDataToEndOfFile()
            let text = String(decoding: received, as: UTF8.self)
            client.waitUntilExit()
            _ = try daemon.waitForExit()
            var acknowledged: [String] = []
            for line in text.split(separator: "\n") {
                let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                acknowledged += object?["ids"] as? [String] ?? []
            }

            daemon = try DaemonProcess(root: root)
            let now = try storedEvents(daemon)
            let before = Set(held.map(\.id))
            let fresh = now.filter { !before.contains($0.id) }
            #expect(now.count == held.count + fresh.count, "round \(round): nothing held before was lost")
            #expect(Set(now.map(\.id)).count == now.count, "round \(round): no id twice")
            #expect(
                Set(acknowledged).isSubset(of: Set(fresh.map(\.id))),
                "round \(round): every acknowledged event is there")
            #expect(fresh.count >= acknowledged.count)
            // The round's events, in id order, are the file's first lines, in order: no line
            // twice, none skipped, batches all or nothing.
            #expect(fresh.map(\.summary) == Array(lines.prefix(fresh.count)), "round \(round)")
            #expect(fresh.count == lines.count || fresh.count % 500 == 0, "round \(round): whole batches only")
            if !acknowledged.isEmpty && fresh.count < lines.count { midway += 1 }
            held = now
        }
        #expect(midway >= 5, "kills that landed mid-file: \(midway) of 10")
        let rebuild = try daemon.client().call("rebuild", #"{"verify":true}"#)
        #expect((rebuild["mismatched"] as? [Any])?.isEmpty == true && rebuild["digest_mismatch"] as? Bool == false)
        try daemon.stop()
    }
}
