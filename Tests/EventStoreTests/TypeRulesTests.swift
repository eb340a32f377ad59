import Projections
import Testing

@testable import EventStore

@Suite("Type rules")
struct TypeRulesTests {
    let job = try! Validation.entity("job/1")

    func rules(_ text: String) throws -> TypeRules { try TypeRules(parsing: Array(text.utf8)) }

    @Test func theSpecExampleParses() throws {
        let parsed = try rules(
            #"""
            {"job": {"fields": {"address": "string", "floor": "integer", "gate_code": "string"},
                     "extra_fields": false,
                     "status": {"initial": ["assigned"],
                                "transitions": {"assigned": ["en_route", "cancelled"],
                                                "en_route": ["on_site"], "on_site": ["done"]}},
                     "authority": "hq"},
             "payment": {"offline": "refuse", "authority": "hq"}}
            """#)
        let jobRules = try #require(parsed.types["job"])
        #expect(jobRules.fields == ["address": .string, "floor": .integer, "gate_code": .string])
        #expect(!jobRules.extraFields)
        #expect(jobRules.status?.initial == ["assigned"])
        #expect(jobRules.status?.transitions["assigned"] == ["en_route", "cancelled"])
        #expect(jobRules.authority == "hq")
        #expect(parsed.types["payment"]?.offline == "refuse")
        #expect(parsed.types["payment"]?.extraFields == true)
        #expect(
            String(decoding: parsed.sources["payment"] ?? [], as: UTF8.self)
                == #"{"authority":"hq","offline":"refuse"}"#)
    }

    @Test(
        "a file that cannot be used says where",
        arguments: [
            ("[]", "a JSON object"),
            ("{", "not JSON"),
            (#"{"Job": {}}"#, "not a type name"),
            (#"{"job": []}"#, "job: the rules of a type are a JSON object"),
            (#"{"job": {"colour": 1}}"#, "job.colour: not a rule"),
            (#"{"job": {"fields": {"a": "text"}}}"#, "job.fields.a: a JSON type"),
            (#"{"job": {"fields": {"9a": "string"}}}"#, "not a field name"),
            (#"{"job": {"extra_fields": "no"}}"#, "job.extra_fields: true or false"),
            (#"{"job": {"status": {"initial": "new"}}}"#, "job.status.initial: a list of statuses"),
            (#"{"job": {"status": {"transitions": {"a": [1]}}}}"#, "job.status.transitions.a: a list"),
            (#"{"job": {"status": {"final": []}}}"#, "job.status.final: not a rule"),
            (#"{"job": {"offline": "maybe"}}"#, "job.offline"),
            (#"{"job": {"authority": ""}}"#, "job.authority: a node name"),
            (#"{"payment": {"offline": "refuse"}}"#, "payment.offline: \"refuse\" needs \"authority\""),
        ])
    func badFiles(text: String, message: String) {
        #expect {
            try rules(text)
        } throws: { error in
            (error as? TypeRulesError)?.message.contains(message) ?? false
        }
    }

    @Test func oversizedFileIsRefusedUnread() {
        let big = [UInt8](repeating: 0x20, count: TypeRules.maxFileBytes + 1)
        #expect(throws: TypeRulesError.self) { try TypeRules(parsing: big) }
    }

    @Test func fieldTypes() throws {
        let parsed = try rules(
            #"{"job": {"fields": {"s": "string", "i": "integer", "n": "number", "b": "boolean", "o": "object", "a": "array", "x": "any"}}}"#
        )
        func edit(_ name: String, _ value: String) -> InputEvent.Change {
            .edit([FieldChange(name: name, value: try! JSONBytes(parsing: value))])
        }
        let good = [
            ("s", #""t""#), ("i", "-3"), ("n", "2.5"), ("n", "7"), ("b", "false"), ("o", "{}"), ("a", "[1]"),
            ("x", "null"), ("x", "1"),
        ]
        for (name, value) in good { try parsed.check(edit(name, value), of: job, currentStatus: nil) }
        // null clears any field, whatever its type.
        try parsed.check(edit("i", "null"), of: job, currentStatus: nil)
        let bad = [
            ("s", "1"), ("i", "2.5"), ("i", "1e3"), ("i", #""1""#), ("n", "true"), ("b", "0"), ("o", "[]"), ("a", "{}"),
        ]
        for (name, value) in bad {
            #expect(throws: EventStoreError.self) { try parsed.check(edit(name, value), of: job, currentStatus: nil) }
        }
        // Fields not listed are allowed unless extra_fields is false.
        try parsed.check(edit("other", "1"), of: job, currentStatus: nil)
    }

    @Test func statusMoves() throws {
        let parsed = try rules(#"{"job": {"status": {"initial": ["new"], "transitions": {"new": ["done"]}}}}"#)
        try parsed.check(.status("new"), of: job, currentStatus: nil)
        try parsed.check(.status("done"), of: job, currentStatus: "new")
        #expect(throws: EventStoreError.self) { try parsed.check(.status("done"), of: job, currentStatus: nil) }
        #expect(throws: EventStoreError.self) { try parsed.check(.status("new"), of: job, currentStatus: "done") }
        // Other kinds and other types are not checked.
        try parsed.check(.incr(counter: "n", amount: 1), of: job, currentStatus: "done")
        try parsed.check(.status("x"), of: try Validation.entity("site/1"), currentStatus: "y")
        // No initial: any first status.
        try rules(#"{"job": {"status": {"transitions": {}}}}"#).check(.status("x"), of: job, currentStatus: nil)
    }
}
