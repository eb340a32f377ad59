import Testing

@testable import Projections

/// The tree the cold paths (config files, peer records, evctl's replies) read and write
/// in place of Foundation's JSONSerialization.
@Suite("JSON as a tree of Swift values")
struct JSONTreeTests {
    @Test("values come out as String, Int, Double, Bool, null, [Any] and [String: Any]")
    func parsesEveryKind() throws {
        let value = try JSONTree.parse(
            Array(#" {"s":"a\/b\n","i":-42,"d":1.5,"e":1e3,"t":true,"f":false,"n":null,"a":[1,"x"],"o":{}} "#.utf8))
        let object = try #require(value as? [String: Any])
        #expect(object["s"] as? String == "a/b\n")
        #expect(object["i"] as? Int == -42)
        #expect(object["d"] as? Double == 1.5)
        #expect(object["e"] as? Double == 1000)
        #expect(object["t"] as? Bool == true)
        #expect(object["f"] as? Bool == false)
        #expect(object["n"] is JSONTree.Null)
        #expect((object["a"] as? [Any])?.count == 2)
        #expect((object["o"] as? [String: Any])?.isEmpty == true)
        // An integer too large for Int is a Double, as JSONSerialization made it.
        #expect(try JSONTree.parse(Array("18446744073709551616".utf8)) as? Double == 18446744073709551616)
    }

    @Test("text that is not one JSON value is an error", arguments: ["", "{", "[1,]", "{\"a\":1} x", "{\"a\":1,\"a\":2}"])
    func rejects(text: String) {
        #expect(throws: JSONError.self) { try JSONTree.parse(Array(text.utf8)) }
    }

    @Test("encode writes compact JSON with keys in byte order, strings as CanonicalWriter escapes them")
    func encodes() throws {
        let record: [String: Any] = [
            "vector": ["b": "2", "a": "1"], "url": "ssh://host/x", "n": 3, "half": 0.5, "whole": 2.0, "ok": true,
            "none": JSONTree.null, "list": ["x\"", 1],
        ]
        let text = String(decoding: try #require(JSONTree.encode(record)), as: UTF8.self)
        #expect(
            text
                == #"{"half":0.5,"list":["x\"",1],"n":3,"none":null,"ok":true,"url":"ssh://host/x","#
                + #""vector":{"a":"1","b":"2"},"whole":2}"#)
        #expect(JSONTree.encode(Double.nan) == nil)
        #expect(JSONTree.encode(["a": Character("x")]) == nil)
    }

    @Test("what encode writes parses back to the same values")
    func roundTrip() throws {
        let text = Array(#"{"a":[1,-2.25,"é\u0001",null,false],"b":{"c":9007199254740993}}"#.utf8)
        let again = try #require(JSONTree.encode(try JSONTree.parse(text)))
        #expect(try JSONBytes(parsing: again) == JSONBytes(parsing: text))
    }
}
