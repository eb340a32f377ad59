import EventStore
import Projections
import Testing
import Wire

/// What a node hands to an authority is its client's append written again from the
/// decoded events: decoding it must give the same events.
@Suite("Input events written again")
struct InputJSONTests {
    @Test(
        "every kind, with every detail, decodes to the event it was written from",
        arguments: [
            #"{"entity":"job/1","kind":"edit","fields":{"a":1,"b":"x\n\"y\"","c":null,"d":{"e":[1,2]}},"key":"k-1","by":"ann","at":"2026-12-01T10:00:00Z","if_match":3,"resolve":true}"#,
            #"{"entity":"job/1","kind":"status","status":"en_route","by":""}"#,
            #"{"entity":"job/1","kind":"add","set":"parts","element":{"sku":"A-1"}}"#,
            #"{"entity":"job/1","kind":"remove","set":"parts","element":"A-1","key":"ü"}"#,
            #"{"entity":"job/1","kind":"incr","counter":"parts_used","amount":-9223372036854775808}"#,
            #"{"entity":"job/1","kind":"delete"}"#,
            #"{"entity":"job/1","kind":"restore","at":12}"#,
        ])
    func roundTrip(line: String) throws {
        let event = try EventCodec.decodeInput(Array(line.utf8))
        var out: [UInt8] = []
        InputJSON.append(event, to: &out)
        #expect(try EventCodec.decodeInput(out) == event, "\(String(decoding: out, as: UTF8.self))")
        let request = InputJSON.appendRequest([event, event])
        guard case .single(.request(let parsed)) = RequestParser.parse(Array(request.dropLast())),
            case .events(let events) = parsed.params
        else {
            Issue.record("the request did not parse: \(String(decoding: request, as: UTF8.self))")
            return
        }
        #expect(events == [event, event])
    }

    @Test("a response line read back gives its result's JSON or its error, and nothing for other lines")
    func responsesReadBack() {
        let result = Array(#"{"ids":["01"],"appended":1}"#.utf8)
        #expect(Response.read(Response.line(id: Array("7".utf8), result: result)) == .success(result))
        let error = RPCError(code: -32005, message: "event 0: no", reason: "invalid_event", index: 0)
        #expect(Response.read(Response.line(id: Array("7".utf8), error: error)) == .failure(error))
        for line in ["", "[]", "{}", #"{"result":1,"error":{}}"#, #"{"result":1} x"#, "not json"] {
            #expect(Response.read(Array(line.utf8)) == nil, "\(line)")
        }
    }
}
