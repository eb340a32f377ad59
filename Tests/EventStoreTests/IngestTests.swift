import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

@Suite("Ingest of replicated events")
struct IngestTests {
    @Test("the ids a batch stored answer as a set does, in order or not", arguments: [UInt64(1), 2, 3, 4])
    func seenIDs(seed: UInt64) {
        var generator = SeededGenerator(seed: seed)
        var seen = SeenIDs()
        var reference = Set<ULID>()
        // An ascending run first (as a peer sends an origin), then, for some seeds, any order.
        let ascendingRun = Int.random(in: 0...300, using: &generator)
        for step in 0..<600 {
            let id =
                step < ascendingRun || seed == 1
                ? ULID(high: UInt64(step * 3 + Int.random(in: 0...2, using: &generator)), low: 0)
                : ULID(high: UInt64.random(in: 0...2000, using: &generator), low: 0)
            let probe = ULID(high: UInt64.random(in: 0...2000, using: &generator), low: 0)
            #expect(seen.contains(probe) == reference.contains(probe))
            #expect(seen.contains(id) == reference.contains(id))
            seen.insert(id)
            reference.insert(id)
            #expect(seen.contains(id))
        }
    }

    @Test("two stores that take each other's events converge", arguments: [UInt64(1), 2, 3])
    func convergence(seed: UInt64) throws {
        let a = try TempStore()
        let b = try TempStore()
        var rng = SeededGenerator(seed: seed)
        // Both work on the same jobs offline, then exchange in random batches and orders.
        let shared = workload(seed: seed, count: 400, jobs: 15, actor: "a")
        let other = workload(seed: seed, count: 400, jobs: 15, actor: "b")
        for chunk in stride(from: 0, to: 400, by: 50) {
            _ = try a.log.append(Array(shared[chunk..<chunk + 50]))
            _ = try b.log.append(Array(other[chunk..<chunk + 50]))
        }
        // Mid-way exchange of part of the log, so later events carry remote context.
        _ = try b.log.ingest(Array(try allStoredEvents(a.log).prefix(150)), from: "a")
        _ = try b.log.append(workload(seed: seed + 100, count: 100, jobs: 15, actor: "b"))

        for (from, to) in [(a, b), (b, a)] {
            let events = try allStoredEvents(from.log).shuffled(using: &rng)
            var index = 0
            while index < events.count {
                let size = Int.random(in: 1...120, using: &rng)
                _ = try to.log.ingest(Array(events[index..<min(index + size, events.count)]), from: "peer")
                index += size
            }
        }
        let statsA = try a.log.statistics()
        let statsB = try b.log.statistics()
        #expect(statsA.events == statsB.events)
        #expect(statsA.digest == statsB.digest)
        #expect(try a.log.versionVector() == b.log.versionVector())
        for event in workload(seed: seed, count: 400, jobs: 15) {
            #expect(try stateJSON(a.log, event.entity.description) == stateJSON(b.log, event.entity.description))
        }
        #expect(statsA.conflicts > 0, "concurrent edits of the same jobs should conflict")
        try a.check()
        try b.check()
    }

    @Test func alreadyHeldEventsAreSkipped() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(workload(seed: 9, count: 50))
        let events = try allStoredEvents(a.log)
        let first = try b.log.ingest(events)
        #expect(first.ingested.count == 50)
        let again = try b.log.ingest(events + events)
        #expect(again.ingested.isEmpty)
        #expect(again.skipped == 100)
        // Its own events sent back to it change nothing either.
        #expect(try a.log.ingest(events).skipped == 50)
        #expect(try a.log.statistics().digest == b.log.statistics().digest)
        try b.check()
    }

    @Test func invalidEventsGoToDeadLettersAndDoNotBlockTheRest() throws {
        let a = try TempStore()
        let b = try TempStore { $0.maxEventBytes = 1024 }
        _ = try a.log.append(workload(seed: 4, count: 20))
        var events = try allStoredEvents(a.log)
        let garbage: [[UInt8]] = [
            Array("<html><body>Sign in to the hotel Wi-Fi</body></html>".utf8),
            [0xFF, 0x00, 0x13, 0x37],
            Array(
                #"{"entity":"Job/1","kind":"delete","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#
                    .utf8),
        ]
        // Larger than b's own max_event_bytes: a peer's event is held to the sync
        // protocol's limit instead, so it is stored.
        let big = Array(
            #"{"entity":"job/1","kind":"edit","fields":{"a":"\#(String(repeating: "x", count: 2000))"},"id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TR","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#
                .utf8)
        events.insert(contentsOf: garbage + [big], at: 10)
        let result = try b.log.ingest(events, from: "north-gateway")
        #expect(result.ingested.count == 21)
        #expect(result.ingested.contains(ULID("01JD3Q8R5N8X6ZK2W7Y4V9B3TR")!))
        #expect(result.deadLettered.count == 3)
        let letters = try b.log.deadLetters()
        #expect(letters.count == 3)
        #expect(letters.allSatisfy { $0.peer == "north-gateway" })
        #expect(letters[0].reason.contains("invalid_event"))
        #expect(letters[2].id == "01JD3Q8R5N8X6ZK2W7Y4V9B3TQ")
        #expect(letters[2].reason.contains("entity type"))
        #expect(String(decoding: letters[0].raw, as: UTF8.self).contains("hotel Wi-Fi"))
        #expect(try b.log.statistics().deadLetters == 3)
        try b.check()
    }

    @Test func deadLettersNameThePeersNodeAndStopAtTheCap() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(workload(seed: 5, count: 10))
        var events = try allStoredEvents(a.log)
        let bad = (0..<30).map { Array(#"{"entity":"job/\#($0)","kind":"teleport"}"#.utf8) }
        events.insert(contentsOf: bad, at: 4)
        let node = ULID(timestamp: 1_700_000_000_000, random: (3, 3))
        let result = try b.log.ingest(
            events.map { ReplicatedEvent(id: nil, json: $0) }, from: IngestPeer(name: "gw", node: node),
            maxDeadLetters: 12)
        // The 4 events before the invalid ones, then 12 dead letters; the rest is refused.
        #expect(result.ingested.count == 4)
        #expect(result.deadLettered.count == 12)
        #expect(result.refused == events.count - 16)
        let letters = try b.log.deadLetters()
        #expect(letters.count == 12)
        #expect(letters.allSatisfy { $0.peer == "gw" && $0.peerNode == node.description })
        try b.check()
    }

    @Test("batches committed together with one allowance add no more dead letters than it holds, in their order")
    func batchesShareAnAllowance() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(workload(seed: 6, count: 9))
        let good = try allStoredEvents(a.log)
        // Three batches, each three good events and then five invalid ones.
        let batches = (0..<3).map { batch in
            let bad = (0..<5).map { Array(#"{"entity":"job/\#(batch)-\#($0)","kind":"teleport"}"#.utf8) }
            return (good[(batch * 3)..<(batch * 3 + 3)] + bad).map { ReplicatedEvent(id: nil, json: $0) }
        }
        let allowance = DeadLetterAllowance(7)
        let result = try b.log.commit(
            batches.map { IngestJob($0, from: IngestPeer(name: "gw"), allowance: allowance) })
        let outcomes = result.outcomes.map { $0.output(as: IngestResult.self) }
        // The first batch spends 5 of the 7; the second the 2 left, its other 3 refused; the
        // third may make none, so all of it is refused, its good events too.
        #expect(outcomes.map { $0?.ingested.count } == [3, 3, 0])
        #expect(outcomes.map { $0?.deadLettered.count } == [5, 2, 0])
        #expect(outcomes.map { $0?.refused } == [0, 3, 8])
        #expect(allowance.remaining == 0)
        #expect(try b.log.deadLetters().count == 7)
        try b.check()
    }

    @Test func deadLetterRecordsWithoutAPeerNodeStillRead() throws {
        // As releases before the peer's node id was kept wrote them.
        let key = ULID(timestamp: 1_700_000_000_000, random: (1, 2))
        let old =
            #"{"id":null,"key":"\#(key)","origin":null,"peer":"hq","raw":"<html>","reason":"invalid_event: x","received_at":"2026-11-02T08:00:00.000Z"}"#
        let letter = try DeadLetter(key: key, decoding: Array(old.utf8))
        #expect(letter.peer == "hq" && letter.peerNode == nil && letter.reason == "invalid_event: x")
        #expect(letter.canonicalJSON() == Array(old.utf8))
        var new = letter
        new.peerNode = "01M8KX60XQ9QZ6TBERPGCC148Z"
        #expect(try DeadLetter(key: key, decoding: new.canonicalJSON()) == new)
    }

    @Test func aPeerDaysAheadDoesNotDragTheClock() throws {
        let now: UInt64 = 1_764_400_000_000
        let wall = WallClock(now)
        let store = try TempStore { $0.wallClock = { wall.now } }
        let farOrigin = ULID(timestamp: now, random: (1, 1))
        let far = ULID(timestamp: now + 3 * 86_400_000, random: (0, 5))
        let near = ULID(timestamp: now + 60_000, random: (0, 5))
        func raw(_ id: ULID, _ e: String) -> [UInt8] {
            Array(#"{"entity":"\#(e)","id":"\#(id)","kind":"delete","origin":"\#(farOrigin)"}"#.utf8)
        }
        _ = try store.log.ingest([raw(far, "job/far"), raw(near, "job/near")], from: "drifter")
        let local = try store.log.append(inputs(#"{"entity":"job/1","kind":"delete"}"#)).ids[0]
        #expect(local > near)
        #expect(local < far)
        #expect(local.timestamp == near.timestamp)
        let skew = try store.log.statistics().skewedOrigins
        let lead = try #require(skew[farOrigin])
        #expect(lead == 3 * 86_400_000)
        // Time passes: once the far id is within the skew window, it counts.
        wall.now = now + 3 * 86_400_000 - 1_000
        #expect(try store.log.append(inputs(#"{"entity":"job/2","kind":"delete"}"#)).ids[0] > far)
        try store.check()
    }

    @Test func eventsArrivingBeforeWhatTheyDependOnFoldCorrectly() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(
            inputs(
                #"{"entity":"job/1","kind":"edit","fields":{"x":1}}"#,
                #"{"entity":"job/1","kind":"add","set":"s","element":"e"}"#,
                #"{"entity":"job/1","kind":"delete"}"#))
        _ = try a.log.append(
            inputs(
                #"{"entity":"job/1","kind":"restore"}"#,
                #"{"entity":"job/1","kind":"edit","fields":{"x":2}}"#,
                #"{"entity":"job/1","kind":"remove","set":"s","element":"e"}"#))
        // Newest first: every event names one that has not arrived yet.
        for event in try allStoredEvents(a.log).reversed() { _ = try b.log.ingest([event]) }
        try expectSameState(b, as: a, entity: "job/1")
        // The same in one batch: what each event names was stored by the batch, and is not
        // in the entity index until the batch's work is done.
        let c = try TempStore()
        _ = try c.log.ingest(try allStoredEvents(a.log).reversed())
        try expectSameState(c, as: a, entity: "job/1")
    }

    @Test("one entity's thousand events in one batch are indexed, appended or taken in any order")
    func oneEntitysEventsPastTheUnindexedBound() throws {
        let a = try TempStore()
        // Each remove names the add before it, so each fold asks whether that add is held.
        var lines: [InputEvent] = []
        for index in 0..<500 {
            lines += try inputs(
                #"{"entity":"job/1","kind":"add","set":"s","element":\#(index)}"#,
                #"{"entity":"job/1","kind":"remove","set":"s","element":\#(index)}"#)
        }
        _ = try a.log.append(lines)
        #expect(WriteBatch.maxUnindexed < lines.count)
        #expect(try a.log.events(ofEntity: entity("job/1"), after: nil, limit: 2000).events.count == 1000)
        try a.check()
        let b = try TempStore()
        var rng = SeededGenerator(seed: 5)
        _ = try b.log.ingest(try allStoredEvents(a.log).shuffled(using: &rng))
        try expectSameState(b, as: a, entity: "job/1")
    }

    @Test("an entity's events stored by several jobs of one commit fold as when stored apart")
    func eventsOfOneEntityInSeveralJobsOfACommit() throws {
        let a = try TempStore()
        _ = try a.log.append(
            inputs(
                #"{"entity":"job/1","kind":"add","set":"s","element":"e"}"#,
                #"{"entity":"job/1","kind":"remove","set":"s","element":"e"}"#,
                #"{"entity":"job/1","kind":"edit","fields":{"x":1}}"#))
        let events = try allStoredEvents(a.log)
        let b = try TempStore()
        // The remove first, alone; then a job with the add it names, and one more with the
        // edit, and an append: each fold asks whether what its event names is held, none of
        // it in the entity index until the commit's work is done.
        let peer = IngestPeer(name: "a")
        let jobs: [any WriteJob] = [1, 0, 2].map { IngestJob([ReplicatedEvent(id: nil, json: events[$0])], from: peer) }
        let outcomes = try b.log.commit(
            jobs + [AppendJob(try inputs(#"{"entity":"job/1","kind":"edit","fields":{"y":2}}"#))]
        ).outcomes
        #expect(outcomes.map { $0.output(as: IngestResult.self)?.ingested.count } == [1, 1, 1, nil])
        #expect(outcomes.allSatisfy { (try? $0.get()) != nil })
        _ = try a.log.ingest(try allStoredEvents(b.log))
        try expectSameState(b, as: a, entity: "job/1")
    }
}

@Suite("Ingest of conflicting duplicates")
struct ConflictingDuplicateTests {
    @Test func anEventWhoseIDIsHeldWithOtherContentIsADeadLetter() throws {
        let a = try TempStore()
        let b = try TempStore()
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#))
        let original = try allStoredEvents(a.log)
        _ = try b.log.ingest(original)
        let forged = String(decoding: original[0], as: UTF8.self).replacingOccurrences(of: #""a":1"#, with: #""a":2"#)
        let result = try b.log.ingest([Array(forged.utf8), original[0]], from: "forger")
        #expect(result.skipped == 1)
        #expect(result.deadLettered.count == 1)
        #expect(result.deadLettered[0].reason.contains("already held with different content"))
        #expect(try stateJSON(b.log, "job/1")?.contains(#""a":1"#) == true)
        try b.check()
    }
}

@Suite("Convergence of several stores")
struct ConvergenceTests {
    /// Three stores work on overlapping jobs and exchange random subsets of what they hold,
    /// in random order, between rounds of local work; after a final full exchange every
    /// store has the same digest and the same state for every entity.
    @Test(arguments: [UInt64(11), 12, 13])
    func randomPartialExchangesConverge(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let stores = try (0..<3).map { _ in try TempStore() }
        var entities = Set<EntityKey>()
        for round in 0..<6 {
            for (index, store) in stores.enumerated() {
                let work = workload(
                    seed: seed &* 100 &+ UInt64(round * 3 + index), count: 60, jobs: 8, actor: "n\(index)")
                entities.formUnion(work.map(\.entity))
                _ = try store.log.append(work)
            }
            for _ in 0..<3 {
                let from = stores[Int.random(in: 0..<3, using: &rng)]
                let to = stores[Int.random(in: 0..<3, using: &rng)]
                let subset = try allStoredEvents(from.log).filter { _ in Bool.random(using: &rng) }.shuffled(
                    using: &rng)
                _ = try to.log.ingest(subset, from: "peer")
            }
        }
        for from in stores {
            for to in stores where to !== from {
                _ = try to.log.ingest(try allStoredEvents(from.log).shuffled(using: &rng))
            }
        }
        let digests = try stores.map { try $0.log.statistics().digest }
        #expect(Set(digests.map(\.description)).count == 1)
        for entity in entities {
            let states = try stores.map { try stateJSON($0.log, entity.description) }
            #expect(states[0] == states[1] && states[1] == states[2], "\(entity) differs")
        }
        for store in stores { try store.check() }
    }
}

/// `store` holds `entity` in the state `reference` does and the same digest, and is whole.
private func expectSameState(
    _ store: TempStore, as reference: TempStore, entity: String, sourceLocation: SourceLocation = #_sourceLocation
) throws {
    #expect(try stateJSON(reference.log, entity) == stateJSON(store.log, entity), sourceLocation: sourceLocation)
    #expect(
        try reference.log.statistics().digest == store.log.statistics().digest, sourceLocation: sourceLocation)
    try store.check(sourceLocation: sourceLocation)
}
