@testable import Daemon
import Foundation
@testable import Server
import Testing
@testable import Wire
@testable import Writer

@Suite("JSONWriter")
struct JSONWriterTests {
    @Test("members, nesting, pages and escapes make valid JSON")
    func writesValidJSON() throws {
        var out = JSONWriter()
        out.beginObject()
        out.member("s", "a \"quoted\"\n line")
        out.member("n", 42)
        out.member("b", true)
        out.member("missing", nil as String?)
        let dynamic = "dyn"
        out.key(dynamic)
        out.beginArray()
        out.int(1)
        out.raw(Array(#"{"x":[]}"#.utf8))
        out.endArray()
        out.endObject()
        let text = String(decoding: out.bytes, as: UTF8.self)
        #expect(text == #"{"s":"a \"quoted\"\n line","n":42,"b":true,"missing":null,"dyn":[1,{"x":[]}]}"#)
        _ = try JSONSerialization.jsonObject(with: Data(out.bytes))

        let page = JSONWriter.page("items", [1, 2], next: "c") { out, item in out.int(item) }
        #expect(String(decoding: page, as: UTF8.self) == #"{"items":[1,2],"next":"c"}"#)
        let last = JSONWriter.page("items", [Int](), next: nil) { out, item in out.int(item) }
        #expect(String(decoding: last, as: UTF8.self) == #"{"items":[],"next":null}"#)
    }
}
