import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

@Suite("Import of stored events (EventLog.importEvents)")
struct ImportEventsTests {
    @Test("an import equals the source store; a dry run writes nothing; again, all are skipped")
    func importEqualsSource() throws {
        let a = try TempStore()
        let b = try TempStore()
        let c = try TempStore()
        _ = try a.log.append(workload(seed: 3, count: 300, jobs: 20, actor: "a"))
        _ = try b.log.append(workload(seed: 4, count: 300, jobs: 20, actor: "b"))
        _ = try a.log.ingest(try allStoredEvents(b.log), from: "b")
        _ = try a.log.append(workload(seed: 5, count: 100, jobs: 20, actor: "a"))
        let events = try allStoredEvents(a.log)

        let dry = try c.log.importEvents(events, dryRun: true)
        #expect(dry.imported.count == events.count && dry.skipped == 0)
        #expect(try c.log.statistics().events == 0)

        let done = try c.log.importEvents(events)
        #expect(done.imported.count == events.count)
        #expect(try c.log.statistics().digest == a.log.statistics().digest)
        #expect(try c.log.versionVector() == a.log.versionVector())
        #expect(try allStoredEvents(c.log) == events)
        let again = try c.log.importEvents(events)
        #expect(again.imported.isEmpty && again.skipped == events.count)
        try c.check()
    }

    @Test("a request with one bad event writes nothing and names its index")
    func allOrNothing() throws {
        let a = try TempStore()
        let c = try TempStore { $0.maxEventBytes = 1024 }
        _ = try a.log.append(workload(seed: 7, count: 20))
        var events = try allStoredEvents(a.log)
        let big = Array(
            #"{"entity":"job/1","kind":"edit","fields":{"a":"\#(String(repeating: "x", count: 2000))"},"id":"\#(ULID(timestamp: 1, random: (0, 1)))","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#
                .utf8)
        events.insert(big, at: 7)
        #expect(throws: EventStoreError.self) { try c.log.importEvents(events) }
        do {
            _ = try c.log.importEvents(events)
        } catch {
            #expect(error.reason == .tooLarge && error.index == 7)
            #expect(error.message.hasPrefix("event 7 ("))
        }
        #expect(try c.log.statistics().events == 0)
        #expect(try c.log.deadLetters().isEmpty, "no dead letters: the person fixes the file")
        try c.check()
    }

    @Test("this node's own events within the skew move its clock; one beyond it fails the import (foreign_own_origin)")
    func ownEventsAndTheClock() throws {
        let now: UInt64 = 1_764_400_000_000
        let wall = WallClock(now)
        let store = try TempStore { $0.wallClock = { wall.now } }
        func own(_ id: ULID, _ entity: String) -> [UInt8] {
            Array(#"{"entity":"\#(entity)","id":"\#(id)","kind":"delete","origin":"\#(store.log.nodeID)"}"#.utf8)
        }
        let near = ULID(timestamp: now + 600_000, random: (0, 5))
        #expect(try store.log.importEvents([own(near, "job/near")]).imported == [near])
        let local = try store.log.append(inputs(#"{"entity":"job/1","kind":"delete"}"#)).ids[0]
        #expect(local > near, "a later local id is above the imported one of this origin")

        let before = try store.log.statistics()
        for far in [ULID(timestamp: now + 3 * 86_400_000, random: (0, 5)), ULID.max] {
            for dryRun in [true, false] {
                do {
                    _ = try store.log.importEvents([own(near, "job/near"), own(far, "job/far")], dryRun: dryRun)
                    Issue.record("imported \(far)")
                } catch {
                    #expect(error.reason == .invalidEvent && error.index == 1)
                    #expect(error.message.hasPrefix("event 1 (\(far)): foreign_own_origin: "), "\(error.message)")
                    #expect(error.message.contains("max_clock_skew_s"))
                }
            }
        }
        let after = try store.log.statistics()
        #expect(after.events == before.events && after.digest == before.digest)
        let next = try store.log.append(inputs(#"{"entity":"job/2","kind":"delete"}"#)).ids[0]
        #expect(next > local && next.timestamp < now + 3_600_000)
        try store.check()
    }
}
