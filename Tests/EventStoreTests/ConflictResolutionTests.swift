import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// A conflict stays until someone resolves it: a plain edit of a field in conflict joins
/// it, a resolution (`resolve: true`, or an `if_match` that passed) settles it, on every
/// store once the events are exchanged.
@Suite("Conflicts stay until resolved")
struct ConflictResolutionTests {
    let job = entity("job/1")

    /// Two stores that share job/1 with x=1, then edit x concurrently and exchange: x is
    /// in conflict (two heads) on both.
    func conflicted() throws -> (TempStore, TempStore) {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":1,"y":1}}"#))
        _ = try b.log.ingest(try allStoredEvents(a.log))
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":2}}"#))
        _ = try b.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":3}}"#))
        try exchange(a, b)
        for store in [a, b] { #expect(try heads(store, "x") == 2) }
        return (a, b)
    }

    func exchange(_ a: TempStore, _ b: TempStore) throws {
        _ = try b.log.ingest(try allStoredEvents(a.log))
        _ = try a.log.ingest(try allStoredEvents(b.log))
    }

    func heads(_ store: TempStore, _ field: String) throws -> Int {
        try store.log.state(of: job)?.field(field)?.heads.count ?? 0
    }

    /// The stored form of the event `id`, as a peer receives it.
    func stored(_ store: TempStore, _ id: ULID) throws -> String {
        let event = try #require(try store.log.events(after: nil, limit: 1000).events.first { $0.id == id })
        return String(decoding: EventCodec.encodeStored(event), as: UTF8.self)
    }

    @Test("a plain edit of a field in conflict joins it, on both stores; other fields it sets still supersede")
    func plainEditJoins() throws {
        let (a, b) = try conflicted()
        let plain = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":4,"y":2}}"#))
        #expect(try heads(a, "x") == 3)
        #expect(try heads(a, "y") == 1)
        // Its base names y's head and none of x's.
        let text = try stored(a, plain.ids[0])
        #expect(text.contains(#""base":{"y":["#), "\(text)")
        #expect(!text.contains(#""x":["#), "\(text)")
        try exchange(a, b)
        for store in [a, b] {
            #expect(try heads(store, "x") == 3)
            #expect(try heads(store, "y") == 1)
            #expect(try store.log.conflicts(limit: 10).entities.map(\.entity) == [job])
            try store.check()
        }
    }

    @Test("resolve: true settles the conflict, on both stores; the stored event carries the base, not the flag")
    func resolveSettles() throws {
        let (a, b) = try conflicted()
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":4}}"#))
        try exchange(a, b)
        let before = try #require(try b.log.state(of: job)).heads(ofField: "x")
        #expect(before.count == 3)
        let resolved = try b.log.append(
            inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":5},"resolve":true}"#))
        let text = try stored(b, resolved.ids[0])
        #expect(text.contains(#""base":{"x":[\#(before.map { "\"\($0)\"" }.joined(separator: ","))]}"#), "\(text)")
        #expect(!text.contains("resolve"), "\(text)")
        try exchange(a, b)
        for store in [a, b] {
            #expect(try heads(store, "x") == 1)
            #expect(try store.log.state(of: job)?.field("x")?.winner.value == JSONBytes(canonical: Array("5".utf8)))
            #expect(try store.log.conflicts(limit: 10).entities.isEmpty)
            try store.check()
        }
    }

    @Test("an edit whose if_match passed settles the conflict, on both stores")
    func ifMatchSettles() throws {
        let (a, b) = try conflicted()
        let rev = try #require(try a.log.rev(of: job))
        _ = try a.log.append(
            inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":6},"if_match":\#(rev)}"#))
        try exchange(a, b)
        for store in [a, b] {
            #expect(try heads(store, "x") == 1)
            #expect(try store.log.conflicts(limit: 10).entities.isEmpty)
        }
    }

    @Test("status keeps its rule: any later status event settles a status conflict")
    func statusSettles() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"new"}"#))
        _ = try b.log.ingest(try allStoredEvents(a.log))
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"on_site"}"#))
        _ = try b.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"paused"}"#))
        try exchange(a, b)
        #expect(try a.log.state(of: job)?.hasStatusConflict == true)
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"done"}"#))
        try exchange(a, b)
        for store in [a, b] {
            let state = try #require(try store.log.state(of: job))
            #expect(!state.hasStatusConflict)
            #expect(state.statusCount == 4)
        }
    }
}
