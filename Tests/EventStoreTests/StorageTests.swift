import Foundation
import Projections
import StoreTestSupport
import Synchronization
import Testing

@testable import EventStore

@Suite("Storage: dictionaries, map growth, full storage")
struct StorageTests {
    @Test func dictionaryChangesKeepOldEventsReadable() throws {
        let store = try TempStore {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
        }
        let events = workload(seed: 11, count: 3000, jobs: 200)
        var ids: [ULID] = []
        for chunk in stride(from: 0, to: 1000, by: 100) {
            ids += try store.log.append(Array(events[chunk..<chunk + 100])).ids
        }
        #expect(try store.log.statistics().dictionaryVersion == 1)
        for chunk in stride(from: 1000, to: 3000, by: 100) {
            ids += try store.log.append(Array(events[chunk..<chunk + 100])).ids
        }
        #expect(try store.log.statistics().dictionaryVersion == 1)
        #expect(try store.log.trainDictionary() == 2)
        ids += try store.log.append(Array(workload(seed: 12, count: 200))).ids
        try store.reopen()
        for id in ids { #expect(try store.log.event(id) != nil) }
        #expect(try store.log.trainDictionaryIfDue() == nil)
        try store.check()
    }

    @Test func aStoreThatDoesNotTrainItselfSaysOnceThatTrainingIsDue() throws {
        // The daemon trains on its maintenance thread: the store tells it after the commit
        // that makes a dictionary due, once, and again at the next tenfold growth.
        final class Calls: Sendable { let count = Mutex(0) }
        let calls = Calls()
        let store = try TempStore {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
            $0.trainsDictionaryAutomatically = false
            $0.trainingDue = { calls.count.withLock { $0 += 1 } }
        }
        let events = workload(seed: 21, count: 5100, jobs: 300)
        _ = try store.log.append(Array(events[0..<399]))
        #expect(calls.count.withLock { $0 } == 0)
        _ = try store.log.append([events[399]])
        #expect(calls.count.withLock { $0 } == 1)
        _ = try store.log.append(Array(events[400..<500]))
        #expect(calls.count.withLock { $0 } == 1, "told again before the training ran")
        #expect(try store.log.statistics().dictionaryVersion == 0, "the store trained by itself")
        // Trained at 500 events: due again at 5,000.
        #expect(try store.log.trainDictionaryIfDue() == 1)
        for start in stride(from: 500, to: 4999, by: 500) {
            _ = try store.log.append(Array(events[start..<min(start + 500, 4999)]))
        }
        #expect(calls.count.withLock { $0 } == 1)
        _ = try store.log.append(Array(events[4999..<5100]))
        #expect(calls.count.withLock { $0 } == 2, "the store grew tenfold since the training")
        try store.check()
    }

    @Test func theDictionaryMakesValuesSmaller() throws {
        let events = workload(seed: 5, count: 2000, jobs: 300)
        func valueBytes(_ store: TempStore) throws -> Int {
            // The blocks of the events after the first 1000 (those stored once trained).
            try store.log.environment.read { txn in
                try txn.withCursor(store.log.tables.blocks) { cursor in
                    var total = 0
                    var item = try cursor.seek(bigEndian(UInt64(1001)))
                    while let current = item {
                        total += current.value.count
                        item = try cursor.next()
                    }
                    return total
                }
            }
        }
        let plain = try TempStore { $0.trainsDictionaryAutomatically = false }
        let trained = try TempStore { $0.dictionaryTrainingThreshold = 1000 }
        for chunk in stride(from: 0, to: 2000, by: 500) {
            _ = try plain.log.append(Array(events[chunk..<chunk + 500]))
            _ = try trained.log.append(Array(events[chunk..<chunk + 500]))
        }
        let (withDictionary, without) = (try valueBytes(trained), try valueBytes(plain))
        print("blocks after the first 1000 events: \(withDictionary) bytes with a dictionary, \(without) without")
        #expect(withDictionary < without * 9 / 10)
    }

    @Test func theMapGrowsByItself() throws {
        let store = try TempStore { $0.environment.initialMapSize = 1 << 20 }
        let before = try store.log.statistics().mapSize
        let events = workload(seed: 2, count: 6000, jobs: 500)
        for chunk in stride(from: 0, to: 6000, by: 2000) {
            _ = try store.log.append(Array(events[chunk..<chunk + 2000]))
        }
        let after = try store.log.statistics()
        #expect(after.mapSize > before)
        #expect(after.events == 6000)
        try store.check()
    }

    @Test func pastTheMaximumAppendsFailWithStorageFullAndNothingIsLost() throws {
        let store = try TempStore {
            $0.environment.initialMapSize = 1 << 20
            $0.environment.maxMapSize = 2 << 20
            $0.trainsDictionaryAutomatically = false
        }
        var acknowledged: [ULID] = []
        var failure: EventStoreError?
        for round in 0..<200 {
            do {
                acknowledged += try store.log.append(workload(seed: UInt64(round), count: 200, jobs: 200)).ids
            } catch {
                failure = error
                break
            }
        }
        let error = try #require(failure)
        #expect(error.reason == .storageFull)
        #expect(error.message.contains("map_max_bytes"))
        // Reads keep working and every acknowledged event is there.
        for id in acknowledged { #expect(try store.log.event(id) != nil) }
        #expect(try store.log.statistics().events == acknowledged.count)
        try store.reopen()
        #expect(try store.log.statistics().events == acknowledged.count)
        // More room: it works again without anything else done.
        store.options.environment.maxMapSize = 64 << 20
        try store.reopen()
        _ = try store.log.append(workload(seed: 999, count: 200))
        try store.check()
    }

    @Test func aNewerFormatIsRefusedNotMisread() throws {
        let store = try TempStore()
        try store.log.environment.write { txn in
            try txn.put(store.log.tables.meta, EventLog.Meta.format, bigEndian(UInt32(99)))
        }
        store.log = nil
        do {
            _ = try EventLog.open(directory: store.directory, options: store.options)
            Issue.record("a format-99 store opened")
        } catch {
            #expect(error.message.contains("newer evstore"))
        }
    }
}

@Suite("Store options")
struct StoreOptionsTests {
    @Test(arguments: [0, -1, StoreOptions.absoluteMaxEventBytes + 1])
    func maxEventBytesOutOfRangeIsRefused(limit: Int) {
        var options = StoreOptions()
        options.maxEventBytes = limit
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evstore-options-\(UUID().uuidString)"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        do {
            _ = try EventLog.open(directory: directory, options: options)
            Issue.record("max_event_bytes \(limit) accepted")
        } catch {
            #expect(error.message.contains("max_event_bytes"))
        }
    }
}

@Suite("Backup")
struct BackupTests {
    @Test func aBackupTakenWhileServingOpensWithTheSameEventsAndDigest() throws {
        let store = try TempStore()
        _ = try store.log.append(workload(seed: 77, count: 2000, jobs: 100))
        let copy = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-backup-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: copy) }
        try FileManager.default.createDirectory(atPath: copy, withIntermediateDirectories: true)
        try store.log.backup(to: copy)
        _ = try store.log.append(workload(seed: 78, count: 10))
        let restored = try EventLog.open(directory: copy)
        let stats = try restored.statistics()
        #expect(stats.events == 2000)
        #expect(try restored.rebuild(verify: true).mismatched.isEmpty)
        #expect(stats.digest != (try store.log.statistics().digest))
    }
}

@Suite("Dictionary training that fails")
struct FailedTrainingTests {
    @Test func appendsGoOnAndTrainingWaitsForTheStoreToGrow() throws {
        // Training needs at least 16 samples; due at 10 events, it fails at first.
        let store = try TempStore { $0.dictionaryTrainingThreshold = 10 }
        _ = try store.log.append(workload(seed: 5, count: 12, jobs: 5))
        let retryAt = store.log.writer.withLock { $0.nextTrainingAt }
        #expect(retryAt == 24)
        _ = try store.log.append(workload(seed: 6, count: 5, jobs: 5))
        #expect(store.log.writer.withLock { $0.nextTrainingAt } == retryAt)
        #expect(try store.log.statistics().dictionaryVersion == 0)
        // Once the store has grown past the retry point, training runs again and succeeds.
        _ = try store.log.append(workload(seed: 7, count: 10, jobs: 5))
        #expect(try store.log.statistics().dictionaryVersion == 1)
        #expect(try store.log.statistics().events == 27)
        try store.check()
    }
}
