import Projections
import TestSupport
import Testing

@testable import EventStore

@Suite("Event codec")
struct CodecTests {
    func decode(_ text: String) throws(EventStoreError) -> InputEvent {
        try EventCodec.decodeInput(Array(text.utf8))
    }

    @Test func specExamplesDecode() throws {
        let e = "job/01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"
        #expect(try decode(#"{"entity":"\#(e)","kind":"status","status":"en_route"}"#).change == .status("en_route"))
        let edit = try decode(#"{"entity":"\#(e)","kind":"edit","fields":{"phone":null,"address":"12 Main St"}}"#)
        #expect(
            edit.change
                == .edit([
                    FieldChange(name: "address", value: .string("12 Main St")),
                    FieldChange(name: "phone", value: .null),
                ]))
        #expect(
            try decode(#"{"entity":"\#(e)","kind":"add","set":"parts","element":"valve-3"}"#).change
                == .add(set: "parts", element: .string("valve-3")))
        #expect(
            try decode(#"{"entity":"\#(e)","kind":"remove","set":"parts","element":{"b":1,"a":2}}"#).change
                == .remove(set: "parts", element: try JSONBytes(parsing: #"{"a":2,"b":1}"#)))
        #expect(try decode(#"{"entity":"\#(e)","kind":"delete"}"#).change == .delete)
        let restore = try decode(
            #"{"entity":"\#(e)","kind":"restore","key":"k-1","by":"tech-0","at":"2026-11-29T10:00:00Z","if_match":1042}"#
        )
        #expect(restore.change == .restore)
        #expect(restore.key == "k-1")
        #expect(restore.by == "tech-0")
        #expect(restore.ifMatch == 1042)
        #expect(restore.entity.type == "job")
    }

    @Test func incrDecodesAndEncodesInKeyOrder() throws {
        #expect(
            try decode(#"{"entity":"job/42","kind":"incr","counter":"parts_used","amount":2}"#).change
                == .incr(counter: "parts_used", amount: 2))
        #expect(
            try decode(#"{"entity":"job/42","kind":"incr","counter":"n","amount":-9223372036854775808}"#).change
                == .incr(counter: "n", amount: Int64.min))
        let event = Event(
            id: ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TR")!, origin: ULID("01JD00000000000000000N0DE1")!,
            entity: EntityKey(validated: Array("job/42".utf8)), body: .incr(counter: "parts_used", amount: -2),
            key: "k", by: "tech-0")
        let text = String(decoding: EventCodec.encodeStored(event), as: UTF8.self)
        #expect(
            text
                == #"{"amount":-2,"by":"tech-0","counter":"parts_used","entity":"job/42","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","key":"k","kind":"incr","origin":"01JD00000000000000000N0DE1"}"#
        )
        let withoutID = EventCodec.encodeStored(event, includeID: false)
        // Where `log` and `watch` splice the id into the stored payload.
        let at = try #require(EventCodec.idPosition(inPayload: withoutID, hasKey: true))
        var encoded: [UInt8] = []
        #expect(EventCodec.encodeStored(event, includeID: false, into: &encoded) == at)
        let spliced =
            Array(withoutID[..<at]) + Array(#""id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","#.utf8) + Array(withoutID[at...])
        #expect(String(decoding: spliced, as: UTF8.self) == text)
        for (line, message) in [
            (#"{"entity":"job/1","kind":"incr","amount":1}"#, "needs \"counter\""),
            (#"{"entity":"job/1","kind":"incr","counter":"n"}"#, "needs \"amount\""),
            (#"{"entity":"job/1","kind":"incr","counter":"n","amount":1.5}"#, "must be an integer"),
            (#"{"entity":"job/1","kind":"incr","counter":"n","amount":"1"}"#, "must be an integer"),
            (#"{"entity":"job/1","kind":"incr","counter":"n","amount":9223372036854775808}"#, "must be an integer"),
            (#"{"entity":"job/1","kind":"incr","counter":"n","amount":1e3}"#, "must be an integer"),
            (#"{"entity":"job/1","kind":"incr","counter":"9n","amount":1}"#, "counter name"),
            (#"{"entity":"job/1","kind":"incr","counter":"n","amount":1,"set":"s"}"#, "\"set\" is not allowed"),
            (#"{"entity":"job/1","kind":"edit","fields":{"a":1},"amount":1}"#, "\"amount\" is not allowed"),
            (#"{"entity":"job/1","kind":"add","set":"s","element":1,"counter":"n"}"#, "\"counter\" is not allowed"),
        ] {
            #expect {
                try decode(line)
            } throws: { error in
                (error as? EventStoreError)?.message.contains(message) ?? false
            }
        }
    }

    @Test("resolve is an input flag of an edit: decoded, listed among the members, never stored")
    func resolveFlag() throws {
        let edit = #"{"entity":"job/1","kind":"edit","fields":{"a":1}"#
        #expect(try decode(edit + #","resolve":true}"#).resolve)
        #expect(try !decode(edit + #","resolve":false}"#).resolve)
        #expect(try !decode(edit + "}").resolve)
        do {
            _ = try decode(edit + #","colour":1}"#)
            Issue.record("an unknown member was accepted")
        } catch {
            #expect(error.message.contains("if_match, resolve)"), "\(error.message)")
        }
        // The stored form has no such member: a peer cannot send it.
        let stored =
            #"{"entity":"job/1","fields":{"a":1},"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","kind":"edit","origin":"01JD00000000000000000N0DE1","resolve":true}"#
        #expect(throws: EventStoreError.self) { try EventCodec.decodeStored(Array(stored.utf8)) }
    }

    @Test func entityIDsMayHoldSlashesAndUnicode() throws {
        #expect(
            try decode(#"{"entity":"site/north/pump 3 — é","kind":"delete"}"#).entity.description
                == "site/north/pump 3 — é")
        let longest = String(repeating: "x", count: 200)
        #expect(try decode(#"{"entity":"a/\#(longest)","kind":"delete"}"#).entity.bytes.count == 202)
        let longestType = String(repeating: "t", count: 64)
        _ = try decode(#"{"entity":"\#(longestType)/1","kind":"delete"}"#)
    }

    @Test(
        "every validation error says what is wrong",
        arguments: [
            ("[]", "must be a JSON object"),
            (#"{"entity":"job/1","kind":"delete""#, "invalid JSON"),
            (#"{"kind":"delete"}"#, "\"entity\" is required"),
            (#"{"entity":7,"kind":"delete"}"#, "\"entity\" must be a string"),
            (#"{"entity":"job42","kind":"delete"}"#, "has no '/'"),
            (#"{"entity":"Job/1","kind":"delete"}"#, "entity type \"Job\""),
            (#"{"entity":"1job/1","kind":"delete"}"#, "entity type"),
            (#"{"entity":"/1","kind":"delete"}"#, "entity type"),
            (#"{"entity":"\#(String(repeating: "t", count: 65))/1","kind":"delete"}"#, "entity type"),
            (#"{"entity":"job/","kind":"delete"}"#, "empty ID"),
            (#"{"entity":"job/\#(String(repeating: "x", count: 201))","kind":"delete"}"#, "at most 200"),
            (#"{"entity":"job/a\u0001","kind":"delete"}"#, "control character U+0001"),
            (#"{"entity":"job/a\u007f","kind":"delete"}"#, "control character U+007F"),
            (#"{"entity":"job/a\u0085","kind":"delete"}"#, "control character U+0085"),
            (#"{"entity":"job/1"}"#, "\"kind\" is required"),
            (#"{"entity":"job/1","kind":"rename"}"#, "kind \"rename\" is not one of"),
            (#"{"entity":"job/1","kind":"status"}"#, "needs \"status\""),
            (#"{"entity":"job/1","kind":"status","status":""}"#, "\"status\" must not be empty"),
            (#"{"entity":"job/1","kind":"status","status":3}"#, "\"status\" must be a string"),
            (#"{"entity":"job/1","kind":"status","status":"\#(String(repeating: "s", count: 129))"}"#, "at most 128"),
            (#"{"entity":"job/1","kind":"status","status":"a\nb"}"#, "control character"),
            (#"{"entity":"job/1","kind":"edit"}"#, "needs \"fields\""),
            (#"{"entity":"job/1","kind":"edit","fields":[]}"#, "\"fields\" must be an object"),
            (#"{"entity":"job/1","kind":"edit","fields":{}}"#, "at least one field"),
            (#"{"entity":"job/1","kind":"edit","fields":{"1st":1}}"#, "field name \"1st\""),
            (#"{"entity":"job/1","kind":"edit","fields":{"a b":1}}"#, "field name \"a b\""),
            (#"{"entity":"job/1","kind":"edit","fields":{"\#(String(repeating: "f", count: 129))":1}}"#, "field name"),
            (#"{"entity":"job/1","kind":"edit","fields":{"a":1,"a":2}}"#, "duplicate key"),
            (#"{"entity":"job/1","kind":"add","element":1}"#, "needs \"set\""),
            (#"{"entity":"job/1","kind":"add","set":"9x","element":1}"#, "set name"),
            (#"{"entity":"job/1","kind":"remove","set":"parts"}"#, "needs \"element\""),
            (
                #"{"entity":"job/1","kind":"edit","fields":{"a":1},"status":"x"}"#,
                "\"status\" is not allowed on a \"edit\" event"
            ),
            (#"{"entity":"job/1","kind":"delete","set":"parts"}"#, "\"set\" is not allowed"),
            (#"{"entity":"job/1","kind":"delete","key":""}"#, "\"key\" must not be empty"),
            (#"{"entity":"job/1","kind":"delete","key":"\#(String(repeating: "k", count: 129))"}"#, "at most 128"),
            (#"{"entity":"job/1","kind":"delete","key":5}"#, "\"key\" must be a string"),
            (#"{"entity":"job/1","kind":"delete","by":"\#(String(repeating: "b", count: 129))"}"#, "at most 128"),
            (#"{"entity":"job/1","kind":"delete","at":{"t":1}}"#, "\"at\" must be a string or a number"),
            (#"{"entity":"job/1","kind":"edit","fields":{"a":1},"resolve":1}"#, "\"resolve\" must be true or false"),
            (
                #"{"entity":"job/1","kind":"edit","fields":{"a":1},"resolve":"yes"}"#,
                "\"resolve\" must be true or false"
            ),
            (
                #"{"entity":"job/1","kind":"status","status":"x","resolve":true}"#,
                "\"resolve\" is only allowed on an \"edit\" event, not on a \"status\" event"
            ),
            (#"{"entity":"job/1","kind":"delete","resolve":false}"#, "\"resolve\" is only allowed on an \"edit\""),
            (#"{"entity":"job/1","kind":"delete","if_match":"nope"}"#, "\"if_match\" takes the entity's rev"),
            (#"{"entity":"job/1","kind":"delete","if_match":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#, "pass \"rev\" instead"),
            (#"{"entity":"job/1","kind":"delete","if_match":0}"#, "\"if_match\" must be the entity's rev"),
            (#"{"entity":"job/1","kind":"delete","if_match":-3}"#, "\"if_match\" must be the entity's rev"),
            (#"{"entity":"job/1","kind":"delete","if_match":1.5}"#, "\"if_match\" must be the entity's rev"),
            (#"{"entity":"job/1","kind":"delete","colour":"red"}"#, "unknown member \"colour\""),
            (#"{"entity":"job/1","kind":"delete","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#, "unknown member \"id\""),
            (#"{"entity":"job/1","kind":"delete"} x"#, "invalid JSON"),
        ])
    func validation(input: String, message: String) {
        do {
            _ = try decode(input)
            Issue.record("accepted: \(input)")
        } catch {
            #expect(error.reason == .invalidEvent)
            #expect(error.message.contains(message), "\(error.message)")
        }
    }

    @Test("a key names a member exactly when it is that member's name, byte for byte")
    func memberNames() {
        let names = EventCodec.Member.allCases.map { ($0, Array($0.rawValue.utf8)) }
        for (member, name) in names { #expect(EventCodec.Member.named(name[...]) == member) }
        var generator = SeededGenerator(seed: 9)
        for _ in 0..<20_000 {
            var key = names.randomElement(using: &generator)!.1
            switch Int.random(in: 0..<6, using: &generator) {
            case 0: key.insert(0, at: 0)
            case 1: key.append(UInt8.random(in: 0...255, using: &generator))
            case 2: key.removeLast()
            case 3: key[Int.random(in: 0..<key.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            case 4:
                key = (0..<Int.random(in: 0...10, using: &generator)).map { _ in
                    UInt8.random(in: 0...3, using: &generator)
                }
            default: key = key.map { $0 ^ 0x20 }
            }
            let expected = names.first { $0.1 == key }?.0
            #expect(EventCodec.Member.named(key[...]) == expected, "\(key)")
        }
    }

    @Test func storedFormIsCanonicalAndRoundTrips() throws {
        let base = ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TQ")!
        let event = Event(
            id: ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TR")!, origin: ULID("01JD00000000000000000N0DE1")!,
            entity: EntityKey(validated: Array("job/42".utf8)),
            body: .edit(
                fields: [
                    FieldChange(name: "address", value: .string("12 Main St")),
                    FieldChange(name: "floor", value: try JSONBytes(parsing: "3")),
                ],
                base: [FieldBase(field: "address", heads: [base])]),
            key: "k", by: "tech-0", at: .string("2026-11-29T10:00:00Z"))
        let text = String(decoding: EventCodec.encodeStored(event), as: UTF8.self)
        #expect(
            text
                == #"{"at":"2026-11-29T10:00:00Z","base":{"address":["01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"]},"by":"tech-0","entity":"job/42","fields":{"address":"12 Main St","floor":3},"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","key":"k","kind":"edit","origin":"01JD00000000000000000N0DE1"}"#
        )
        #expect(try EventCodec.decodeStored(Array(text.utf8)) == event)
        let withoutID = EventCodec.encodeStored(event, includeID: false)
        #expect(withoutID.count + EventCodec.idMemberBytes == text.utf8.count)
        #expect(try EventCodec.decodeStored(withoutID, id: event.id) == event)
        #expect(throws: EventStoreError.self) { try EventCodec.decodeStored(withoutID) }

        let kinds: [EventBody] = [
            .status("on_site", base: [base]), .add(set: "parts", element: .string("v")),
            .remove(set: "parts", element: .string("v"), observed: [base]), .delete, .restore(base: [base]),
            .status("x", base: []), .incr(counter: "parts_used", amount: -3),
            .incr(counter: "n", amount: Int64.min),
        ]
        for body in kinds {
            var copy = event
            copy.body = body
            #expect(try EventCodec.decodeStored(EventCodec.encodeStored(copy)) == copy)
        }
    }

    @Test(
        "a stored event written loosely (spaces, keys in any order, escapes, repeated ids) decodes as its canonical form"
    )
    func looseStoredFormDecodes() throws {
        let loose = #"""
            { "origin" : "01JD00000000000000000N0DE1", "kind":"edit" ,
              "base" : { "note" : [ "01JD3Q8R5N8X6ZK2W7Y4V9B3TS", "01JD3Q8R5N8X6ZK2W7Y4V9B3TQ",
                                    "01jd3q8r5n8x6zk2w7y4v9b3ts" ], "address": [] },
              "fields" : { "note" : "say \"hi\"\n", "address" : "Z\u00fcrich", "city" : "Basel", "floor" : { "b" : 1, "a" : [ true, null ] } },
              "entity" : "job\/42", "by" : "tech\u002d0", "id" : "01JD3Q8R5N8X6ZK2W7Y4V9B3TR" }
            """#
        let event = try EventCodec.decodeStored(Array(loose.utf8))
        #expect(
            String(decoding: EventCodec.encodeStored(event), as: UTF8.self)
                == #"{"base":{"note":["01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","01JD3Q8R5N8X6ZK2W7Y4V9B3TS"]},"by":"tech-0","entity":"job/42","fields":{"address":"Zürich","city":"Basel","floor":{"a":[true,null],"b":1},"note":"say \"hi\"\n"},"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","kind":"edit","origin":"01JD00000000000000000N0DE1"}"#
        )
        // Any order and repetition of a list's ids comes out sorted, each once.
        var generator = SeededGenerator(seed: 27)
        let pool = (0..<6).map { ULID(high: UInt64($0 % 3), low: UInt64.random(in: 0...3, using: &generator)) }
        for _ in 0..<200 {
            let list = (0..<Int.random(in: 0...10, using: &generator)).map { _ in pool.randomElement(using: &generator)!
            }
            let text = list.map { "\"\($0)\"" }.joined(separator: " , ")
            let json =
                #"{"base":[ "# + text
                + #" ],"entity":"job/1","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","kind":"status","origin":"01JD00000000000000000N0DE1","status":"a"}"#
            guard case .status(_, let base) = try EventCodec.decodeStored(Array(json.utf8)).body else {
                Issue.record("not a status event: \(json)")
                continue
            }
            #expect(base == Set(list).sorted())
        }
    }

    @Test(arguments: [
        (#"{"entity":"job/1","kind":"delete","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#, "needs \"id\""),
        (#"{"entity":"job/1","kind":"delete","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#, "needs \"origin\""),
        (#"{"entity":"job/1","kind":"delete","id":"x","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#, "\"id\" is not a ULID"),
        (
            #"{"entity":"job/1","kind":"status","status":"a","base":["zz"],"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#,
            "not an event id"
        ),
        (
            #"{"entity":"job/1","kind":"edit","fields":{"a":1},"base":{"b":[]},"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#,
            "does not set"
        ),
        (
            #"{"entity":"job/1","kind":"add","set":"s","element":1,"observed":[],"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#,
            "no causal context"
        ),
        (#"<html><body>Please log in</body></html>"#, "must be a JSON object"),
    ])
    func storedValidation(input: String, message: String) {
        do {
            _ = try EventCodec.decodeStored(Array(input.utf8))
            Issue.record("accepted: \(input)")
        } catch {
            #expect(error.message.contains(message), "\(error.message)")
        }
    }
}

@Suite("Hybrid clock")
struct ClockTests {
    struct Fixed: RandomNumberGenerator {
        var value: UInt64 = 0x1234
        mutating func next() -> UInt64 { value }
    }

    @Test func idsNeverGoBackwardsWhenTheWallClockDoes() throws {
        var clock = HybridClock(maxSkewMilliseconds: 3_600_000)
        var rng = Fixed()
        let day: UInt64 = 86_400_000
        let now: UInt64 = 1_764_400_000_000
        var previous = try clock.next(now: now, using: &rng)
        #expect(previous.timestamp == now)
        for wall in [now, now + 1, now - day, now - day + 5, now + 2] {
            let id = try clock.next(now: wall, using: &rng)
            #expect(id > previous)
            previous = id
        }
        // Back on the wall clock, past the last id: fresh milliseconds again.
        #expect(try clock.next(now: now + 10, using: &rng).timestamp == now + 10)
    }

    @Test func sameMillisecondIncrements() throws {
        var clock = HybridClock(maxSkewMilliseconds: 1000)
        var rng = Fixed()
        let a = try clock.next(now: 5000, using: &rng)
        let b = try clock.next(now: 5000, using: &rng)
        #expect(try b == #require(a.incremented()))
    }

    @Test func remoteIDsWithinSkewMoveTheClockButNotBeyond() throws {
        var clock = HybridClock(maxSkewMilliseconds: 3_600_000)
        var rng = Fixed()
        let now: UInt64 = 1_764_400_000_000
        let near = ULID(timestamp: now + 600_000, random: (0, 9))
        #expect(clock.observe(near, now: now) == nil)
        #expect(try clock.next(now: now, using: &rng) > near)

        var other = HybridClock(maxSkewMilliseconds: 3_600_000)
        let far = ULID(timestamp: now + 2 * 86_400_000, random: (0, 9))
        let lead = other.observe(far, now: now)
        #expect(try #require(lead) == 2 * 86_400_000)
        let local = try other.next(now: now, using: &rng)
        #expect(local.timestamp == now)
        #expect(local < far)
    }

    @Test("at the end of the ULID space the clock fails with ids_exhausted, and never goes back")
    func exhausted() throws {
        var rng = Fixed()
        // The last id of a millisecond before the last: the next is the first of the last.
        let edge = ULID(high: (ULID.maxTimestamp - 1) << 16 | 0xFFFF, low: .max)
        var clock = HybridClock(maxSkewMilliseconds: 1000, last: edge)
        let next = try clock.next(now: 0, using: &rng)
        #expect(next == ULID.lowerBound(timestamp: ULID.maxTimestamp) && next > edge)
        for wall in [0, ULID.maxTimestamp, .max] as [UInt64] {
            var atEnd = HybridClock(maxSkewMilliseconds: 1000, last: .max)
            do {
                let id = try atEnd.next(now: wall, using: &rng)
                Issue.record("made \(id) after the greatest ULID")
            } catch {
                #expect(error.reason == .idsExhausted && error.reason.rawValue == "ids_exhausted")
                #expect(error.message.contains("no event id is left"))
            }
            #expect(atEnd.last == .max)
        }
        // A wall clock past the end of ULID time reads as its last millisecond.
        var late = HybridClock(maxSkewMilliseconds: 1000)
        #expect(try late.next(now: .max, using: &rng).timestamp == ULID.maxTimestamp)
    }

    @Test("whatever it observes or skips, each id exceeds the last", arguments: [1, 2, 3, 4] as [UInt64])
    func monotonicUnderAnyInput(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let skew: UInt64 = 3_600_000
        var clock = HybridClock(maxSkewMilliseconds: skew)
        var wall: UInt64 = 1_764_400_000_000
        var previous = ULID.zero
        for _ in 0..<2000 {
            switch Int.random(in: 0..<10, using: &rng) {
            case 0: wall -= UInt64.random(in: 0...86_400_000, using: &rng)
            case 1: wall += UInt64.random(in: 0...10_000, using: &rng)
            case 2:
                let ahead = UInt64.random(in: 0...(2 * skew), using: &rng)
                let id = ULID(timestamp: wall + ahead, random: (UInt16.random(in: 0...0xFFFF, using: &rng), rng.next()))
                let lead = clock.observe(id, now: wall)
                #expect((lead != nil) == (ahead > skew))
                if lead == nil { #expect(clock.last >= id) }
            case 3:
                let taken = try #require(clock.last.incremented())
                clock.skip(past: taken)
                #expect(clock.last == taken)
            default:
                let id = try clock.next(now: wall, using: &rng)
                #expect(id > previous && id == clock.last)
                #expect(id.timestamp <= max(wall, previous.timestamp + 1))
                previous = id
            }
            previous = max(previous, clock.last)
        }
    }
}
