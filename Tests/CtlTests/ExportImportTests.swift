import Foundation
import TestSupport
import Testing

/// `evctl export` and `evctl import` between real daemons: a store moved to a fresh node
/// is the same store, and a bad file changes nothing.
@Suite(.serialized, .enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct ExportImportTests {
    /// Node A with events of its own and of node B (after syncs both ways): edits, sets,
    /// deletes, restores and conflicting edits. Returns A, B and the entities touched.
    static func twoNodes() throws -> (RunningDaemon, RunningDaemon, [String]) {
        let a = try RunningDaemon(arguments: ["--node", "a", "--sync-interval-s", "3600"])
        let b: RunningDaemon
        do { b = try RunningDaemon(arguments: ["--node", "b", "--sync-interval-s", "3600"]) } catch {
            a.remove()
            throw error
        }
        func on(_ node: RunningDaemon, _ arguments: String...) throws {
            let result = try evctl(arguments, socket: node.socketPath)
            try #require(result.status == 0, "\(arguments): \(result)")
        }
        var lines: [String] = []
        for number in 1...1500 {
            lines.append(#"{"entity":"job/\#(number % 40)","kind":"edit","fields":{"n":\#(number)},"by":"bulk"}"#)
        }
        let bulk = a.directory + "/bulk.ndjson"
        try (lines.joined(separator: "\n") + "\n").write(toFile: bulk, atomically: true, encoding: .utf8)
        try on(a, "append", "--file", bulk)
        try on(a, "append", "job/1", "status", "assigned")
        try on(a, "append", "job/1", "set", "address=12 Main St", "floor:=3")
        try on(b, "append", "job/2", "add", "parts", "valve-3")
        try on(b, "append", "job/2", "add", "parts", ":={\"sku\":7}")
        try on(b, "append", "site/9", "set", "name=Depot")
        try on(a, "sync", "unix://\(b.socketPath)")
        // Concurrent edits of the same field on both nodes: a conflict.
        try on(a, "append", "job/1", "set", "address=14 Main St")
        try on(b, "append", "job/1", "set", "address=16 Main St")
        try on(b, "append", "job/2", "remove", "parts", "valve-3")
        try on(a, "append", "job/3", "delete")
        try on(a, "append", "job/4", "delete")
        try on(a, "append", "job/4", "restore")
        try on(a, "sync", "unix://\(b.socketPath)")
        try on(b, "append", "job/5", "status", "on_site")
        try on(a, "sync", "unix://\(b.socketPath)")
        return (a, b, (0..<40).map { "job/\($0)" } + ["site/9"])
    }

    static func status(_ node: RunningDaemon) throws -> (digest: String, events: Int) {
        let json = try evctl(["--json", "status"], socket: node.socketPath).json()
        return (json["digest"] as? String ?? "", json["events"] as? Int ?? -1)
    }

    @Test("a store exported from A and imported into a fresh C is the same store")
    func roundTrip() throws {
        let (a, b, entities) = try ExportImportTests.twoNodes()
        let c = try RunningDaemon(arguments: ["--node", "c", "--sync-interval-s", "3600"])
        defer {
            a.remove()
            b.remove()
            c.remove()
        }
        let fileA = a.directory + "/a.ndjson"
        var result = try evctl(["export", fileA], socket: a.socketPath)
        #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty, "\(result)")
        let exported = try String(contentsOfFile: fileA, encoding: .utf8)
        let stateA = try ExportImportTests.status(a)
        #expect(exported.split(separator: "\n").count == stateA.events)
        #expect(try evctl(["export"], socket: a.socketPath).stdout == exported, "to standard output, the same")
        #expect(try evctl(["export", "-"], socket: a.socketPath).stdout == exported)
        // The lines of log --json, without their seq (and log goes by seq, export by id).
        let logged = try evctl(["--json", "log", "--all"], socket: a.socketPath).stdout.split(separator: "\n").map {
            $0.replacingOccurrences(of: #","seq":[0-9]+\}$"#, with: "}", options: .regularExpression)
        }
        #expect(logged.count == stateA.events)
        #expect(Set(logged) == Set(exported.split(separator: "\n").map(String.init)), "the lines of log --json")
        let mode = try FileManager.default.attributesOfItem(atPath: fileA)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: a.directory).allSatisfy { !$0.hasSuffix(".tmp") })

        result = try evctl(["import", fileA], socket: c.socketPath)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "imported \(stateA.events) events (0 already held)\n", "\(result)")
        let stateC = try ExportImportTests.status(c)
        #expect(stateC.digest == stateA.digest && stateC.events == stateA.events)
        for entity in entities {
            let fromA = try evctl(["--json", "get", entity], socket: a.socketPath)
            #expect(fromA.status == 0)
            #expect(
                withoutRev(try evctl(["--json", "get", entity], socket: c.socketPath).stdout)
                    == withoutRev(fromA.stdout),
                "\(entity)")
        }
        let conflicts = try evctl(["--json", "conflicts"], socket: c.socketPath)
        #expect(conflicts.stdout.contains("job/1"), "\(conflicts)")
        #expect(try evctl(["rebuild", "--verify"], socket: c.socketPath).status == 0)

        let fileC = c.directory + "/c.ndjson"
        #expect(try evctl(["export", fileC], socket: c.socketPath).status == 0)
        #expect(try Data(contentsOf: URL(fileURLWithPath: fileC)) == Data(contentsOf: URL(fileURLWithPath: fileA)))

        // Again: a no-op.
        result = try evctl(["--json", "import", fileA], socket: c.socketPath)
        #expect(result.status == 0, "\(result)")
        #expect(try result.json()["imported"] as? Int == 0)
        #expect(try result.json()["skipped"] as? Int == stateA.events)
        #expect(try ExportImportTests.status(c).digest == stateA.digest)

        // C syncs with B: they converge, and B receives nothing it had.
        let stateB = try ExportImportTests.status(b)
        let sync = try evctl(["--json", "sync", "unix://\(b.socketPath)"], socket: c.socketPath).json()
        let outcome = try #require((sync["peers"] as? [[String: Any]])?.first)
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(outcome["sent"] as? Int == 0 && outcome["received"] as? Int == 0, "\(outcome)")
        #expect(try ExportImportTests.status(b).digest == stateB.digest)
        #expect(stateB.digest == stateA.digest)

        // C's own events afterwards go to B as usual.
        #expect(try evctl(["append", "job/6", "status", "new"], socket: c.socketPath).status == 0)
        let next = try evctl(["--json", "sync", "unix://\(b.socketPath)"], socket: c.socketPath).json()
        #expect((next["peers"] as? [[String: Any]])?.first?["sent"] as? Int == 1)
    }

    @Test("into a node that holds a prefix; a bad line, a reordered or partial file change nothing")
    func prefixAndRefusals() throws {
        let (a, b, _) = try ExportImportTests.twoNodes()
        b.remove()
        let d = try RunningDaemon(arguments: ["--node", "d", "--sync-interval-s", "3600"])
        defer {
            a.remove()
            d.remove()
        }
        let file = a.directory + "/a.ndjson"
        #expect(try evctl(["export", file], socket: a.socketPath).status == 0)
        let lines = try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n").map(String.init)
        func write(_ lines: [String], _ name: String) throws -> String {
            let path = d.directory + "/" + name
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        // A prefix of the file (as a node would hold after an earlier import), with blank lines.
        let half = lines.count / 2
        var result = try evctl(
            ["import", try write(Array(lines[..<half]) + ["", "  "], "half.ndjson")], socket: d.socketPath)
        #expect(result.stdout == "imported \(half) events (0 already held)\n", "\(result)")
        let before = try ExportImportTests.status(d)

        // A corrupted line: exit 65, the line named, nothing imported (the line is after
        // the first batch, so the dry run is what stops it).
        var corrupt = lines
        let bad = lines.count - 3
        corrupt[bad - 1] = corrupt[bad - 1].replacingOccurrences(of: #""kind":"#, with: #""kind":"x","was":"#)
        result = try evctl(["import", try write(corrupt, "corrupt.ndjson")], socket: d.socketPath)
        #expect(result.status == 65, "\(result)")
        #expect(result.stderr.hasPrefix("evctl: line \(bad): event "), "\(result)")
        #expect(result.stderr.contains("nothing was imported"), "\(result)")
        #expect(try ExportImportTests.status(d) == before)

        // A line that is not JSON.
        corrupt = lines
        corrupt[9] = String(corrupt[9].dropLast())
        result = try evctl(["import", try write(corrupt, "truncated.ndjson")], socket: d.socketPath)
        #expect(result.status == 65 && result.stderr.hasPrefix("evctl: line 10: "), "\(result)")

        // Two events of one origin swapped: found before anything is sent.
        var swapped = lines
        swapped.swapAt(half + 10, half + 50)
        result = try evctl(["import", try write(swapped, "swapped.ndjson")], socket: d.socketPath)
        #expect(result.status == 65, "\(result)")
        #expect(result.stderr.hasPrefix("evctl: line \(half + 12): holds event "), "\(result)")
        #expect(try ExportImportTests.status(d) == before)

        // A file without an event that D already holds newer ones of its origin than, and
        // lacks: the file D's prefix came from was partial. Refused, nothing imported.
        result = try evctl(["import", try write(Array(lines[..<(half + 20)]), "more.ndjson")], socket: d.socketPath)
        #expect(result.status == 0, "\(result)")
        let partialState = try ExportImportTests.status(d)
        var filtered = lines
        filtered.remove(at: half + 30)
        _ = try evctl(["import", try write(Array(filtered[..<(half + 40)]), "filtered.ndjson")], socket: d.socketPath)
        let afterFiltered = try ExportImportTests.status(d)
        result = try evctl(["import", file], socket: d.socketPath)
        #expect(result.status == 65, "\(result)")
        #expect(result.stderr.contains("line \(half + 31): event "), "\(result)")
        #expect(result.stderr.contains("partial or filtered export"), "\(result)")
        #expect(try ExportImportTests.status(d) == afterFiltered)
        #expect(afterFiltered.events == partialState.events + 20)

        // --dry-run checks and stores nothing.
        let d2 = try RunningDaemon(arguments: ["--node", "d2"])
        defer { d2.remove() }
        result = try evctl(["import", "--dry-run", file], socket: d2.socketPath)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("\(lines.count) to import, 0 already held; nothing was imported"), "\(result)")
        #expect(try ExportImportTests.status(d2).events == 0)

        // The whole file into a node holding a prefix: the rest is imported.
        result = try evctl(
            ["--json", "import", "-"], socket: d2.socketPath, stdin: lines[..<half].joined(separator: "\n"))
        #expect(try result.json()["imported"] as? Int == half, "\(result)")
        result = try evctl(["import", file], socket: d2.socketPath)
        #expect(result.stdout == "imported \(lines.count - half) events (\(half) already held)\n", "\(result)")
        #expect(try ExportImportTests.status(d2) == ExportImportTests.status(a))
    }

    @Test("export to a directory that cannot be written leaves nothing and fails")
    func exportFailure() throws {
        let a = try RunningDaemon()
        defer { a.remove() }
        #expect(try evctl(["append", "job/1", "status", "new"], socket: a.socketPath).status == 0)
        let result = try evctl(["export", a.directory + "/missing/dir/x.ndjson"], socket: a.socketPath)
        #expect(result.status == 1 && result.stderr.contains("cannot create a file in"), "\(result)")
        let usage = try evctl(["import", "--batch", "0"], socket: a.socketPath)
        #expect(usage.status == 64, "\(usage)")
    }
}
