import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// A new node takes its peer's compression dictionaries as its first (sync's `dictionary`
/// capability), rather than train its own on its first events.
@Suite("Dictionaries taken from a peer")
struct SharedDictionaryTests {
    /// A store that has trained both dictionaries on the field workload.
    static func trainedStore() throws -> TempStore {
        let store = try TempStore {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
        }
        _ = try store.log.append(workload(seed: 31, count: 600, jobs: 150))
        #expect(try store.log.statistics().dictionaryVersion == 1)
        return store
    }

    /// The stored form of every event of `source`, in id order per origin.
    static func replicated(_ source: EventLog) throws -> [ReplicatedEvent] {
        try source.replicationEvents(origin: source.nodeID, after: nil, limit: 100_000, maxBytes: .max).events
    }

    @Test("a store without a dictionary takes a peer's, compresses with it from its first event, and trains at tenfold")
    func takenByANewStore() throws {
        let source = try SharedDictionaryTests.trainedStore()
        let offered = try #require(try source.log.currentDictionaries())
        #expect(offered.events.starts(with: SharedDictionaries.magic))
        #expect(offered.records != nil, "the field workload's records train a dictionary of their own")

        let target = try TempStore {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
        }
        #expect(try !target.log.hasDictionary())
        #expect(try target.log.currentDictionaries() == nil)
        #expect(try target.log.adoptDictionaries(offered.loaded(level: 3)))
        #expect(try target.log.hasDictionary())
        #expect(try target.log.currentDictionaries() == offered)
        #expect(try target.log.statistics().dictionaryVersion == 1)

        // The events arrive as a sync brings them: stored in blocks compressed with the
        // dictionary taken, and no training at the store's threshold.
        let events = try SharedDictionaryTests.replicated(source.log)
        #expect(events.count == 600)
        #expect(try target.log.ingest(events, from: "source").ingested.count == 600)
        #expect(try target.log.statistics().dictionaryVersion == 1)
        let versions = try target.log.environment.read { txn in
            try target.log.tables.blockTables.flatMap { table in
                try txn.withCursor(table) { cursor in
                    var versions: [UInt32] = []
                    var item = try cursor.first()
                    while let current = item {
                        versions.append(try EventBlocks.header(current.value, first: 0).dictionaryVersion)
                        item = try cursor.next()
                    }
                    return versions
                }
            }
        }
        #expect(!versions.isEmpty && versions.allSatisfy { $0 == 1 }, "the blocks' dictionaries: \(versions)")
        // Taken at 0 events, it counts as trained at the threshold: the next at 4,000.
        _ = try target.log.append(workload(seed: 32, count: 3000, jobs: 150))
        #expect(try target.log.statistics().dictionaryVersion == 1)
        _ = try target.log.append(workload(seed: 33, count: 500, jobs: 150))
        #expect(try target.log.statistics().dictionaryVersion == 2)
        try target.reopen()
        for event in events { #expect(try target.log.event(event.id!) != nil) }
        #expect(try target.log.rebuild(verify: true).mismatched.isEmpty)
        try target.check()
    }

    @Test("a store that has a dictionary keeps it: the offer changes nothing")
    func keptWhenTheStoreHasOne() throws {
        let source = try SharedDictionaryTests.trainedStore()
        let other = try TempStore {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
        }
        _ = try other.log.append(workload(seed: 34, count: 450, jobs: 100))
        let own = try #require(try other.log.currentDictionaries())
        let theirs = try #require(try source.log.currentDictionaries())
        #expect(try !other.log.adoptDictionaries(theirs.loaded(level: 3)))
        #expect(try other.log.currentDictionaries() == own)
        #expect(try other.log.statistics().dictionaryVersion == 1)
    }

    @Test(
        "bytes that are not a dictionary this node can use are refused with invalid_params, and nothing changes",
        arguments: ["too large", "raw content", "magic only", "damaged tables", "damaged records"])
    func refused(_ kind: String) throws {
        let source = try SharedDictionaryTests.trainedStore()
        let good = try #require(try source.log.currentDictionaries())
        var offered = good
        switch kind {
        case "too large": offered.events = SharedDictionaries.magic + [UInt8](repeating: 7, count: 1 << 20)
        case "raw content": offered.events = Array(String(repeating: #"{"kind":"edit"}"#, count: 200).utf8)
        case "magic only": offered.events = SharedDictionaries.magic + [0, 0, 0, 1]
        case "damaged tables":
            // The entropy tables behind the magic and the id, overwritten.
            for index in 8..<200 { offered.events[index] = 0xFF }
        default:
            offered.records = SharedDictionaries.magic + [UInt8](repeating: 0xFF, count: 300)
        }
        let target = try TempStore()
        do throws(EventStoreError) {
            _ = try target.log.adoptDictionaries(offered.loaded(level: 3))
            Issue.record("\(kind) was taken")
        } catch {
            #expect(error.reason == .invalidParams, "\(error)")
            #expect(error.message.contains("dictionary offered"), "\(error.message)")
        }
        #expect(try !target.log.hasDictionary())
        #expect(try target.log.statistics().dictionaryVersion == 0)
        // The good one is still taken afterwards.
        #expect(try target.log.adoptDictionaries(good.loaded(level: 3)))
    }
}
