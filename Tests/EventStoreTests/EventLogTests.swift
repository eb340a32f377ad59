import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

@Suite("Event log")
struct EventLogTests {
    @Test func appendFillsCausalContextAndFolds() throws {
        let store = try TempStore()
        let first = try store.log.append(
            inputs(
                #"{"entity":"job/42","kind":"edit","fields":{"address":"12 Main St","floor":3}}"#,
                #"{"entity":"job/42","kind":"status","status":"assigned"}"#,
                #"{"entity":"job/42","kind":"add","set":"parts","element":"valve-3"}"#))
        #expect(first.ids.count == 3)
        #expect(first.ids == first.ids.sorted())
        #expect(try #require(first.versions[entity("job/42")]) == first.ids[2])

        let second = try store.log.append(
            inputs(
                #"{"entity":"job/42","kind":"edit","fields":{"address":"14 Main St"}}"#,
                #"{"entity":"job/42","kind":"status","status":"en_route"}"#,
                #"{"entity":"job/42","kind":"remove","set":"parts","element":"valve-3"}"#))
        let edit = try #require(try store.log.event(second.ids[0]))
        #expect(
            edit.body
                == .edit(
                    fields: [FieldChange(name: "address", value: .string("14 Main St"))],
                    base: [FieldBase(field: "address", heads: [first.ids[0]])]))
        #expect(edit.origin == store.log.nodeID)
        #expect(try store.log.event(second.ids[1])?.body == .status("en_route", base: [first.ids[1]]))
        #expect(
            try store.log.event(second.ids[2])?.body
                == .remove(set: "parts", element: .string("valve-3"), observed: [first.ids[2]]))

        let state = try #require(try stateJSON(store.log, "job/42"))
        #expect(state.contains(#""fields":{"address":"14 Main St","floor":3}"#))
        #expect(state.contains(#""sets":{}"#))
        #expect(state.contains(#""current":"en_route""#))
        #expect(state.contains(#""events":6"#))
        #expect(try store.log.state(of: entity("job/none")) == nil)
        try store.check()
    }

    @Test func aFailingEventAbortsTheWholeBatch() throws {
        let store = try TempStore { $0.maxEventBytes = 2048 }
        _ = try store.log.append(
            inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#, #"{"entity":"job/2","kind":"delete"}"#))
        let before = try store.log.statistics()
        let stateBefore = try stateJSON(store.log, "job/1")
        let big = String(repeating: "x", count: 3000)
        let failing: [(String, EventStoreError.Reason, Int)] = [
            (#"{"entity":"job/2","kind":"status","status":"on_site"}"#, .deleted, 2),
            (#"{"entity":"job/1","kind":"restore"}"#, .conflict, 2),
            (#"{"entity":"job/1","kind":"edit","fields":{"a":"\#(big)"}}"#, .tooLarge, 2),
            (#"{"entity":"job/1","kind":"delete","if_match":999}"#, .conflict, 2),
        ]
        for (bad, reason, index) in failing {
            do {
                _ = try store.log.append(
                    inputs(
                        #"{"entity":"job/1","kind":"edit","fields":{"a":2}}"#,
                        #"{"entity":"job/3","kind":"add","set":"s","element":1,"key":"never"}"#,
                        bad))
                Issue.record("batch with \(bad) was accepted")
            } catch let error as EventStoreError {
                #expect(error.reason == reason)
                #expect(try #require(error.index) == index)
            }
            let after = try store.log.statistics()
            #expect(after.events == before.events)
            #expect(after.entities == before.entities)
            #expect(after.digest == before.digest)
            #expect(try stateJSON(store.log, "job/1") == stateBefore)
        }
        // The key of the aborted batch was not kept either.
        let again = try store.log.append(
            inputs(#"{"entity":"job/3","kind":"add","set":"s","element":1,"key":"never"}"#))
        #expect(again.appended == 1)
        try store.check()
    }

    @Test func idempotencyKeysReturnTheOriginalID() throws {
        let store = try TempStore()
        let line = #"{"entity":"job/1","kind":"status","status":"done","key":"visit-77"}"#
        let first = try store.log.append([try input(line)])
        let second = try store.log.append([
            try input(line), try input(#"{"entity":"job/1","kind":"edit","fields":{"a":1},"key":"k2"}"#),
            try input(#"{"entity":"job/1","kind":"edit","fields":{"a":9},"key":"k2"}"#),
        ])
        #expect(second.ids[0] == first.ids[0])
        #expect(second.ids[1] == second.ids[2])
        #expect(second.appended == 1)
        try store.reopen()
        let third = try store.log.append([try input(line)])
        #expect(third.ids == first.ids)
        #expect(third.appended == 0)
        #expect(try store.log.statistics().events == 2)
        #expect(try stateJSON(store.log, "job/1")?.contains(#""a":1"#) == true)
        try store.check()
    }

    @Test func ifMatchComparesWithTheRevBeforeTheBatch() throws {
        let store = try TempStore()
        let created = try store.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#))
        let version = try #require(created.revs[entity("job/1")])
        let ok = try store.log.append(
            inputs(
                #"{"entity":"job/1","kind":"edit","fields":{"a":2},"if_match":\#(version)}"#,
                #"{"entity":"job/1","kind":"edit","fields":{"b":2},"if_match":\#(version)}"#))
        #expect(ok.appended == 2)
        #expect(throws: EventStoreError.self) {
            try store.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":3},"if_match":\#(version)}"#))
        }
        // A version (what 0.4 compared with) is refused, saying to pass the rev.
        do {
            _ = try store.log.append(
                inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":3},"if_match":"\#(created.ids[0])"}"#))
            Issue.record("a ULID if_match was accepted")
        } catch let error as EventStoreError {
            #expect(error.reason == .invalidEvent)
            #expect(error.message.contains("rev"))
        }
        do {
            _ = try store.log.append(
                inputs(#"{"entity":"job/new","kind":"edit","fields":{"a":3},"if_match":\#(version)}"#))
            Issue.record("if_match on a new entity accepted")
        } catch let error as EventStoreError {
            #expect(error.reason == .conflict)
            #expect(error.message.contains("does not exist yet"))
        }
        try store.check()
    }

    @Test func deleteRejectsEditsUntilRestored() throws {
        let store = try TempStore()
        _ = try store.log.append(
            inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#, #"{"entity":"job/1","kind":"delete"}"#))
        do {
            _ = try store.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":2}}"#))
            Issue.record("edit of a deleted entity accepted")
        } catch let error as EventStoreError {
            #expect(error.reason == .deleted)
            #expect(error.message.contains("restore it first"))
        }
        let restored = try store.log.append(
            inputs(#"{"entity":"job/1","kind":"restore"}"#, #"{"entity":"job/1","kind":"edit","fields":{"a":2}}"#))
        let restore = try #require(try store.log.event(restored.ids[0]))
        if case .restore(let base) = restore.body { #expect(base.count == 1) } else { Issue.record("not a restore") }
        #expect(try stateJSON(store.log, "job/1")?.contains(#""deleted":false"#) == true)
        try store.check()
    }

    @Test func readsPageThroughTheLog() throws {
        let store = try TempStore()
        let events = workload(seed: 3, count: 700, jobs: 10)
        var ids: [ULID] = []
        for chunk in stride(from: 0, to: events.count, by: 100) {
            ids += try store.log.append(Array(events[chunk..<min(chunk + 100, events.count)])).ids
        }
        var paged: [ULID] = []
        var after: ULID?
        repeat {
            let page = try store.log.events(after: after, limit: 64)
            paged += page.events.map(\.id)
            after = page.next
        } while after != nil
        #expect(paged == ids)
        let job = events[0].entity
        let ofJob = try store.log.events(ofEntity: job, limit: 10_000).events
        #expect(ofJob.map(\.id) == ofJob.map(\.id).sorted())
        #expect(ofJob.allSatisfy { $0.entity == job })
        let jobState = try store.log.state(of: job)
        #expect(try #require(jobState).eventCount == ofJob.count)
        let half = try store.log.events(ofEntity: job, after: ofJob[2].id, limit: 3)
        #expect(half.events.map(\.id) == Array(ofJob[3..<6].map(\.id)))
        #expect(
            try store.log.events(ofOrigin: store.log.nodeID, after: ids[99], limit: 5).events.map(\.id)
                == Array(ids[100..<105]))
        #expect(try store.log.versionVector() == [store.log.nodeID: ids.last!])
        try store.check()
    }

    @Test func reopeningKeepsTheNodeAndTheClock() throws {
        let store = try TempStore()
        let first = try store.log.append(inputs(#"{"entity":"job/1","kind":"delete"}"#)).ids[0]
        let node = store.log.nodeID
        try store.reopen()
        #expect(store.log.nodeID == node)
        #expect(try store.log.append(inputs(#"{"entity":"job/2","kind":"delete"}"#)).ids[0] > first)
        try store.check()
    }

    @Test func theWallClockGoingBackADayKeepsIDsMonotonic() throws {
        let wall = WallClock(1_764_400_000_000)
        let store = try TempStore { $0.wallClock = { wall.now } }
        var last = ULID.zero
        for step in 0..<20 {
            if step == 10 { wall.now -= 86_400_000 }
            let id = try store.log.append(inputs(#"{"entity":"job/\#(step)","kind":"delete"}"#)).ids[0]
            #expect(id > last)
            last = id
        }
        try store.reopen()
        #expect(try store.log.append(inputs(#"{"entity":"job/x","kind":"delete"}"#)).ids[0] > last)
    }
}

/// A wall clock the test moves by hand.
final class WallClock: @unchecked Sendable {
    private let lock = NSLock()
    private var value: UInt64
    init(_ value: UInt64) { self.value = value }
    var now: UInt64 {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}

@Suite("Event log under concurrency")
struct ConcurrencyTests {
    @Test func readersRunWhileAWriterAppends() async throws {
        let store = try TempStore { $0.environment.initialMapSize = 1 << 20 }
        let log = store.log!
        let events = workload(seed: 21, count: 4000, jobs: 40)
        let writer = Task.detached {
            var acknowledged = 0
            for chunk in stride(from: 0, to: events.count, by: 200) {
                acknowledged += try log.append(Array(events[chunk..<chunk + 200])).ids.count
            }
            return acknowledged
        }
        // Readers see consistent snapshots: a state never folds more events than the log
        // holds for its entity at the time of reading, and the digest only changes by appends.
        try await withThrowingTaskGroup(of: Int.self) { group in
            for reader in 0..<4 {
                group.addTask {
                    var reads = 0
                    while reads < 300 {
                        let target = events[(reader * 97 + reads * 13) % events.count].entity
                        if let state = try log.state(of: target) {
                            #expect(state.eventCount > 0)
                        }
                        _ = try log.events(ofEntity: target, limit: 50)
                        _ = try log.statistics()
                        reads += 1
                    }
                    return reads
                }
            }
            for try await _ in group {}
        }
        #expect(try await writer.value == 4000)
        #expect(try log.statistics().events == 4000)
        try store.check()
    }

    @Test func concurrentAppendersAreSerializedAndAllKept() async throws {
        let store = try TempStore()
        let log = store.log!
        let ids = try await withThrowingTaskGroup(of: [ULID].self) { group in
            for writer in 0..<8 {
                group.addTask {
                    var ids: [ULID] = []
                    for round in 0..<25 {
                        ids += try log.append(
                            workload(seed: UInt64(writer * 1000 + round), count: 4, jobs: 3, actor: "w\(writer)")
                        ).ids
                    }
                    return ids
                }
            }
            var all: [ULID] = []
            for try await ids in group { all += ids }
            return all
        }
        #expect(ids.count == 800)
        #expect(Set(ids).count == 800)
        #expect(try log.statistics().events == 800)
        try store.check()
    }
}

@Suite("Group commit")
struct GroupCommitTests {
    @Test func eachBatchOfAGroupIsAllOrNothingOnItsOwn() throws {
        let store = try TempStore()
        _ = try store.log.append(inputs(#"{"entity":"job/gone","kind":"delete"}"#))
        let results = try store.log.appendGroups([
            try inputs(
                #"{"entity":"job/1","kind":"edit","fields":{"a":1},"key":"first"}"#,
                #"{"entity":"job/2","kind":"status","status":"assigned"}"#),
            try inputs(
                #"{"entity":"job/1","kind":"edit","fields":{"a":2},"key":"failed"}"#,
                #"{"entity":"job/gone","kind":"edit","fields":{"a":1}}"#),
            try inputs(#"{"entity":"job/1","kind":"add","set":"s","element":1}"#),
        ])
        #expect(results.count == 3)
        let first = try results[0].get()
        #expect(first.appended == 2)
        switch results[1] {
        case .success: Issue.record("a batch editing a deleted entity was appended")
        case .failure(let error):
            #expect(error.reason == .deleted)
            #expect(try #require(error.index) == 1)
        }
        let third = try results[2].get()
        #expect(try #require(third.versions[entity("job/1")]) == third.ids[0])
        #expect(try store.log.statistics().events == 4)
        // The failed batch left nothing behind: not its event, not its key.
        let state = try #require(try stateJSON(store.log, "job/1"))
        #expect(state.contains(#""fields":{"a":1}"#))
        #expect(try store.log.append(inputs(#"{"entity":"job/9","kind":"delete","key":"failed"}"#)).appended == 1)
        #expect(try store.log.append(inputs(#"{"entity":"job/9","kind":"restore","key":"first"}"#)).appended == 0)
        try store.check()
    }

    @Test func laterBatchesSeeEarlierOnesAndIfMatchComparesPerBatch() throws {
        let store = try TempStore()
        let created = try store.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#))
        let v0 = try #require(created.revs[entity("job/1")])
        let results = try store.log.appendGroups([
            try inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":2},"if_match":\#(v0)}"#),
            // Read before the first batch: job/1 has changed since, so this one conflicts.
            try inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":3},"if_match":\#(v0)}"#),
        ])
        let v1 = try #require(try results[0].get().revs[entity("job/1")])
        let head1 = try results[0].get().ids[0]
        switch results[1] {
        case .success: Issue.record("a stale if_match was accepted")
        case .failure(let error): #expect(error.reason == .conflict)
        }
        let again = try store.log.appendGroups([
            try inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":4},"if_match":\#(v1)}"#)
        ])
        #expect(try again[0].get().appended == 1)
        // The edit's causal context names the head written by the previous group.
        let edit = try #require(try store.log.event(try again[0].get().ids[0]))
        #expect(
            edit.body
                == .edit(
                    fields: [FieldChange(name: "a", value: try JSONBytes(parsing: "4"))],
                    base: [FieldBase(field: "a", heads: [head1])]))
        try store.check()
    }

    @Test("groups that succeed and groups that fail, in any mix", arguments: 1...8)
    func mixedGroups(seed: UInt64) throws {
        let store = try TempStore()
        _ = try store.log.append(inputs(#"{"entity":"job/gone","kind":"delete"}"#))
        var rng = SeededGenerator(seed: seed)
        var kept = 1
        for round in 0..<6 {
            var groups: [[InputEvent]] = []
            var fails: [Bool] = []
            for index in 0..<Int.random(in: 1...12, using: &rng) {
                var group = workload(
                    seed: seed * 1000 + UInt64(round * 100 + index), count: Int.random(in: 1...20, using: &rng))
                let failing = Int.random(in: 0..<4, using: &rng) == 0
                if failing {
                    let bad = try inputs(#"{"entity":"job/gone","kind":"edit","fields":{"a":1}}"#)[0]
                    group.insert(bad, at: Int.random(in: 0...group.count, using: &rng))
                }
                groups.append(group)
                fails.append(failing)
            }
            let results = try store.log.appendGroups(groups)
            #expect(results.count == groups.count)
            for (index, result) in results.enumerated() {
                switch result {
                case .success(let appended):
                    #expect(!fails[index])
                    #expect(appended.ids.count == groups[index].count)
                    for id in appended.ids { #expect(try store.log.event(id) != nil) }
                    kept += appended.appended
                case .failure(let error):
                    #expect(fails[index])
                    #expect(error.reason == .deleted)
                }
            }
            #expect(try store.log.statistics().events == kept)
        }
        try store.check()
    }

    @Test func aGroupPastTheMapMaximumFailsAsAWholeAndKeepsEverything() throws {
        let store = try TempStore {
            $0.environment.initialMapSize = 1 << 20
            $0.environment.maxMapSize = 2 << 20
            $0.trainsDictionaryAutomatically = false
        }
        var acknowledged = 0
        var failure: EventStoreError?
        for round in 0..<100 {
            do {
                let results = try store.log.appendGroups([
                    workload(seed: UInt64(round), count: 100, jobs: 100),
                    workload(seed: UInt64(round + 1000), count: 100, jobs: 100),
                ])
                acknowledged += try results.reduce(0) { try $0 + $1.get().appended }
            } catch let error as EventStoreError {
                failure = error
                break
            }
        }
        #expect(try #require(failure).reason == .storageFull)
        #expect(try store.log.statistics().events == acknowledged)
        try store.check()
    }
}

@Suite("Status history")
struct StatusHistoryTests {
    @Test func aLongHistoryIsKeptWholeWhileTheProjectionStaysSmall() throws {
        let store = try TempStore()
        let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
        var ids: [ULID] = []
        for round in 0..<30 {
            let batch = try (0..<100).map { i in
                try input(#"{"entity":"gateway/g1","kind":"status","status":"\#(statuses[(round * 100 + i) % 5])"}"#)
            }
            ids += try store.log.append(batch).ids
        }
        let record = try #require(
            try store.log.environment.read { txn in try txn.get(store.log.tables.projections, Array("gateway/g1".utf8))
            })
        #expect(record.count < 300, "the projection record grew with the history: \(record.count) bytes")
        let history = try store.log.statusHistory(of: entity("gateway/g1"))
        #expect(history.map(\.id) == ids)
        #expect(history.last?.status == "done")
        let state = try #require(try stateJSON(store.log, "gateway/g1"))
        #expect(state.contains(#""current":"done""#))
        #expect(state.components(separatedBy: #""status":"en_route""#).count - 1 == 600)
        try store.check()
    }
}
