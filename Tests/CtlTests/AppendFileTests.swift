import Foundation
import Testing

/// `evctl append --file` against a real `evstored`: batches, acknowledgements, failures.
@Suite(.serialized, .enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct AppendFileTests {
    /// The field workload generator beside the repository (../shared/workload/fieldops.py).
    static let workload: String? = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent("../shared/workload/fieldops.py").standardizedFileURL.path
        return FileManager.default.fileExists(atPath: path) ? path : nil
    }()

    /// `events` lines of the field workload, in a file in `directory`.
    /// `keyed`: each line gets the idempotency key `line-N`, so appending a line again finds
    /// it present rather than storing it twice.
    static func workloadFile(events: Int, in directory: String, keyed: Bool = false) throws
        -> (path: String, lines: [String])
    {
        let script = try #require(workload)
        let path = directory + "/workload.ndjson"
        let python = Process()
        python.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        python.arguments = ["python3", script, "--events", String(events)]
        python.standardOutput = FileHandle(forWritingAtPath: try emptyFile(path))
        try python.run()
        python.waitUntilExit()
        try #require(python.terminationStatus == 0)
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
        try #require(lines.count == events)
        if keyed {
            try #require(lines.allSatisfy { $0.hasSuffix("}") && !$0.contains(#""key":"#) })
            lines = lines.enumerated().map { index, line in line.dropLast() + #","key":"line-\#(index + 1)"}"# }
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        }
        return (path, lines)
    }

    @Test(.enabled(if: workload != nil, "fieldops.py is not beside the repository"))
    func aWorkloadFileThenListAndGetAgree() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let (path, lines) = try AppendFileTests.workloadFile(events: 3000, in: daemon.directory)

        let result = try evctl(["append", "--file", path], socket: daemon.socketPath)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("appended 3000 events (0 already present) in "), "\(result)")
        #expect(result.stdout.hasSuffix(" events/s)\n"))
        #expect(result.stderr.isEmpty, "no progress line when standard error is not a terminal")

        let status = try evctl(["--json", "status"], socket: daemon.socketPath).json()
        #expect(status["events"] as? Int == 3000)
        let log = try evctl(["--json", "log", "--all"], socket: daemon.socketPath)
        #expect(log.lines.count == 3000)

        let written = Set(try lines.map { try jsonObject($0)["entity"] as? String ?? "" })
        let list = try evctl(
            ["--json", "list", "--all", "--include-deleted", "--limit", "500"], socket: daemon.socketPath)
        let entities = try #require(try list.json()["entities"] as? [[String: Any]])
        #expect(Set(entities.compactMap { $0["entity"] as? String }) == written)
        #expect(status["entities"] as? Int == written.count)
        #expect(entities.contains { $0["deleted"] as? Bool == true }, "the workload deletes about 1 job in 100")

        let live = try evctl(["list", "--all"], socket: daemon.socketPath).lines.dropFirst()
        #expect(live.count == entities.filter { $0["deleted"] as? Bool == false }.count)

        for entry in entities.enumerated().filter({ $0.offset % 17 == 0 }).map(\.element) {
            let entity = try #require(entry["entity"] as? String)
            let state = try evctl(["--json", "get", entity], socket: daemon.socketPath).json()
            #expect(state["version"] as? String == entry["version"] as? String, "\(entity)")
            #expect(state["deleted"] as? Bool == entry["deleted"] as? Bool, "\(entity)")
            let current = (state["status"] as? [String: Any])?["current"] as? String
            #expect(current == entry["status"] as? String, "\(entity)")
        }
    }

    @Test(.enabled(if: workload != nil, "fieldops.py is not beside the repository"))
    func jsonPrintsEachAcknowledgedBatch() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let (path, _) = try AppendFileTests.workloadFile(events: 3000, in: daemon.directory)

        let result = try evctl(["--json", "append", "--file", path, "--batch", "700"], socket: daemon.socketPath)
        #expect(result.status == 0, "\(result)")
        let objects = try result.lines.map(jsonObject)
        try #require(objects.count == 6, "\(result)")
        var next = 1
        var ids: [String] = []
        for (index, batch) in objects.dropLast().enumerated() {
            #expect(batch["batch"] as? Int == index + 1)
            let first = try #require(batch["first_line"] as? Int)
            let last = try #require(batch["last_line"] as? Int)
            #expect(first == next)
            let batchIDs = try #require(batch["ids"] as? [String])
            #expect(batchIDs.count == last - first + 1)
            ids += batchIDs
            next = last + 1
        }
        #expect(next == 3001)
        let summary = try #require(objects.last)
        #expect(summary["appended"] as? Int == 3000)
        #expect(summary["batches"] as? Int == 5)
        #expect(summary["seconds"] is Double || summary["seconds"] is Int)

        let log = try evctl(["--json", "log", "--all"], socket: daemon.socketPath)
        #expect(try log.lines.map { try jsonObject($0)["id"] as? String ?? "" } == ids)
    }

    @Test func aRejectedEventNamesItsLineAndKeepsEarlierBatches() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        var lines = (1...30).map { #"{"entity":"job/\#($0)","kind":"status","status":"assigned"}"# }
        lines[24] = #"{"entity":"job/25","kind":"status","status":"assigned","colour":"red"}"#
        let file = daemon.directory + "/events.ndjson"
        try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)

        let result = try evctl(["append", "--file", file, "--batch", "10"], socket: daemon.socketPath)
        #expect(result.status == 65, "\(result)")
        #expect(result.stderr.hasPrefix("evctl: line 25: "), "\(result)")
        #expect(result.stderr.contains("(invalid_event)"))
        #expect(result.stderr.contains("nothing of lines 21-30 was appended"))
        #expect(result.stderr.contains("the 20 events before it (up to line 20) were appended"))
        #expect(result.stderr.contains("re-run with --skip 20"))
        #expect(try evctl(["--json", "status"], socket: daemon.socketPath).json()["events"] as? Int == 20)

        let json = try evctl(
            ["--json", "append", "--file", file, "--batch", "10", "--skip", "20"], socket: daemon.socketPath)
        #expect(json.status == 65)
        let summary = try jsonObject(try #require(json.lines.last))
        let error = try #require(summary["error"] as? [String: Any])
        #expect(error["line"] as? Int == 25 && error["reason"] as? String == "invalid_event")
        #expect(summary["appended"] as? Int == 0)

        lines[24] = #"{"entity":"job/25","kind":"status","status":"assigned"}"#
        try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
        let resumed = try evctl(["append", "--file", file, "--skip", "20"], socket: daemon.socketPath)
        #expect(resumed.stdout.hasPrefix("appended 10 events"), "\(resumed)")
        #expect(try evctl(["--json", "status"], socket: daemon.socketPath).json()["events"] as? Int == 30)
    }

    @Test func standardInputBlankLinesSkipAndKeys() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let keyed = (1...10).map {
            #"{"entity":"job/\#($0)","kind":"edit","fields":{"n":\#($0)},"key":"import-\#($0)"}"#
        }
        let input =
            "\n" + keyed[0..<5].joined(separator: "\n") + "\n  \n\r\n" + keyed[5...].joined(separator: "\n") + "\n\n"

        var result = try evctl(["append", "--file", "-", "--skip", "3"], socket: daemon.socketPath, stdin: input)
        #expect(result.stdout.hasPrefix("appended 7 events (0 already present)"), "\(result)")
        result = try evctl(["append", "--file", "-", "--batch", "4"], socket: daemon.socketPath, stdin: input)
        #expect(result.stdout.hasPrefix("appended 10 events (7 already present)"), "\(result)")
        let summary = try evctl(["--json", "append", "-f", "-"], socket: daemon.socketPath, stdin: input).lines.last
        let object = try jsonObject(try #require(summary))
        #expect(object["appended"] as? Int == 10 && object["already_present"] as? Int == 10)
        #expect(try evctl(["--json", "status"], socket: daemon.socketPath).json()["events"] as? Int == 10)
    }

    @Test(.enabled(if: workload != nil, "fieldops.py is not beside the repository"))
    func aDaemonThatDiesMidwayLosesNoAcknowledgedEvent() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        // Keyed: a batch the daemon committed as it died, before its answer reached evctl, is
        // sent again by the resumed import and found present, not stored twice (an edit of a
        // job that batch deleted would be refused).
        let (path, lines) = try AppendFileTests.workloadFile(events: 30000, in: daemon.directory, keyed: true)

        let append = try EvctlProcess(
            ["--json", "append", "--file", path, "--batch", "100"], socket: daemon.socketPath)
        try append.waitForOutput(timeout: 60) { $0.contains("\"batch\":3,") }
        daemon.stop(SIGKILL)
        let result = append.finish()
        #expect(result.status == 69, "the import should still be running when the daemon dies: \(result)")

        let batches = try result.lines.map(jsonObject).filter { $0["batch"] != nil }
        let acknowledged = batches.flatMap { $0["ids"] as? [String] ?? [] }
        let lastLine = batches.last?["last_line"] as? Int ?? 0
        #expect(acknowledged.count == lastLine)
        #expect(result.stderr.contains("--skip \(lastLine) "), "\(result)")
        let summary = try jsonObject(try #require(result.lines.last))
        #expect((summary["error"] as? [String: Any])?["skip"] as? Int == lastLine)

        let restarted = try RunningDaemon(directory: daemon.directory)
        defer { restarted.stop() }
        let stored = Set(
            try evctl(["--json", "log", "--all"], socket: restarted.socketPath).lines.map {
                try jsonObject($0)["id"] as? String ?? ""
            })
        #expect(acknowledged.allSatisfy(stored.contains), "every acknowledged event survives")

        let resumed = try evctl(["append", "--file", path, "--skip", String(lastLine)], socket: restarted.socketPath)
        #expect(resumed.status == 0, "\(resumed)")
        #expect(resumed.stdout.hasPrefix("appended \(lines.count - lastLine) events"))
    }
}
