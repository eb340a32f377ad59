import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// Events of this node's own origin that come from elsewhere, ids another origin already
/// holds where the clock goes next, and the end of the id space: local appends go on, with
/// ids near the wall clock, also after a reopen.
@Suite("The clock against its own origin from elsewhere")
struct OwnOriginTests {
    static let now: UInt64 = 1_764_400_000_000
    static let other = ULID(timestamp: now - 86_400_000, random: (3, 3))

    func raw(_ id: ULID, origin: ULID, _ entity: String) -> [UInt8] {
        Array(#"{"entity":"\#(entity)","id":"\#(id)","kind":"status","origin":"\#(origin)","status":"x"}"#.utf8)
    }

    func append(_ store: TempStore, _ entity: String) throws -> ULID {
        try store.log.append(inputs(#"{"entity":"\#(entity)","kind":"status","status":"new"}"#)).ids[0]
    }

    @Test("a replicated event of this origin beyond the skew is a dead letter (foreign_own_origin), reported as skew")
    func ingestRefusesFarOwnEvents() throws {
        let wall = WallClock(Self.now)
        let store = try TempStore { $0.wallClock = { wall.now } }
        let node = store.log.nodeID
        let near = ULID(timestamp: Self.now + 600_000, random: (0, 1))
        let far = ULID(timestamp: Self.now + 2 * 3_600_000, random: (0, 1))
        let batch = [
            raw(near, origin: node, "job/near"), raw(.max, origin: node, "job/max"), raw(far, origin: node, "job/far"),
        ]
        let result = try store.log.ingest(batch, from: "peer")
        #expect(result.ingested == [near])
        #expect(result.deadLettered.map(\.id) == [ULID.max.description, far.description])
        for letter in result.deadLettered {
            #expect(letter.reason.hasPrefix("foreign_own_origin: it has this node's origin"), "\(letter.reason)")
        }
        // Sent again at the next session: not kept twice.
        let again = try store.log.ingest(batch, from: "peer")
        #expect(again.ingested.isEmpty && again.deadLettered.isEmpty && again.skipped == 3)
        #expect(try store.log.deadLetters().count == 2)
        #expect(try store.log.versionVector()[node] == near, "this node's vector entry stays its own")
        let lead = try #require(try store.log.statistics().skewedOrigins[node])
        #expect(lead > 8_000 * 365 * 86_400_000 as UInt64)
        // The one within the skew moved the clock; the others did not.
        let local = try append(store, "job/1")
        #expect(local > near && local.timestamp == near.timestamp)
        try store.reopen()
        #expect(try append(store, "job/2").timestamp < Self.now + 3_600_000)
        try store.check()
    }

    @Test("a store that took ULID.max under its own origin (as 0.4 did) appends near the wall clock after a reopen")
    func poisonedStoreRecovers() throws {
        let wall = WallClock(Self.now)
        let store = try TempStore { $0.wallClock = { wall.now } }
        let node = store.log.nodeID
        let first = try append(store, "job/1")
        // What 0.4 stored: this node's origin at the greatest ULID, then an event of another
        // origin at the id its dragged clock made next; and no clock reading.
        let taken = ULID.lowerBound(timestamp: ULID.maxTimestamp)
        try store.log.write { batch, txn, writer in
            for (id, origin, entity) in [(ULID.max, node, "job/poison"), (taken, Self.other, "job/taken")] {
                let event = try EventCodec.decodeStored(raw(id, origin: origin, entity))
                try batch.writeAndFold(event, payload: try batch.storedPayload(of: event), txn: &txn, writer: &writer)
            }
            _ = try batch.finish(txn: &txn)
        }
        try store.log.environment.write { txn in _ = try txn.delete(store.log.tables.meta, EventLog.Meta.clock) }
        for round in 0..<2 {
            try store.reopen()
            wall.now += 1000
            let id = try append(store, "job/after-\(round)")
            #expect(id > first && id.timestamp <= wall.now, "\(id)")
            #expect(try store.log.statistics().skewedOrigins[node] != nil, "the lead is reported")
        }
        try store.check()
    }

    @Test(
        "ids of another origin where the clock goes next: the append steps past them",
        arguments: [1, 2, 3] as [UInt64])
    func collisionsStepPast(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let wall = WallClock(Self.now)
        let store = try TempStore { $0.wallClock = { wall.now } }
        var last = try append(store, "job/0")
        var taken = Set<ULID>()
        for round in 1...20 {
            // The wall clock steps back beyond the skew, so the clock runs on from its last
            // id and ids next to it are not observed when stored.
            wall.now = Self.now - 2 * 3_600_000 + UInt64(round)
            var ahead: [[UInt8]] = []
            // From the last id made or taken: ids an append stepped past may still lie ahead.
            var candidate = max(last, taken.max() ?? last)
            for _ in 0..<Int.random(in: 0...40, using: &rng) {
                candidate = try #require(candidate.incremented())
                if Int.random(in: 0..<4, using: &rng) == 0 { continue }  // a gap
                taken.insert(candidate)
                ahead.append(raw(candidate, origin: Self.other, "job/r\(round)"))
            }
            let took = try store.log.ingest(ahead, from: "peer")
            #expect(took.ingested.count == ahead.count, "\(took)")
            let ids = try store.log.append(
                (0..<Int.random(in: 1...30, using: &rng)).map { n in
                    try EventCodec.decodeInput(Array(#"{"entity":"job/\#(round)-\#(n)","kind":"delete"}"#.utf8))
                }
            ).ids
            for id in ids {
                #expect(id > last && !taken.contains(id))
                last = id
            }
            if round % 7 == 0 { try store.reopen() }
        }
        try store.check()
    }

    @Test("at the end of the id space an append fails with ids_exhausted, also after a reopen; nothing is written")
    func exhaustion() throws {
        let wall = WallClock(ULID.maxTimestamp)
        let store = try TempStore { $0.wallClock = { wall.now } }
        let first = try append(store, "job/1")
        #expect(first.timestamp == ULID.maxTimestamp)
        // Within the skew of this wall clock: observed.
        _ = try store.log.ingest([raw(.max, origin: Self.other, "job/max")], from: "peer")
        for round in 0..<2 {
            let before = try store.log.statistics().events
            do {
                let id = try store.log.append(inputs(#"{"entity":"job/2","kind":"delete"}"#)).ids[0]
                Issue.record("appended \(id) after the greatest ULID")
            } catch let error as EventStoreError {
                #expect(error.reason == .idsExhausted, "\(error)")
            }
            #expect(try store.log.statistics().events == before)
            if round == 0 { try store.reopen() }
        }
        try store.check()
    }
}
