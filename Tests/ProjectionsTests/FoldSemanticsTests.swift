import Testing

@testable import Projections

@Suite("Fold semantics")
struct FoldSemanticsTests {
    let a = ULID(high: 0xA, low: 0xA)
    let b = ULID(high: 0xB, low: 0xB)

    func edit(_ ms: UInt64, _ origin: ULID, _ fields: [(String, String)], base: [(String, [ULID])] = []) -> Event {
        Event(
            id: id(ms), origin: origin, entity: job,
            body: .edit(
                fields: fields.map { FieldChange(name: $0.0, value: json($0.1)) },
                base: base.map { FieldBase(field: $0.0, heads: $0.1) }))
    }

    func render(_ events: [Event]) -> String {
        String(decoding: Projection.canonicalJSON(job, events), as: UTF8.self)
    }

    @Test func emptyEntity() {
        #expect(
            render([])
                == #"{"conflicts":{"fields":{},"status":[]},"deleted":false,"entity":"job/42","events":0,"fields":{},"sets":{},"status":null,"version":null}"#
        )
    }

    @Test func countersAddUpInAnyOrderAndPastSixtyFourBits() throws {
        let incrs: [Event] = [
            Event(id: id(1), origin: a, entity: job, body: .incr(counter: "parts_used", amount: 2)),
            Event(id: id(2), origin: b, entity: job, body: .incr(counter: "parts_used", amount: -5)),
            Event(id: id(3), origin: a, entity: job, body: .incr(counter: "visits", amount: Int64.max)),
            Event(id: id(4), origin: b, entity: job, body: .incr(counter: "visits", amount: Int64.max)),
        ]
        let expected =
            #"{"conflicts":{"fields":{},"status":[]},"counters":{"parts_used":-3,"visits":18446744073709551614},"deleted":false,"entity":"job/42","events":4,"fields":{},"sets":{},"status":null,"version":"#
        for order in [incrs, incrs.reversed(), [incrs[2], incrs[0], incrs[3], incrs[1]]] {
            #expect(render(order).hasPrefix(expected))
            var state = EntityState(entity: job)
            for event in order { #expect(state.apply(event, isFolded: { _ in false }) == .applied) }
            #expect(state == Projection.fold(job, incrs))
            let decoded = try EntityState(entity: job, decoding: state.encoded())
            #expect(decoded == state)
        }
        #expect(Projection.fold(job, incrs).counter("parts_used") == -3)
        #expect(Projection.fold(job, incrs).counter("absent") == nil)
        // No counter: the encoding (so the digest) is what it was before counters.
        let plain = Projection.fold(job, [edit(1, a, [("n", "1")])])
        #expect(!String(decoding: plain.canonicalJSON(history: []), as: UTF8.self).contains("counters"))
    }

    @Test func lastWriterInCausalOrderWins() {
        let first = edit(1, a, [("address", "\"12 Main St\""), ("phone", "\"+1555\"")])
        let second = edit(2, a, [("address", "\"14 Main St\"")], base: [("address", [first.id])])
        let state = Projection.fold(job, [second, first])
        #expect(state.conflictingFields.isEmpty)
        #expect(state.field("address")?.winner.value == json("\"14 Main St\""))
        #expect(render([first, second]).contains(#""fields":{"address":"14 Main St","phone":"+1555"}"#))
        #expect(state.version == second.id)
        #expect(state.eventCount == 2)
    }

    @Test func concurrentEditsAreAConflictUntilResolved() {
        let first = edit(1, a, [("address", "\"12 Main St\"")])
        let mine = edit(2, a, [("address", "\"13 Main St\"")], base: [("address", [first.id])])
        let theirs = edit(3, b, [("address", "\"14 Main St\"")], base: [("address", [first.id])])
        let state = Projection.fold(job, [first, mine, theirs])
        #expect(state.conflictingFields == ["address"])
        #expect(state.hasConflicts)
        // The greatest id among the heads gives the value meanwhile.
        #expect(state.field("address")?.winner.value == json("\"14 Main St\""))
        let json = render([first, mine, theirs])
        #expect(
            json.contains(
                #""conflicts":{"fields":{"address":[{"id":"\#(mine.id)","origin":"\#(a)","value":"13 Main St"},{"id":"\#(theirs.id)","origin":"\#(b)","value":"14 Main St"}]},"status":[]}"#
            ))

        // Naming every head resolves it, even with a smaller id than a head.
        let resolve = edit(2, a, [("address", "\"13 Main St\"")], base: [("address", [mine.id, theirs.id])])
        let resolved = Projection.fold(
            job, [first, mine, theirs, Event(id: id(4), origin: a, entity: job, body: resolve.body)])
        #expect(!resolved.hasConflicts)
        #expect(resolved.field("address")?.winner.value == JSONBytes.string("13 Main St"))
    }

    @Test func nullClearsAField() {
        let first = edit(1, a, [("phone", "\"+1555\""), ("notes", "\"x\"")])
        let clear = edit(2, a, [("phone", "null")], base: [("phone", [first.id])])
        #expect(render([first, clear]).contains(#""fields":{"notes":"x"}"#))
    }

    @Test func statusKeepsItsHistory() {
        let s1 = Event(id: id(1), origin: a, entity: job, body: .status("assigned", base: []))
        let s2 = Event(id: id(2), origin: a, entity: job, body: .status("en_route", base: [s1.id]))
        let s3 = Event(id: id(3), origin: b, entity: job, body: .status("paused", base: [s1.id]))
        let state = Projection.fold(job, [s3, s2, s1])
        #expect(Projection.statusHistory(job, [s3, s2, s1]).map(\.status) == ["assigned", "en_route", "paused"])
        #expect(state.statusCount == 3)
        #expect(state.currentStatus?.status == "paused")
        #expect(state.hasStatusConflict)
        let text = render([s1, s2, s3])
        #expect(
            text.contains(
                #""status":[{"id":"\#(s2.id)","origin":"\#(a)","status":"en_route"},{"id":"\#(s3.id)","origin":"\#(b)","status":"paused"}]"#
            ))
        #expect(text.contains(#""status":{"current":"paused","history":[{"id":"\#(s1.id)""#))
    }

    @Test func orSetAddWins() {
        let add1 = Event(id: id(1), origin: a, entity: job, body: .add(set: "parts", element: json("\"valve-3\"")))
        let add2 = Event(id: id(2), origin: a, entity: job, body: .add(set: "parts", element: json("\"gasket\"")))
        // B removes valve-3 having seen add1; A concurrently adds it again.
        let remove = Event(
            id: id(3), origin: b, entity: job,
            body: .remove(set: "parts", element: json("\"valve-3\""), observed: [add1.id]))
        let readd = Event(id: id(4), origin: a, entity: job, body: .add(set: "parts", element: json(#""valve-3""#)))
        #expect(render([add1, add2, remove]).contains(#""sets":{"parts":["gasket"]}"#))
        // Ordered by the smallest live add id: gasket (2) before valve-3 (4).
        #expect(render([add1, add2, remove, readd]).contains(#""sets":{"parts":["gasket","valve-3"]}"#))
        #expect(render([add1, add2]).contains(#""sets":{"parts":["valve-3","gasket"]}"#))
    }

    @Test func setElementsCompareByCanonicalJSON() throws {
        let add = Event(
            id: id(1), origin: a, entity: job, body: .add(set: "s", element: json(#"{ "b": 1, "a": [2] }"#)))
        let remove = Event(
            id: id(2), origin: a, entity: job,
            body: .remove(set: "s", element: json(#"{"a":[2],"b":1}"#), observed: [add.id]))
        var state = EntityState(entity: job)
        _ = state.apply(add) { _ in false }
        #expect(state.liveAdds(set: "s", element: json(#"{"a":[2],"b":1}"#)) == [add.id])
        _ = state.apply(remove) { $0 == add.id }
        #expect(state.sets.isEmpty)
    }

    @Test func deleteWinsAndRestoreShowsConcurrentEdits() {
        let create = edit(1, a, [("address", "\"12 Main St\"")])
        let delete = Event(id: id(2), origin: a, entity: job, body: .delete)
        let concurrent = edit(3, b, [("notes", "\"gate\"")])
        let deleted = Projection.fold(job, [create, delete, concurrent])
        #expect(deleted.isDeleted)
        let restore = Event(id: id(4), origin: a, entity: job, body: .restore(base: [delete.id]))
        let restored = Projection.fold(job, [create, delete, concurrent, restore])
        #expect(!restored.isDeleted)
        #expect(
            render([create, delete, concurrent, restore]).contains(
                #""fields":{"address":"12 Main St","notes":"gate"}"#))
        // A concurrent delete the restore did not see keeps it deleted.
        let otherDelete = Event(id: id(5), origin: b, entity: job, body: .delete)
        #expect(Projection.fold(job, [create, delete, restore, otherDelete]).isDeleted)
    }

    @Test func anEventThatArrivesAfterItsSuccessorAsksForARefold() {
        let first = edit(1, a, [("address", "\"12 Main St\"")])
        let second = edit(2, a, [("address", "\"14 Main St\"")], base: [("address", [first.id])])
        var state = EntityState(entity: job)
        #expect(state.apply(second) { _ in false } == .applied)
        #expect(state.dangling == [first.id])
        #expect(state.apply(first) { _ in false } == .needsRefold)
        #expect(Projection.fold(job, [first, second]).dangling.isEmpty)
    }

    @Test func selfNamingEventsFoldTheSameBothWays() {
        // Only a hostile peer makes these; the two paths must still agree.
        let weird = Event(id: id(5), origin: b, entity: job, body: .status("x", base: [id(5)]))
        var state = EntityState(entity: job)
        _ = state.apply(weird) { _ in false }
        #expect(state == Projection.fold(job, [weird]))
        #expect(state.currentStatus == nil)
    }
}
