import TestSupport
import Testing

@testable import Projections

@Suite("Canonical JSON")
struct JSONTests {
    @Test(arguments: [
        (#" { "b" : 1 , "a" : [ true , false , null ] } "#, #"{"a":[true,false,null],"b":1}"#),
        (#""\u00e9\/\n\u0001\"""#, "\"é/\\n\\u0001\\\"\""),
        (#""\ud83d\ude00""#, "\"😀\""),
        (#"{"é":1,"e":2,"z":3,"A":4}"#, #"{"A":4,"e":2,"z":3,"é":1}"#),
        ("-0.5e+10", "-0.5e+10"),
        ("[]", "[]"),
        ("{}", "{}"),
        (#""\u007f""#, "\"\u{7f}\""),
    ])
    func canonicalForm(input: String, expected: String) throws {
        #expect(try JSONBytes(parsing: input).description == expected)
    }

    @Test(arguments: [
        "", "{", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "1e", "+1", "tru", "nul", "\"abc", "\"\\x\"",
        "\"\\ud800\"", "\"\\udc00\"", "{\"a\":1,\"a\":2}", "{a:1}", "[1] 2", "\"\u{1}\"", "NaN", "'a'",
    ])
    func rejects(input: String) {
        #expect(throws: JSONError.self) { try JSONBytes(parsing: input) }
    }

    /// Keys are compared as decoded bytes in place for the first 16 plain ones, in a set
    /// past them or once a key had escapes or non-ASCII text: each way finds a duplicate.
    @Test("duplicate keys are found however they are written and wherever they fall")
    func duplicateKeys() {
        let many = (0..<20).map { "\"k\($0)\":\($0)" }
        let accepted = [
            #"{"ab":1,"ba":2,"a":3,"b":4}"#, #"{"é":1,"e":2}"#, #"{"\u0061":1,"b":2}"#,
            "{" + many.joined(separator: ",") + "}",
        ]
        let rejected = [
            #"{"a":1,"b":2,"a":3}"#, #"{"a":1,"\u0061":2}"#, #"{"\u0061":1,"a":2}"#, #"{"é":1,"x":2,"é":3}"#,
            #"{"\n":1,"x":2,"x":3}"#,
            "{" + (many + [#""k3":0"#]).joined(separator: ",") + "}",
            "{" + (many + [#""k19":0"#]).joined(separator: ",") + "}",
            "{" + (many.prefix(15) + [#""k14":0"#]).joined(separator: ",") + "}",
            "{" + (many.prefix(16) + [#""k\u0030":0"#]).joined(separator: ",") + "}",
        ]
        for text in accepted {
            #expect(throws: Never.self, "\(text)") { try JSONBytes(parsing: text) }
        }
        for text in rejected {
            #expect("\(text)") { try JSONBytes(parsing: text) } throws: { "\($0)".contains("duplicate key") }
        }
    }

    /// What skipping a value decides, and where it stops or fails, is what reading it
    /// canonically decides: valid texts, the rejected ones above, and random corruptions of
    /// a request's params.
    @Test("skipValue accepts, stops and fails exactly where canonicalValue does", arguments: 1...4)
    func skipAgreesWithCanonical(seed: UInt64) {
        func outcome(_ bytes: [UInt8], skip: Bool) -> String {
            var scanner = JSONScanner(bytes)
            do {
                if skip {
                    try scanner.skipValue()
                } else {
                    var sink: [UInt8] = []
                    try scanner.canonicalValue(into: &sink)
                }
                return "ok at \(scanner.offset)"
            } catch {
                return "\(error)"
            }
        }
        var texts: [[UInt8]] = [
            #" {"entity":"job/01KB76YV004TFF59TDWH9EDD1R","sync":true} , 1"#,
            #"{"a":{"b":[1,2.5e3,"é\n",null,false]}}"#,
            #""\ud83d\ude00""#, "-0", String(repeating: "[", count: 65) + String(repeating: "]", count: 65),
            #"{"a":1,"a":2}"#, "[1,]", "\"\u{1}\"", "tru", "01",
        ].map { Array($0.utf8) }
        texts.append([0x22, 0xFF, 0x22])
        var rng = SeededGenerator(seed: seed)
        let alphabet = Array(#"{}[]",:\u0aé1-.eE tfn"#.utf8) + [0xFF, 0x01]
        let base = Array(#"{"entity":"job/x","params":{"a":[1,{"b":"c\"d"}],"é":null},"n":-1.5e2,"t":true}"#.utf8)
        for _ in 0..<400 {
            var text = base
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                let at = Int.random(in: 0..<text.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0: text[at] = alphabet[Int.random(in: 0..<alphabet.count, using: &rng)]
                case 1: text.insert(alphabet[Int.random(in: 0..<alphabet.count, using: &rng)], at: at)
                default: text.remove(at: at)
                }
            }
            texts.append(text)
        }
        for text in texts {
            #expect(outcome(text, skip: true) == outcome(text, skip: false), "\(String(decoding: text, as: UTF8.self))")
        }
    }

    @Test func rejectsInvalidUTF8() {
        for bytes: [UInt8] in [
            [0x22, 0xFF, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xE2, 0x82, 0x22],
        ] {
            #expect(throws: JSONError.self) { try JSONBytes(parsing: bytes) }
        }
    }

    @Test func boundsNesting() throws {
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(throws: JSONError.self) { try JSONBytes(parsing: deep) }
        let fine = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        _ = try JSONBytes(parsing: fine)
    }

    @Test func integersAsDecimal() {
        let values = [0, 1, 9, 10, 99, 100, -1, -10, 1_000_000_007, Int.max, Int.min]
        for value in values {
            var out: [UInt8] = [UInt8(ascii: ":")]
            CanonicalWriter.appendInteger(value, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == ":\(value)")
        }
    }

    @Test func errorsSayWhere() {
        do {
            _ = try JSONBytes(parsing: "[1, x]")
            Issue.record("expected an error")
        } catch {
            #expect(error.offset == 4)
            #expect(error.description.contains("'x'"))
        }
    }
}

@Suite("Hashes and digests")
struct DigestTests {
    @Test func xxh64ReferenceValues() {
        #expect(XXH64.hash([]) == 0xEF46_DB37_51D8_E999)
        #expect(XXH64.hash(Array("abc".utf8)) == 0x44BC_2CF5_AD77_0999)
        #expect(XXH64.hash(Array("Nobody inspects the spammish repetition".utf8)) == 0xFBCE_A83C_8A37_8BF1)
    }

    /// A state's two hashes, past one 32-byte stripe and with a tail of every length class,
    /// against the reference implementation's (python-xxhash) under the state seeds.
    @Test func stateHashReferenceValues() {
        let bytes = (0..<256).map { UInt8($0) }
        let expected: [(Int, UInt64, UInt64)] = [
            (32, 0x21AC_19D6_D4AC_69FE, 0x0B9A_3DC7_277B_AF29),
            (100, 0xB7FF_A464_4F0B_BF6E, 0x7E7D_3B48_8936_CE0A),
            (255, 0x492C_2E88_F029_1852, 0xA66C_C8EC_8840_8839),
        ]
        for (length, high, low) in expected {
            #expect(StateHash(hashing: Array(bytes[..<length])) == StateHash(high: high, low: low), "\(length) bytes")
        }
    }

    /// Both seeds in one pass give what two passes give, at every length around the
    /// stripe's 32 bytes and the tail's 8 and 4.
    @Test func twoSeedsInOnePass() {
        var generator = SystemRandomNumberGenerator()
        for length in 0..<200 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let seeds = (
                UInt64.random(in: 0...UInt64.max, using: &generator),
                UInt64.random(in: 0...UInt64.max, using: &generator)
            )
            let pair = XXH64.hash(bytes, seeds: seeds.0, seeds.1)
            #expect(pair.0 == XXH64.hash(bytes, seed: seeds.0), "\(length) bytes")
            #expect(pair.1 == XXH64.hash(bytes, seed: seeds.1), "\(length) bytes")
        }
    }

    @Test func digestIgnoresOrderAndUndoes() {
        let hashes = (0..<10).map { StateHash(hashing: Array("state \($0)".utf8)) }
        var forward = StateDigest()
        var backward = StateDigest()
        for hash in hashes { forward.add(hash) }
        for hash in hashes.reversed() { backward.add(hash) }
        #expect(forward == backward)
        forward.remove(hashes[3])
        forward.add(hashes[3])
        #expect(forward == backward)
        #expect(StateDigest(bytes: forward.bytes) == forward)
        #expect(forward.description.count == 32)
    }
}
