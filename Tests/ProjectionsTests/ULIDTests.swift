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

    @Test("bytes read at an offset from an array, a slice and any collection agree; too few give nil")
    func bytesAtOffsets() throws {
        var rng = SeededGenerator(seed: 7)
        let ids = (0..<3).map { _ in
            ULID(timestamp: UInt64.random(in: 0...ULID.maxTimestamp, using: &rng), random: (1, rng.next()))
        }
        let bytes = [0xAA] + ids.flatMap(\.bytes) + [0xBB]
        for (index, id) in ids.enumerated() {
            let offset = 1 + index * 16
            #expect(ULID(bytes: bytes, at: offset) == id)
            #expect(ULID(bytes: bytes[1...], at: offset - 1) == id)
            #expect(ULID(bytes: bytes[offset..<offset + 16]) == id)
            #expect(ULID(bytes: AnyRandomAccessCollection(bytes), at: offset) == id)
        }
        #expect(ULID(bytes: bytes, at: bytes.count - 15) == nil)
        #expect(ULID(bytes: bytes[1..<16]) == nil)
        #expect(ULID(bytes: bytes, at: -1) == nil)
    }

    @Test(arguments: [
        "", "0000000000000000000000000", "000000000000000000000000000", "8ZZZZZZZZZZZZZZZZZZZZZZZZZ",
        "0000000000000000000000000I", "0000000000000000000000000L", "0000000000000000000000000O",
        "0000000000000000000000000U", "000000000000000000000000-0", "0000000000000000000000000é",
        // The first symbol past 7 (130 bits), alone or with the rest zero; a bad symbol first.
        "80000000000000000000000000", "Z0000000000000000000000000", "U0000000000000000000000000",
        "\u{7F}0000000000000000000000000", "0000000000000\u{0}000000000000",
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

@Test func symbolsAreCrockfordsAlphabet() {
    let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)
    for value in 0..<32 {
        #expect(ULID.symbols[value] == alphabet[value])
    }
}

/// The text worked out a bit at a time from the 16 bytes, two zero bits first: another way
/// than the five-bit shifts of the halves `appendText` takes.
@Test("text agrees with a reading of the bytes one bit at a time", arguments: 1...5)
func textAgreesBitByBit(seed: UInt64) {
    let alphabet = Array("0123456789ABCDEFGHJKMNPQRSTVWXYZ".utf8)
    var rng = SeededGenerator(seed: seed)
    var ids: [ULID] = (0..<200).map { _ in ULID(high: rng.next(), low: rng.next()) }
    ids.append(contentsOf: [
        .zero, .max, ULID(high: 1, low: 0), ULID(high: 0, low: 1 << 63), ULID(high: 1 << 63, low: 1),
    ])
    for id in ids {
        var bits: [Int] = [0, 0]
        for byte in id.bytes {
            for bit in 0..<8 { bits.append(Int(byte >> (7 - bit) & 1)) }
        }
        let expected = stride(from: 0, to: 130, by: 5).map { start in
            alphabet[bits[start..<start + 5].reduce(0) { $0 << 1 | $1 }]
        }
        var text: [UInt8] = []
        id.appendText(to: &text)
        #expect(text == expected)
        var json: [UInt8] = [0x20]
        id.appendJSON(to: &json)
        #expect(json == [0x20, 0x22] + expected + [0x22])
    }
}

@Suite("UTF-8 validation of stored strings")
struct ValidatedUTF8Tests {
    @Test("agrees with the standard library on random bytes, ASCII and not", arguments: 1...5)
    func agreesWithStandardLibrary(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        let pieces: [[UInt8]] = [
            Array("job/42".utf8), Array("é".utf8), Array("日本".utf8), Array("🚐".utf8), [0xFF], [0xC3], [0xE6, 0x97],
            [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0x00],
        ]
        for _ in 0..<500 {
            var bytes: [UInt8] = [0x20]
            for _ in 0..<Int.random(in: 0...6, using: &rng) {
                bytes += pieces[Int.random(in: 0..<pieces.count, using: &rng)]
            }
            let slice = bytes[1...]
            #expect(validatedUTF8(slice) == String(validating: slice, as: UTF8.self), "\(Array(slice))")
        }
        #expect(validatedUTF8(Array("on_site".utf8)[...]) == "on_site")
        #expect(validatedUTF8([0x61, 0xFF][...]) == nil)
    }
}
