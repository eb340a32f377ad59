import Testing

@testable import Daemon

/// The loop's first look at a line (`RPCSession.mentionsGet`): a line that does not hold
/// `"get"` with its quotes is never parsed there; one that does is, and the parse decides.
@Suite("A line that mentions get")
struct MentionsGetTests {
    @Test("found at the start, in the middle and at the very end; not without its quotes, cut short or in another case")
    func findsTheQuotedWordOnly() {
        let found = [
            #""get""#,
            #"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"job/1"}}"#,
            #"{"method":"list","params":{"type":"get"}}"#,
            #"x"get""#,
        ]
        for line in found { #expect(RPCSession.mentionsGet(Array(line.utf8)), "\(line)") }
        let notFound = [
            "", "\"", #""get"#, #"get""#, #""Get""#, #"{"method":"getter"}"#, #"{"method":"get_blob"}"#,
            #"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[]}}"#,
        ]
        for line in notFound { #expect(!RPCSession.mentionsGet(Array(line.utf8)), "\(line)") }
    }

    @Test("agrees with a plain search on random lines of quotes and the letters of get")
    func agreesWithAPlainSearch() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array(#""getx"#.utf8)
        let needle = Array(#""get""#.utf8)
        for _ in 0..<5_000 {
            let line = (0..<Int.random(in: 0...12, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }
            let expected =
                line.count >= needle.count
                && (0...(line.count - needle.count)).contains { Array(line[$0..<($0 + needle.count)]) == needle }
            #expect(RPCSession.mentionsGet(line) == expected, "\(String(decoding: line, as: UTF8.self))")
        }
    }
}
