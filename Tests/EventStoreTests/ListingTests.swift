import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

@Suite("Listing entities and conflicts; node identity")
struct ListingTests {
    /// Every page of `entities(...)`, followed to the end with the cursor.
    func allPages(
        _ log: EventLog, type: String? = nil, status: String? = nil, includeDeleted: Bool = false, limit: Int
    ) throws -> [EntitySummary] {
        var all: [EntitySummary] = []
        var after: EntityKey?
        while true {
            let page = try log.entities(
                type: type, status: status, includeDeleted: includeDeleted, after: after, limit: limit)
            #expect(page.entities.count <= limit)
            all += page.entities
            guard let next = page.next else { break }
            #expect(next == page.entities.last?.entity)
            after = next
        }
        return all
    }

    @Test("pages by type and status agree with the states, for any page size", arguments: [1, 3, 7, 100])
    func pagesAgreeWithStates(limit: Int) throws {
        let store = try TempStore()
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let statuses = ["new", "on_site", "done"]
        var expected: [EntityKey: (status: String?, deleted: Bool)] = [:]
        var rng = SeededGenerator(seed: UInt64(limit))
        for index in 0..<40 {
            let type = ["job", "job-x", "site"][index % 3]
            let name = "\(type)/\(String(index, radix: 36))"
            var batch = [try input(#"{"entity":"\#(name)","kind":"edit","fields":{"n":\#(index)}}"#)]
            var status: String?
            if Bool.random(using: &rng) {
                status = statuses.randomElement(using: &rng)!
                batch.append(try input(#"{"entity":"\#(name)","kind":"status","status":"\#(status!)"}"#))
            }
            let deleted = index % 7 == 0
            if deleted { batch.append(try input(#"{"entity":"\#(name)","kind":"delete"}"#)) }
            _ = try store.log.append(batch)
            expected[entity(name)] = (status, deleted)
        }
        for type in [nil, "job", "job-x", "site"] as [String?] {
            for status in [nil, "new", "done", "absent"] as [String?] {
                for includeDeleted in [false, true] {
                    let listed = try allPages(
                        store.log, type: type, status: status, includeDeleted: includeDeleted, limit: limit)
                    let want = expected.filter { key, value in
                        (type == nil || key.type == type) && (status == nil || value.status == status)
                            && (includeDeleted || !value.deleted)
                    }.keys.sorted()
                    #expect(listed.map(\.entity) == want, "type \(type ?? "-") status \(status ?? "-")")
                    for summary in listed {
                        #expect(summary.status == expected[summary.entity]?.status)
                        #expect(summary.deleted == expected[summary.entity]?.deleted)
                        #expect(summary.version == (try store.log.state(of: summary.entity))?.version)
                    }
                }
            }
        }
    }

    @Test("types are the distinct types of the entities held, sorted, prefixes of each other included")
    func typesSkipScan() throws {
        let store = try TempStore()
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        #expect(try store.log.types() == [])
        // Types that are prefixes of each other, around '/' (0x2F) in byte order: '-'
        // (0x2D) sorts before it, '0'-'9' and '_' after; ids holding '/' and bytes on both
        // sides of '0'.
        let names = [
            "job/1", "job/a/b/c", "job/-", "job/0", "job/~", "job/\u{e9}t\u{e9}", "job2/1", "job-x/1", "job-x/2/3",
            "job_y/1", "jo/1", "a/1", "a0/z", "zz9/9", "site/depot/north",
        ]
        var batch: [InputEvent] = []
        for name in names { batch.append(try input(#"{"entity":"\#(name)","kind":"edit","fields":{"n":1}}"#)) }
        for index in 0..<300 { batch.append(try input(#"{"entity":"job/m\#(index)","kind":"status","status":"new"}"#)) }
        _ = try store.log.append(batch)
        // A deleted entity is still held: its type counts.
        _ = try store.log.append(inputs(#"{"entity":"gone/1","kind":"status","status":"x"}"#))
        _ = try store.log.append(inputs(#"{"entity":"gone/1","kind":"delete"}"#))
        let expected = Set(names.map { String($0.prefix { $0 != "/" }) } + ["gone"]).sorted {
            Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8))
        }
        #expect(expected.count == 10)
        let types = try store.log.types()
        #expect(types == expected)
        let listed = try allPages(store.log, includeDeleted: true, limit: 1000).map(\.entity.type)
        #expect(types == Array(Set(listed)).sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
    }

    @Test("conflicts are listed by entity with their fields, after an ingest makes them")
    func conflictsListed() throws {
        let a = try TempStore()
        let b = try TempStore()
        defer {
            try? FileManager.default.removeItem(atPath: a.directory)
            try? FileManager.default.removeItem(atPath: b.directory)
        }
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":1}}"#))
        _ = try b.log.ingest(try allStoredEvents(a.log))
        _ = try a.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":2}}"#))
        _ = try b.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":3}}"#))
        _ = try b.log.append(inputs(#"{"entity":"site/1","kind":"status","status":"up"}"#))
        _ = try a.log.append(inputs(#"{"entity":"site/1","kind":"status","status":"down"}"#))
        _ = try b.log.ingest(try allStoredEvents(a.log))
        let all = try b.log.conflicts(limit: 10)
        #expect(all.entities.map(\.entity.description) == ["job/1", "site/1"])
        #expect(all.entities[0].fields == ["x"] && !all.entities[0].status)
        #expect(all.entities[1].fields.isEmpty && all.entities[1].status)
        #expect(all.next == nil)
        let first = try b.log.conflicts(limit: 1)
        #expect(first.next == entity("job/1"))
        #expect(try b.log.conflicts(after: first.next, limit: 1).entities.map(\.entity) == [entity("site/1")])
        #expect(try b.log.conflicts(type: "site", limit: 10).entities.count == 1)
        // A plain edit joins the conflict; a resolution names every head and settles it.
        _ = try b.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":4}}"#))
        #expect(try b.log.conflicts(limit: 10).entities.count == 2)
        _ = try b.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"x":5},"resolve":true}"#))
        #expect(try b.log.conflicts(limit: 10).entities.map(\.entity) == [entity("site/1")])
    }

    @Test("a store opened on another machine takes a fresh node id; on the same one it keeps it")
    func machineChangeRenewsNodeID() throws {
        let store = try TempStore { $0.machineID = "machine-a" }
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let first = store.log.nodeID
        #expect(store.log.previousNodeID == nil)
        _ = try store.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"new"}"#))
        try store.reopen()
        #expect(store.log.nodeID == first && store.log.previousNodeID == nil)

        store.options.machineID = "machine-b"
        try store.reopen()
        let second = store.log.nodeID
        #expect(second != first && store.log.previousNodeID == first)
        let appended = try store.log.append(inputs(#"{"entity":"job/1","kind":"status","status":"done"}"#))
        #expect(try store.log.event(appended.ids[0])?.origin == second)
        // The old origin's events stay, under the old origin.
        #expect(try store.log.versionVector().keys.sorted() == [first, second].sorted())
        try store.reopen()
        #expect(store.log.nodeID == second && store.log.previousNodeID == nil)
        try store.check()
    }
}
