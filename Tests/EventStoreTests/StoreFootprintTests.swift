import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// The bytes the store takes per event, table by table (`EventLog.tableBytes`), and that
/// what was made smaller still answers as before.
@Suite("Store footprint")
struct StoreFootprintTests {
    static func bytesPerEvent(_ store: TempStore, _ table: String) throws -> Double {
        let scratch = store.directory + "-scratch"
        let bytes = try store.log.tableBytes(scratch: scratch).tables
        return Double(try #require(bytes[table])) / Double(try store.log.statistics().events)
    }

    /// Ids of one origin that come in order are appended to its index, which fills pages:
    /// 16 bytes an id and little more (a page split in the middle left them half empty,
    /// about 32 bytes an id).
    @Test func originIndexFillsItsPagesWhenIdsComeInOrder() throws {
        let store = try TempStore()
        let events = workload(seed: 41, count: 10_000, jobs: 1000)
        for start in stride(from: 0, to: events.count, by: 100) {
            _ = try store.log.append(Array(events[start..<start + 100]))
        }
        let perEvent = try StoreFootprintTests.bytesPerEvent(store, "origin_index")
        #expect(perEvent < 18, "origin_index takes \(perEvent) bytes per event")
    }

    /// Ids that come below those held (a peer's older events) still go in, in id order.
    @Test func originIndexTakesOlderIdsAfterNewerOnes() throws {
        let source = try TempStore()
        let events = workload(seed: 42, count: 3000, jobs: 300)
        for start in stride(from: 0, to: events.count, by: 500) {
            _ = try source.log.append(Array(events[start..<start + 500]))
        }
        let all = try source.log.replicationEvents(
            origin: source.log.nodeID, after: nil, limit: 10_000, maxBytes: .max
        ).events
        let target = try TempStore()
        // The newer half first, then the older half, then every second one of both again.
        _ = try target.log.ingest(Array(all[1500...]))
        _ = try target.log.ingest(Array(all[..<1500]))
        _ = try target.log.ingest(all.enumerated().filter { $0.offset % 2 == 0 }.map(\.element))
        let ids = try target.log.eventIDs(ofOrigin: source.log.nodeID, limit: 10_000)
        #expect(ids == all.compactMap(\.id))
        try target.check()
    }

    /// A history of up to `inlineHistoryLimit` entries is in the entity's projection record;
    /// the next status event moves it whole to `status_history`. `get` and the history
    /// read the same either way, and a peer's older status events take their place by id.
    @Test func aShortHistoryIsInTheRecordAndALongOneInItsTable() throws {
        let peer = try TempStore()
        let job = entity("job/h1")
        let older = try peer.log.append([
            InputEvent(entity: entity("job/h2"), change: .status("p1")), InputEvent(entity: job, change: .status("p2")),
        ]).ids
        let store = try TempStore()
        func tableEntries() throws -> Int {
            try store.log.reading { txn in try txn.stat(store.log.tables.statusHistory).entries }
        }
        var ids: [ULID] = []
        for index in 0..<EventLog.inlineHistoryLimit {
            ids += try store.log.append([InputEvent(entity: job, change: .status("s\(index)"))]).ids
        }
        #expect(try tableEntries() == 0)
        #expect(try store.log.statusHistory(of: job).map(\.id) == ids)
        let short = try #require(try store.log.canonicalState(of: job))
        try store.check()

        ids += try store.log.append([InputEvent(entity: job, change: .status("last"))]).ids
        #expect(try tableEntries() == EventLog.inlineHistoryLimit + 1)
        #expect(try store.log.statusHistory(of: job).map(\.id) == ids)
        ids += try store.log.append([InputEvent(entity: job, change: .status("later"))]).ids
        #expect(try tableEntries() == EventLog.inlineHistoryLimit + 2)
        #expect(try store.log.statusHistory(of: job).map(\.status).suffix(2) == ["last", "later"])
        let long = String(decoding: try #require(try store.log.canonicalState(of: job)), as: UTF8.self)
        #expect(long.contains(String(decoding: short, as: UTF8.self).split(separator: "]").first!))
        try store.check()
        try store.reopen()
        #expect(try store.log.statusHistory(of: job).map(\.id) == ids)

        // Older status events from a peer (made first), into a short history and a long one.
        let mine = try TempStore()
        let newer = try mine.log.append([InputEvent(entity: entity("job/h2"), change: .status("m1"))]).ids
        _ = try mine.log.ingest(
            try peer.log.replicationEvents(origin: peer.log.nodeID, after: nil, limit: 10, maxBytes: .max).events)
        #expect(try mine.log.statusHistory(of: entity("job/h2")).map(\.id) == [older[0], newer[0]])
        try mine.check()
        _ = try store.log.ingest(
            try peer.log.replicationEvents(origin: peer.log.nodeID, after: nil, limit: 10, maxBytes: .max).events)
        #expect(try store.log.statusHistory(of: job).map(\.id) == [older[1]] + ids)
        try store.check()
    }
}

