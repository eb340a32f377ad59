import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// A received event's bytes are kept as its payload only when they are exactly what the
/// encoder would write for it; any other form is taken and stored encoded again.
@Suite("Received events kept as they came")
struct ReceivedPayloadTests {
    @Test("the canonical payload of each kind of event is recognised as one")
    func canonicalPayloadsAreKept() throws {
        var generator = SeededGenerator(seed: 41)
        for _ in 0..<400 {
            let event = Self.randomEvent(using: &generator)
            let payload = EventCodec.encodeStored(event, includeID: false)
            var isPayload = false
            let decoded = try EventCodec.decodeStored(payload, id: event.id, isPayload: &isPayload)
            #expect(decoded == event)
            #expect(isPayload, "not recognised: \(String(decoding: payload, as: UTF8.self))")
        }
    }

    @Test(
        "bytes are taken as the payload if and only if they are the canonical encoding of what they decode to",
        arguments: [UInt64(1), 2, 3, 4])
    func recognisedExactlyWhenCanonical(seed: UInt64) throws {
        var generator = SeededGenerator(seed: seed)
        var decodedAltered = 0
        for _ in 0..<1500 {
            let event = Self.randomEvent(using: &generator)
            let canonical = EventCodec.encodeStored(event, includeID: false)
            let mutation = Self.mutations.randomElement(using: &generator)!
            let bytes = mutation.apply(canonical, event, &generator)
            var isPayload = false
            guard let decoded = try? EventCodec.decodeStored(bytes, id: event.id, isPayload: &isPayload) else {
                continue
            }
            let encoded = EventCodec.encodeStored(decoded, includeID: false)
            #expect(
                isPayload == (bytes == encoded),
                "\(mutation.name): \(String(decoding: bytes, as: UTF8.self)) against \(String(decoding: encoded, as: UTF8.self))"
            )
            if bytes != canonical { decodedAltered += 1 }
        }
        // The mutations must reach the decoder, or the property says nothing.
        #expect(decodedAltered > 300)
    }

    @Test("a peer's event in another form is stored in the canonical form; the canonical form is stored as it came")
    func ingestStoresTheCanonicalForm() throws {
        let store = try TempStore()
        let origin = ULID("01JD00000000000000000N0DE1")!
        let first = ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TR")!
        let second = ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TS")!
        let canonical = Array(
            #"{"by":"tech-0","entity":"job/1","fields":{"a":1,"b":"x"},"kind":"edit","origin":"01JD00000000000000000N0DE1"}"#
                .utf8)
        let loose = Array(
            #"{ "origin":"01jd00000000000000000n0de1","kind":"status","status":"d\u006fne","entity":"job/1","base":["01JD3Q8R5N8X6ZK2W7Y4V9B3TR","01JD3Q8R5N8X6ZK2W7Y4V9B3TR"] }"#
                .utf8)
        let received = store.log.predecode([
            ReplicatedEvent(id: first, json: canonical), ReplicatedEvent(id: second, json: loose),
        ])
        let result = try store.log.ingest(received, from: "peer")
        #expect(result.ingested == [first, second])
        let held = try store.log.environment.read { txn throws in
            (try store.log.storedPayload(of: first, txn: txn), try store.log.storedPayload(of: second, txn: txn))
        }
        #expect(held.0 == canonical)
        #expect(
            held.1.map { String(decoding: $0, as: UTF8.self) }
                == #"{"base":["01JD3Q8R5N8X6ZK2W7Y4V9B3TR"],"entity":"job/1","kind":"status","origin":"01JD00000000000000000N0DE1","status":"done"}"#
        )
        #expect(try store.log.versionVector()[origin] == second)
    }

    // MARK: - Events and their mutations

    /// Texts for any string: a field's value, a set's element.
    static let texts = plainTexts + ["line\nbreak", "tab\there", "bell\u{07}", "vt\u{0B}", "del\u{7F}"]
    /// Texts without control characters, for a status, `by`, `key` and `reason`.
    static let plainTexts = [
        "plain", "Ben Nakamura", "Zürich", "say \"hi\"", "back\\slash", "slash/ed", "", "日本", "emoji 🚚",
    ]

    static func randomID(using generator: inout SeededGenerator) -> ULID {
        ULID(
            high: UInt64.random(in: 1...(1 << 40), using: &generator), low: UInt64.random(in: 0...9, using: &generator))
    }

    static func randomIDs(using generator: inout SeededGenerator) -> [ULID] {
        Set((0..<Int.random(in: 0...3, using: &generator)).map { _ in randomID(using: &generator) }).sorted()
    }

    static func randomValue(using generator: inout SeededGenerator, depth: Int = 0) -> JSONBytes {
        let choices = depth > 1 ? 4 : 6
        switch Int.random(in: 0..<choices, using: &generator) {
        case 0: return .string(texts.randomElement(using: &generator)!)
        case 1:
            return try! JSONBytes(parsing: ["0", "-12", "3.25", "1e5", "-0.5E-3"].randomElement(using: &generator)!)
        case 2: return try! JSONBytes(parsing: ["true", "false", "null"].randomElement(using: &generator)!)
        case 3:
            return .string(texts.randomElement(using: &generator)! + "-\(Int.random(in: 0...99, using: &generator))")
        case 4:
            let items = (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                String(decoding: randomValue(using: &generator, depth: depth + 1).bytes, as: UTF8.self)
            }
            return try! JSONBytes(parsing: "[" + items.joined(separator: ",") + "]")
        default:
            let keys = Set(
                (0..<Int.random(in: 0...3, using: &generator)).map { _ in
                    ["a", "b", "zz", "é", "key\\n", "A"].randomElement(using: &generator)!
                })
            let members = keys.map {
                "\"\($0)\":" + String(decoding: randomValue(using: &generator, depth: depth + 1).bytes, as: UTF8.self)
            }
            return try! JSONBytes(parsing: "{" + members.joined(separator: ",") + "}")
        }
    }

    static func randomEvent(using generator: inout SeededGenerator) -> Event {
        let names = ["address", "customer", "gate_code", "notes", "phone", "priority", "x.y", "_z"]
        let body: EventBody
        switch Int.random(in: 0..<9, using: &generator) {
        case 0:
            let fields = Set(
                (0..<Int.random(in: 1...5, using: &generator)).map { _ in
                    names.randomElement(using: &generator)!
                }
            ).sorted().map { FieldChange(name: $0, value: randomValue(using: &generator)) }
            let base = fields.compactMap { field -> FieldBase? in
                let heads = randomIDs(using: &generator)
                return heads.isEmpty ? nil : FieldBase(field: field.name, heads: heads)
            }
            body = .edit(fields: fields, base: base)
        case 1: body = .status(plainTexts.randomElement(using: &generator)! + "s", base: randomIDs(using: &generator))
        case 2: body = .propose("closed", base: randomIDs(using: &generator))
        case 3:
            body = .decide(
                proposal: randomID(using: &generator), accept: Bool.random(using: &generator),
                reason: Bool.random(using: &generator) ? plainTexts.randomElement(using: &generator)! : nil)
        case 4: body = .add(set: "parts", element: randomValue(using: &generator))
        case 5:
            body = .remove(
                set: "tags.x", element: randomValue(using: &generator), observed: randomIDs(using: &generator))
        case 6: body = .delete
        case 7: body = .restore(base: randomIDs(using: &generator))
        default:
            body = .incr(
                counter: "parts_used",
                amount: [0, 1, -1, Int64.max, Int64.min, Int64.random(in: -1000...1000, using: &generator)]
                    .randomElement(using: &generator)!)
        }
        let at: JSONBytes? =
            switch Int.random(in: 0..<3, using: &generator) {
            case 0: nil
            case 1: .string("2026-12-07T05:00:00Z")
            default: try! JSONBytes(parsing: "1765083600000")
            }
        return Event(
            id: randomID(using: &generator), origin: randomID(using: &generator),
            entity: EntityKey(
                validated: Array(["job/1", "job/é", "site/a\\\"b", "x/🚚"].randomElement(using: &generator)!.utf8)),
            body: body, key: Bool.random(using: &generator) ? plainTexts.randomElement(using: &generator)! + "k" : nil,
            by: Bool.random(using: &generator) ? plainTexts.randomElement(using: &generator)! : nil, at: at)
    }

    struct Mutation: Sendable {
        let name: String
        let apply: @Sendable ([UInt8], Event, inout SeededGenerator) -> [UInt8]
    }

    /// The bytes outside strings that are structural (`{ } [ ] : ,`), each with the depth it
    /// stands at: an object's or array's brackets at the depth outside it.
    static func structure(_ bytes: [UInt8]) -> [(offset: Int, depth: Int)] {
        var found: [(offset: Int, depth: Int)] = []
        var depth = 0
        var inString = false
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if inString {
                if byte == UInt8(ascii: "\\") { index += 1 } else if byte == UInt8(ascii: "\"") { inString = false }
            } else if byte == UInt8(ascii: "\"") {
                inString = true
            } else if Array("{}[]:,".utf8).contains(byte) {
                if byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") { depth -= 1 }
                found.append((index, depth))
                if byte == UInt8(ascii: "{") || byte == UInt8(ascii: "[") { depth += 1 }
            }
            index += 1
        }
        return found
    }

    static func structuralOffsets(_ bytes: [UInt8]) -> [Int] { structure(bytes).map(\.offset) }

    /// The top-level members of an object's bytes, each as its own bytes: what lies between
    /// its commas, and its braces.
    static func members(_ bytes: [UInt8]) -> [[UInt8]] {
        var parts: [[UInt8]] = []
        var start = 1
        for (offset, depth) in structure(bytes)
        where (depth == 1 && bytes[offset] == UInt8(ascii: ",")) || (depth == 0 && offset > 0) {
            parts.append(Array(bytes[start..<offset]))
            start = offset + 1
        }
        return parts.filter { !$0.isEmpty }
    }

    static func object(_ members: [[UInt8]]) -> [UInt8] {
        [UInt8(ascii: "{")] + Array(members.joined(separator: [UInt8(ascii: ",")])) + [UInt8(ascii: "}")]
    }

    static func replacingFirst(_ bytes: [UInt8], _ old: String, _ new: String) -> [UInt8] {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let range = text.range(of: old) else { return bytes }
        return Array(text.replacingCharacters(in: range, with: new).utf8)
    }

    static let mutations: [Mutation] = [
        Mutation(name: "none") { bytes, _, _ in bytes },
        Mutation(name: "whitespace") { bytes, _, generator in
            var out = bytes
            let offsets = structuralOffsets(bytes)
            let at = offsets.randomElement(using: &generator)! + (Bool.random(using: &generator) ? 1 : 0)
            out.insert([0x20, 0x0A, 0x09, 0x0D].randomElement(using: &generator)!, at: at)
            return out
        },
        Mutation(name: "members swapped") { bytes, _, generator in
            var parts = members(bytes)
            guard parts.count > 1 else { return bytes }
            let index = Int.random(in: 0..<(parts.count - 1), using: &generator)
            parts.swapAt(index, index + 1)
            return object(parts)
        },
        Mutation(name: "nested members reversed") { bytes, _, _ in
            // The first object inside the event with two members or more, its members reversed.
            for part in members(bytes) {
                guard let colon = part.firstIndex(of: UInt8(ascii: ":")), part[colon + 1] == UInt8(ascii: "{") else {
                    continue
                }
                let inner = Array(part[(colon + 1)...])
                let innerMembers = members(inner)
                guard innerMembers.count > 1 else { continue }
                let replaced = Array(part[...colon]) + object(innerMembers.reversed())
                return object(members(bytes).map { $0 == part ? replaced : $0 })
            }
            return bytes
        },
        Mutation(name: "id in lower case") { bytes, _, _ in
            let text = String(decoding: bytes, as: UTF8.self)
            guard let match = text.firstMatch(of: /"[0-7][0-9A-Z]{25}"/) else { return bytes }
            return Array(text.replacingCharacters(in: match.range, with: text[match.range].lowercased()).utf8)
        },
        Mutation(name: "id repeated") { bytes, _, _ in
            let text = String(decoding: bytes, as: UTF8.self)
            guard let match = text.firstMatch(of: /\["[0-7][0-9A-Z]{25}"/) else { return bytes }
            let id = text[match.range].dropFirst()
            return Array(text.replacingCharacters(in: match.range, with: "[\(id),\(id)").utf8)
        },
        Mutation(name: "ids reversed") { bytes, _, _ in
            let text = String(decoding: bytes, as: UTF8.self)
            guard let match = text.firstMatch(of: /\[("[0-7][0-9A-Z]{25}",?)+\]/) else { return bytes }
            let ids = text[match.range].dropFirst().dropLast().split(separator: ",")
            return Array(
                text.replacingCharacters(in: match.range, with: "[" + ids.reversed().joined(separator: ",") + "]").utf8)
        },
        Mutation(name: "empty list") { bytes, _, generator in
            let member = [#""base":[]"#, #""observed":[]"#, #""base":{}"#].randomElement(using: &generator)!
            var parts = members(bytes)
            parts.append(Array(member.utf8))
            parts.sort { a, b in a.lexicographicallyPrecedes(b) }
            return object(parts)
        },
        Mutation(name: "empty heads") { bytes, _, _ in
            replacingFirst(bytes, #""base":{"#, #""base":{"_":[],"#)
        },
        Mutation(name: "escape of a letter") { bytes, _, _ in replacingFirst(bytes, "e", "\\u0065") },
        Mutation(name: "escaped slash") { bytes, _, _ in replacingFirst(bytes, "/", "\\/") },
        Mutation(name: "escape in upper-case hex") { bytes, _, _ in replacingFirst(bytes, "\\u000b", "\\u000B") },
        Mutation(name: "escape of a control character without a short form, as it is") { bytes, _, _ in
            replacingFirst(bytes, "\\u0007", "\\u0007")
        },
        Mutation(name: "long escape of a newline") { bytes, _, _ in replacingFirst(bytes, "\\n", "\\u000a") },
        Mutation(name: "surrogate pair") { bytes, _, _ in replacingFirst(bytes, "🚚", "\\ud83d\\ude9a") },
        Mutation(name: "negative zero") { bytes, _, _ in replacingFirst(bytes, #""amount":0,"#, #""amount":-0,"#) },
        Mutation(name: "seq inside") { bytes, _, _ in object([Array(#""seq":7"#.utf8)] + members(bytes)) },
        Mutation(name: "id inside") { bytes, event, _ in
            var parts = members(bytes)
            parts.append(Array("\"id\":\"\(event.id)\"".utf8))
            parts.sort { a, b in a.lexicographicallyPrecedes(b) }
            return object(parts)
        },
    ]
}
