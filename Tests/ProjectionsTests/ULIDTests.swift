import TestSupport
import Testing

@testable import Projections

@Suite("ULID")
struct ULIDTests {
    @Test func knownText() {
        #expect(ULID.zero.description == "00000000000000000000000000")
        #expect(ULID.max.description == "7ZZZZZZZZZZZZZZZZZZZZZZZZZ")
        let id = ULID(timestamp: 1_469_918_176_385, random: (0, 0))
        #expect(id.description.hasPrefix("01ARYZ6S41"))
        #expect(id.timestamp == 1_469_918_176_385)
    }

    @Test("text and bytes round-trip and keep order", arguments: 1...20)
    func roundTripAndOrder(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        var ids: [ULID] = (0..<200).map { _ in
            ULID(
                timestamp: UInt64.random(in: 0...ULID.maxTimestamp, using: &rng),
                random: (UInt16.random(in: 0...UInt16.max, using: &rng), rng.next()))
        }
        ids.append(contentsOf: [.zero, .max])
        for id in ids {
            #expect(try #require(ULID(id.description)) == id)
            #expect(try #require(ULID(id.description.lowercased())) == id)
            #expect(try #require(ULID(bytes: id.bytes)) == id)
            var json: [UInt8] = [UInt8(ascii: "[")]
            id.appendJSON(to: &json)
            #expect(String(decoding: json, as: UTF8.self) == "[\"\(id)\"")
        }
        let byValue = ids.sorted()
        #expect(ids.sorted { $0.description < $1.description } == byValue)
        #expect(ids.sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) } == byValue)
    }

    @Test(arguments: [
        "", "0000000000000000000000000", "000000000000000000000000000", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "0000000000000000000000000I", "0000000000000000000000000L", "0000000000000000000000000O",
        "0000000000000000000000000U", "000000000000000000000000-0", "0000000000000000000000000é",
    ])
    func rejects(text: String) {
        #expect(ULID(text) == nil)
        #expect(ULID.problem(with: Array(text.utf8)) != nil)
    }

    @Test func increment() throws {
        let id = ULID(high: 5, low: .max)
        #expect(try #require(id.incremented()) == ULID(high: 6, low: 0))
        #expect(ULID(high: 0xFFFF, low: .max).incremented() == nil)
        #expect(ULID(high: 1 << 16 | 0xFFFF, low: .max).incremented() == nil)
    }
}

@Test func symbolArithmeticMatchesTheAlphabet() {
    for value in 0..<32 {
        #expect(ULID.symbol(UInt8(value)) == ULID.alphabet[value])
    }
}
