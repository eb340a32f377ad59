import Foundation
import Projections
import Testing

/// Every evctl command against a real `evstored`.
@Suite(.serialized, .enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct CommandTests {
    let daemon: RunningDaemon

    init() throws {
        daemon = try RunningDaemon()
    }

    /// `evctl --socket S arguments...`
    func run(_ arguments: String...) throws -> EvctlResult {
        try evctl(arguments, socket: daemon.socketPath)
    }

    func ok(_ arguments: String...) throws -> EvctlResult {
        let result = try evctl(arguments, socket: daemon.socketPath)
        #expect(result.status == 0, "evctl \(arguments.joined(separator: " ")): \(result)")
        return result
    }

    @Test func appendGetListLog() throws {
        defer { daemon.remove() }
        let entity = try ok("new", "job").stdout.trimmingCharacters(in: .whitespacesAndNewlines)

        let statusID = try ok("append", entity, "status", "en_route", "--by", "ana").stdout
        #expect(ULID(statusID.trimmingCharacters(in: .newlines)) != nil, "\(statusID)")
        _ = try ok("append", entity, "set", "address=12 Main St", "floor:=3", "phone=+15550100", "gate:=null")
        _ = try ok("append", entity, "add", "parts", "valve-3")
        _ = try ok("append", entity, "add", "parts", ":=7")
        _ = try ok("append", entity, "add", "parts", "gasket")
        let removal = try ok("--json", "append", entity, "remove", "parts", "gasket").json()
        let removalID = try #require((removal["ids"] as? [String])?.first)
        #expect((removal["versions"] as? [String: String])?[entity] == removalID)

        let human = try ok("get", entity).stdout
        for expected in [
            "entity:   \(entity)\n", "version:  \(removalID)\n", "events:   6\n", "deleted:  no\n",
            "status:   en_route\n", "fields:\n  address: 12 Main St\n  floor: 3\n  phone: +15550100\n",
            "sets:\n  parts: valve-3, 7\n", "conflicts: none\n",
        ] {
            #expect(human.contains(expected), "\(expected) in\n\(human)")
        }
        #expect(!human.contains("history:"))
        let history = try ok("get", "--history", entity).stdout
        #expect(history.contains("history:\n  "))
        #expect(history.contains("en_route"))

        let state = try ok("--json", "get", entity).json()
        #expect(state["entity"] as? String == entity)
        #expect(state["version"] as? String == removalID)
        #expect((state["fields"] as? [String: Any])?["floor"] as? Int == 3)
        #expect((state["sets"] as? [String: Any])?["parts"] as? [AnyHashable] == ["valve-3", 7])

        let list = try ok("list", "job")
        #expect(list.lines.first?.hasPrefix("ENTITY") == true)
        #expect(list.lines.contains { $0.hasPrefix(entity) && $0.contains("en_route") && $0.hasSuffix("no") })
        let listJSON = try ok("--json", "list", "--status", "en_route").json()
        let entities = try #require(listJSON["entities"] as? [[String: Any]])
        #expect(entities.map { $0["entity"] as? String } == [entity])
        #expect(listJSON["next"] is NSNull)
        #expect(try ok("list", "--status", "done").stdout == "no entities\n")

        let log = try ok("log", "--entity", entity).lines
        #expect(log.count == 6)
        // seq, id, entity, kind, what changed.
        #expect(log[0].contains("  " + statusID.trimmingCharacters(in: .newlines) + "  \(entity)  status  en_route"))
        #expect(Int(log[0].prefix { $0 != " " }) != nil, "\(log[0])")
        #expect(log[0].hasSuffix("(by ana)"))
        #expect(log[1].contains("  edit  address=\"12 Main St\"  floor:=3  gate:=null  phone=+15550100"))
        #expect(log[3].contains("  add  parts  :=7"))
        let events = try ok("--json", "log", "--entity", entity).lines.map(jsonObject)
        #expect(events.count == 6)
        #expect(events.allSatisfy { $0["id"] is String && $0["origin"] is String && $0["entity"] as? String == entity })
        #expect(events.last?["id"] as? String == removalID)
        #expect(events.last?["observed"] is [String])
    }

    @Test func errorsMapToExitStatuses() throws {
        defer { daemon.remove() }
        var result = try run("get", "job/missing")
        #expect(result.status == 2, "\(result)")
        #expect(result.stderr.hasPrefix("evctl: ") && result.stderr.contains("(not_found)"))

        _ = try ok("append", "job/1", "status", "assigned")
        let shown = try ok("get", "job/1").stdout
        let rev = try #require(
            shown.split(separator: "\n").first { $0.hasPrefix("rev:") }?.split(
                separator: " ", omittingEmptySubsequences: true
            )
            .dropFirst().first.map(String.init))
        _ = try ok("append", "job/1", "status", "en_route", "--if-match", rev)
        result = try run("append", "job/1", "status", "done", "--if-match", rev)
        #expect(result.status == 3, "\(result)")
        #expect(result.stderr.contains("(conflict)"))
        result = try run("append", "job/1", "status", "done", "--if-match", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
        #expect(result.status == 64, "\(result)")

        _ = try ok("append", "job/1", "delete")
        result = try run("append", "job/1", "set", "a=1")
        #expect(result.status == 3)
        #expect(result.stderr.contains("(deleted)"))
        #expect(try ok("get", "job/1").stdout.contains("deleted:  yes"))
        #expect(try ok("list").stdout == "no entities\n")
        #expect(try ok("list", "--include-deleted").stdout.contains("job/1"))
        _ = try ok("append", "job/1", "restore")
        #expect(try ok("get", "job/1").stdout.contains("deleted:  no"))

        result = try run("append", "Not A Type/1", "status", "x")
        #expect(result.status == 65, "\(result)")
        #expect(result.stderr.contains("(invalid_event)"))

        let first = try ok("append", "job/2", "status", "a", "--key", "visit-1").stdout
        let again = try ok("append", "job/2", "status", "b", "--key", "visit-1").stdout
        #expect(first == again)
        #expect(try ok("--json", "get", "job/2").json()["events"] as? Int == 1)
    }

    @Test func status() throws {
        defer { daemon.remove() }
        _ = try ok("append", "job/1", "status", "assigned")
        _ = try ok("append", "job/2", "set", "a=1")
        let human = try ok("status").lines
        #expect(human.first == "saved locally: 2 events in 2 entities; no peers; needs attention: nothing")
        for label in ["node:", "events:", "entities:", "size:", "digest:", "clock skew:", "needs attention:", "peers:"]
        {
            #expect(human.contains { $0.hasPrefix(label) }, "\(label) in \(human)")
        }
        #expect(
            human.contains {
                $0.hasPrefix("peers:") && $0.hasSuffix("no peers (add one with `evctl peers add NAME URL`)")
            })
        let json = try ok("--json", "status").json()
        #expect(json["events"] as? Int == 2)
        #expect((json["node"] as? [String: Any])?["id"] is String)
        #expect(
            human.contains {
                $0.hasPrefix("node:") && $0.contains((json["node"] as? [String: Any])?["id"] as? String ?? "?")
            })
    }

    @Test func conflictsResolveAndDeadLetters() throws {
        defer { daemon.remove() }
        #expect(try ok("conflicts").stdout == "no conflicts\n")
        let conflicts = try ok("--json", "conflicts", "--type", "job", "--limit", "10").json()
        #expect((conflicts["entities"] as? [Any])?.isEmpty == true)

        _ = try ok("append", "job/1", "set", "address=1 Elm St")
        // No conflict to settle: the values are appended anyway, and evctl says so.
        let resolved = try ok("resolve", "job/1", "address=2 Elm St", "--status", "on_site")
        #expect(resolved.stdout.hasPrefix("appended "))
        #expect(resolved.stderr.contains("job/1 had no conflict on address, status; the values were appended anyway."))
        let state = try ok("--json", "get", "job/1").json()
        #expect((state["fields"] as? [String: Any])?["address"] as? String == "2 Elm St")
        #expect((state["status"] as? [String: Any])?["current"] as? String == "on_site")
        let json = try ok("--json", "resolve", "job/1", "floor:=2").json()
        #expect((json["ids"] as? [String])?.count == 1)
        #expect(try run("resolve", "job/404", "a=1").status == 2)

        #expect(try ok("dead-letters").stdout == "no dead letters\n")
        let letters = try ok("--json", "dead-letters", "--limit", "5").json()
        #expect((letters["dead_letters"] as? [Any])?.isEmpty == true)
    }

    @Test func rebuildAndBackup() throws {
        defer { daemon.remove() }
        _ = try ok("append", "job/1", "status", "assigned")
        _ = try ok("append", "job/1", "set", "a=1")
        #expect(try ok("rebuild").stdout == "rebuilt 1 entity from 2 events\n")
        #expect(
            try ok("rebuild", "--verify").stdout == "verified 1 entity from 2 events: the projections match the log\n")
        let json = try ok("--json", "rebuild", "--verify").json()
        #expect(json["entities"] as? Int == 1 && json["events"] as? Int == 2)
        #expect((json["mismatched"] as? [Any])?.isEmpty == true && json["digest_mismatch"] as? Bool == false)

        // A relative path is taken from evctl's working directory, not the daemon's.
        let relative = daemon.directory + "/from"
        try FileManager.default.createDirectory(atPath: relative, withIntermediateDirectories: true)
        let backup = try evctl(["backup", "copy"], socket: daemon.socketPath, workingDirectory: relative)
        #expect(backup.status == 0, "\(backup)")
        #expect(backup.stdout.hasPrefix("backed up ") && backup.stdout.hasSuffix(" to \(relative)/copy\n"))
        #expect(FileManager.default.fileExists(atPath: relative + "/copy/data.mdb"))
        let again = try evctl(["backup", "copy"], socket: daemon.socketPath, workingDirectory: relative)
        #expect(again.status != 0 && again.stderr.hasPrefix("evctl: "))
        let result = try ok("--json", "backup", daemon.directory + "/copy2").json()
        #expect(result["path"] as? String == daemon.directory + "/copy2" && (result["bytes"] as? Int ?? 0) > 0)
    }

    @Test func pagesAndAll() throws {
        defer { daemon.remove() }
        let lines = (0..<25).map { #"{"entity":"job/\#(String(format: "%02d", $0))","kind":"status","status":"s"}"# }
        _ = try evctl(["append", "--file", "-"], socket: daemon.socketPath, stdin: lines.joined(separator: "\n"))
        let page = try ok("list", "--limit", "10")
        #expect(page.lines.count == 11)
        #expect(page.stderr.contains("--after job/09"))
        #expect(try ok("list", "--limit", "10", "--after", "job/19").lines.count == 6)
        let all = try ok("list", "--limit", "10", "--all")
        #expect(all.lines.count == 26 && all.stderr.isEmpty)
        let json = try ok("--json", "list", "--limit", "7", "--all").json()
        #expect((json["entities"] as? [Any])?.count == 25 && json["next"] is NSNull)
        #expect(try ok("log", "--limit", "5", "--all").lines.count == 25)
        #expect(try ok("log", "--limit", "5").lines.count == 5)
    }
}
