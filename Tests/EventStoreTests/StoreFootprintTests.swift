import Foundation
import Projections
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
}
