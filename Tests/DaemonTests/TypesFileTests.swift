import Foundation
import TestSupport
import Testing

/// The types file on a real daemon: local appends that break a rule are refused naming
/// it, with nothing stored; a SIGHUP reads the file again, and a file that cannot be used
/// keeps the rules before; a file that cannot be used stops the start.
@Suite("Types file")
struct TypesFileTests {
    static let rules = #"""
        {"job": {"fields": {"address": "string", "floor": "integer"}, "extra_fields": false,
                 "status": {"initial": ["assigned"],
                            "transitions": {"assigned": ["en_route", "cancelled"], "en_route": ["on_site"],
                                            "on_site": ["done"]}}},
         "site": {"fields": {"notes": "any"}}}
        """#

    /// A directory for a daemon, and the path of its types file there (written when `rules`
    /// is given).
    static func directory(rules: String?) throws -> (root: String, file: String) {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evtypes-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let file = root + "/types.json"
        try rules?.write(toFile: file, atomically: true, encoding: .utf8)
        return (root, file)
    }

    func status(_ entity: String, _ status: String) -> String {
        #"{"entity":"\#(entity)","kind":"status","status":"\#(status)"}"#
    }

    func waitFor(_ text: String, in daemon: DaemonProcess, after count: Int) {
        let deadline = Date().addingTimeInterval(10)
        while daemon.stderr.components(separatedBy: text).count - 1 <= count, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    @Test("violations are refused naming the rule, nothing stored; the legal path goes through")
    func violationsAreRefused() throws {
        let (root, file) = try TypesFileTests.directory(rules: TypesFileTests.rules)
        let daemon = try DaemonProcess(root: root, arguments: ["--types-file", file])
        defer { daemon.removeFiles() }
        let client = try daemon.client()

        let first = try client.failure("append", eventsParams([status("job/1", "done")]))
        #expect(first.reason == "invalid_transition" && first.code == -32014)
        #expect(first.message.contains("job.status.initial"), "\(first.message)")
        _ = try client.call("append", eventsParams([status("job/1", "assigned")]))
        let jump = try client.failure("append", eventsParams([status("job/1", "en_route"), status("job/1", "done")]))
        #expect(jump.reason == "invalid_transition")
        #expect(jump.message.contains("from en_route to done"), "\(jump.message)")
        #expect(jump.message.contains("job.status.transitions.en_route"), "\(jump.message)")
        // The batch is all or nothing: en_route was not kept either.
        let state = try client.call("get", #"{"entity":"job/1"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "assigned")
        _ = try client.call(
            "append", eventsParams([status("job/1", "en_route"), status("job/1", "on_site"), status("job/1", "done")]))

        let typed = try client.failure(
            "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"floor":"3"}}"#]))
        #expect(typed.reason == "invalid_event" && typed.message.contains("job.fields.floor"), "\(typed.message)")
        let extra = try client.failure(
            "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"gate":"1234"}}"#]))
        #expect(extra.reason == "invalid_event" && extra.message.contains("job.extra_fields"), "\(extra.message)")
        _ = try client.call(
            "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"floor":3,"address":null}}"#]))
        // A type with rules for some fields takes others; a type without rules takes anything.
        _ = try client.call(
            "append", eventsParams([#"{"entity":"site/1","kind":"edit","fields":{"notes":[1],"other":true}}"#]))
        _ = try client.call("append", eventsParams([status("van/1", "anything")]))
        #expect(try client.call("status")["events"] as? Int == 7)

        let types = try client.call("types")
        #expect((types["rules"] as? [String: Any])?.keys.sorted() == ["job", "site"])
        let (code, output) = try runProgram(try builtBinary("evctl").path, ["--socket", daemon.socketPath, "types"])
        #expect(code == 0)
        #expect(output.contains("job\n") && output.contains("status en_route -> on_site"), "\(output)")
        #expect(output.contains("other fields: refused") && output.contains("fields: address string, floor integer"))
    }

    @Test("a replicated event that breaks a local rule is stored, folded and listed; the nodes converge")
    func replicatedViolationsAreListed() throws {
        let (root, file) = try TypesFileTests.directory(rules: TypesFileTests.rules)
        let strict = try DaemonProcess(root: root, arguments: ["--node", "hq", "--types-file", file])
        // Another version of the rules: none.
        let loose = try DaemonProcess(arguments: ["--node", "van"])
        defer {
            strict.removeFiles()
            loose.removeFiles()
        }
        let appended = try loose.client().call(
            "append",
            eventsParams([
                status("job/1", "done"), #"{"entity":"job/1","kind":"edit","fields":{"floor":"top"}}"#,
                status("job/2", "assigned"),
            ]))
        let ids = appended["ids"] as? [String] ?? []
        _ = try strict.client().call("peers.add", #"{"name":"van","url":"unix://\#(loose.socketPath)"}"#)
        let result = try strict.client().call("sync", #"{"peer":"van"}"#)
        #expect((result["peers"] as? [[String: Any]])?.first?["error"] is NSNull, "\(result)")

        let state = try strict.client().call("get", #"{"entity":"job/1"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "done")
        #expect((state["fields"] as? [String: Any])?["floor"] as? String == "top")
        let attention = try strict.client().call("attention")
        let violations = attention["rule_violations"] as? [[String: Any]] ?? []
        #expect(violations.compactMap { $0["id"] as? String }.sorted() == Array(ids.prefix(2)).sorted())
        #expect(violations.contains { ($0["rule"] as? String)?.contains("job.status.initial") == true })
        #expect(violations.allSatisfy { $0["peer"] as? String == "van" && $0["entity"] as? String == "job/1" })
        let needs = try strict.client().call("status")["needs_attention"] as? [String: Any]
        #expect(needs?["rule_violations"] as? Int == 2)
        let digests = try [strict, loose].map { try $0.client().call("status")["digest"] as? String }
        #expect(digests[0] != nil && digests[0] == digests[1])

        let (code, output) = try runProgram(
            try builtBinary("evctl").path, ["--socket", strict.socketPath, "attention", "dismiss", ids[0], ids[1]])
        #expect(code == 0 && output.contains("2 rule-violation records"), "\(output)")
        #expect(
            try strict.client().call("status")["needs_attention"].flatMap {
                ($0 as? [String: Any])?["rule_violations"] as? Int
            } == 0)
    }

    @Test("SIGHUP reads the file again; a file that cannot be used keeps the rules before")
    func reload() throws {
        let (root, file) = try TypesFileTests.directory(rules: TypesFileTests.rules)
        let daemon = try DaemonProcess(root: root, arguments: ["--types-file", file])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        #expect(try client.failure("append", eventsParams([status("job/1", "done")])).reason == "invalid_transition")

        try #"{"job": {"fields": {"floor": "integr"}}}"#.write(toFile: file, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        waitFor("the rules before stay in force", in: daemon, after: 0)
        #expect(daemon.stderr.contains("job.fields.floor"), "\(daemon.stderr)")
        #expect(try client.failure("append", eventsParams([status("job/1", "done")])).reason == "invalid_transition")

        try #"{"job": {"status": {"initial": ["done"]}}}"#.write(toFile: file, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        waitFor("SIGHUP: rules for 1 types", in: daemon, after: 0)
        _ = try client.call("append", eventsParams([status("job/1", "done")]))
        #expect(
            try client.failure("append", eventsParams([status("job/2", "assigned")])).reason == "invalid_transition")

        // A file that is gone cannot be read either: the rules stay.
        try FileManager.default.removeItem(atPath: file)
        daemon.signal(SIGHUP)
        waitFor("the rules before stay in force", in: daemon, after: 1)
        #expect(
            try client.failure("append", eventsParams([status("job/2", "assigned")])).reason == "invalid_transition")
    }

    @Test("a types file that cannot be used stops the start, saying why")
    func badFileStopsTheStart() throws {
        let (root, file) = try TypesFileTests.directory(rules: #"{"job": {"colour": "blue"}}"#)
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect {
            _ = try DaemonProcess(root: root, arguments: ["--types-file", file])
        } throws: { error in
            "\(error)".contains("job.colour: not a rule")
        }
    }
}
