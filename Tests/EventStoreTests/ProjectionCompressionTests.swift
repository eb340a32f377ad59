import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

@Suite("Projection records compressed as written")
struct ProjectionCompressionTests {
    /// Every record of `store`: its key and the value as the table holds it.
    private func records(_ store: TempStore) throws -> [(entity: EntityKey, value: [UInt8])] {
        try store.log.environment.read { txn in
            try txn.withCursor(store.log.tables.projections) { cursor in
                var found: [(EntityKey, [UInt8])] = []
                var item = try cursor.first()
                while let current = item {
                    found.append((EntityKey(validated: current.key), current.value))
                    item = try cursor.next()
                }
                return found
            }
        }
    }

    /// Whether `value` is a compressed record: its first byte says so.
    private func isCompressed(_ value: [UInt8]) throws -> Bool {
        try dictionaryVersion(of: value) != nil
    }

    /// The dictionary version a compressed record names (0: none); nil when it is stored
    /// as folded.
    private func dictionaryVersion(of value: [UInt8]) throws -> UInt32? {
        guard value.first == EventLog.compressedProjectionForm else { return nil }
        var reader = ByteReader(value, at: 1)
        _ = try reader.varint()
        let code = try reader.varint()
        let version: UInt32? = EventLog.dictionaryVersion(code: code)
        #expect(version != nil, "dictionary code \(code) names none")
        return version ?? 0
    }

    @Test("records are stored compressed, with and without a dictionary, and read as folded", arguments: [false, true])
    func compressedAndReadBack(trained: Bool) throws {
        let store = try TempStore {
            $0.dictionaryTrainingThreshold = 500
            $0.trainsDictionaryAutomatically = trained
        }
        let inputs = workload(seed: 31, count: 1500, jobs: 60)
        for start in stride(from: 0, to: inputs.count, by: 250) {
            _ = try store.log.append(Array(inputs[start..<start + 250]))
        }
        #expect(try store.log.statistics().dictionaryVersion == (trained ? 1 : 0))
        let stored = try records(store)
        #expect(stored.count == 60)
        var folded = 0
        var packed = 0
        for (entity, value) in stored {
            #expect(try isCompressed(value), "\(entity) is stored as folded")
            let record = try store.log.environment.read { txn in try store.log.expanded(value, entity: entity, txn: txn)
            }
            folded += record.bytes.count
            packed += value.count
            // What is read is what the events fold to.
            let events = try store.log.environment.read { txn in try store.log.events(of: entity, txn: txn) }
            #expect(try store.log.state(of: entity) == Projection.fold(entity, events))
        }
        print("records: \(folded) bytes as folded, \(packed) stored (dictionary: \(trained))")
        #expect(packed < folded * 3 / 4)
        // Trained, records take their own dictionary (from its base on), the events theirs.
        let versions = Set(try stored.map { try #require(try dictionaryVersion(of: $0.value)) })
        if trained {
            #expect(versions.contains(EventLog.recordDictionaryBase + 1), "\(versions)")
        } else {
            #expect(versions == [0])
        }
        // They read the same after a reopen, which loads the dictionaries again.
        let states = try stored.map { try store.log.state(of: $0.entity) }
        try store.reopen()
        #expect(try stored.map { try store.log.state(of: $0.entity) } == states)
        // A rebuild folds the same records, byte for byte once expanded, and the same digest.
        let report = try store.log.rebuild(verify: true)
        #expect(report.mismatched.isEmpty && !report.digestMismatch)
        // A rebuild writes them compressed too.
        _ = try store.log.rebuild()
        let rebuilt = try records(store)
        #expect(rebuilt.count == stored.count)
        for (entity, value) in rebuilt { #expect(try isCompressed(value), "\(entity) was rebuilt as folded") }
        try store.check()
    }

    /// Flipped, dropped, added and cut bytes anywhere in a compressed record: it expands
    /// and decodes, or it throws; it never traps, and never inflates past its bound.
    @Test("the first training samples fewer events and records than the later ones")
    func firstTrainingSamplesFewer() throws {
        let store = try TempStore {
            $0.dictionaryTrainingThreshold = 500
            $0.trainsDictionaryAutomatically = false
            $0.firstDictionarySampleCount = 400
            $0.dictionarySampleCount = 1200
        }
        // 400 jobs, so both trainings find more records than they take.
        let inputs = workload(seed: 37, count: 1500, jobs: 400)
        for start in stride(from: 0, to: inputs.count, by: 500) {
            _ = try store.log.append(Array(inputs[start..<start + 500]))
        }
        let records = try self.records(store).count
        #expect(records > 1200 / 4)
        let first = try store.log.prepareDictionary()
        #expect(first.eventSamples == 400)
        #expect(first.recordSamples == 100)
        #expect(try store.log.install(first) == 1)
        // Once the store holds a dictionary, trainings take the full sample.
        let second = try store.log.prepareDictionary()
        #expect(second.eventSamples == 1200)
        #expect(second.recordSamples == 300)
        #expect(try store.log.install(second) == 2)
        // Events appended after either read back the same.
        _ = try store.log.append(workload(seed: 38, count: 100, jobs: 10))
        try store.reopen()
        #expect(try store.log.statistics().events == 1600)
    }

    @Test("mutated compressed records throw or read, never trap", arguments: 1...3)
    func mutatedRecords(seed: UInt64) throws {
        let store = try TempStore { $0.dictionaryTrainingThreshold = 200 }
        for start in stride(from: 0, to: 600, by: 200) {
            _ = try store.log.append(Array(workload(seed: 40 + seed, count: 600, jobs: 20)[start..<start + 200]))
        }
        var rng = SeededGenerator(seed: seed)
        var refused = 0
        var read = 0
        try store.log.environment.read { txn in
            for (entity, value) in try records(store) {
                #expect(try isCompressed(value))
                for _ in 0..<40 {
                    var mutated = value
                    damage(&mutated, using: &rng)
                    do {
                        let record = try store.log.expanded(mutated, entity: entity, txn: txn)
                        _ = try EventLog.decodeProjection(record, entity: entity, history: true)
                        read += 1
                    } catch {
                        refused += 1
                    }
                }
            }
        }
        print("mutated records: \(refused) refused, \(read) read")
        #expect(refused > 0)
    }

    @Test("a store whose meta names a record dictionary it does not hold is refused at open")
    func missingRecordDictionaryIsRefused() throws {
        let store = try TempStore { $0.dictionaryTrainingThreshold = 300 }
        _ = try store.log.append(workload(seed: 33, count: 400, jobs: 30))
        let base = EventLog.recordDictionaryBase
        let version = try store.log.environment.read { txn in
            try txn.get(store.log.tables.meta, EventLog.Meta.recordDictionaryVersion).map(uint32(bigEndian:))
        }
        #expect(version == base + 1)
        store.writesTablesDirectly(because: "the meta names a record dictionary the store lacks")
        try store.log.environment.write { txn in
            try txn.put(store.log.tables.meta, EventLog.Meta.recordDictionaryVersion, bigEndian(base + 2))
        }
        do {
            try store.reopen()
            Issue.record("a store lacking its current record dictionary was opened")
        } catch {
            #expect(
                "\(error)".contains("projection record dictionary 2 as current, but dictionary 2 is missing"),
                "\(error)")
        }
    }

    @Test("a damaged compressed record is corrupt, naming its entity, and the others read")
    func damagedRecordIsCorrupt() throws {
        let store = try TempStore { $0.trainsDictionaryAutomatically = false }
        _ = try store.log.append(workload(seed: 32, count: 400, jobs: 10))
        let stored = try records(store)
        let (damaged, value) = try #require(stored.first)
        #expect(try isCompressed(value))
        store.writesTablesDirectly(because: "a projection record is damaged on purpose")
        try store.log.environment.write { txn in
            var broken = value
            for index in stride(from: broken.count - 24, to: broken.count, by: 3) { broken[index] ^= 0x5A }
            try txn.put(store.log.tables.projections, damaged.bytes, broken)
        }
        do {
            _ = try store.log.state(of: damaged)
            Issue.record("a damaged record was read")
        } catch {
            #expect(error.reason == .corrupt && error.message.contains("\(damaged)"), "\(error)")
        }
        #expect(throws: EventStoreError.self) { try store.log.canonicalState(of: damaged) }
        for (entity, _) in stored.dropFirst() { #expect(try store.log.state(of: entity) != nil) }
        // A record whose frame says its body is far larger than any is refused before it
        // is decompressed: a frame of one empty last block declaring 2^40 bytes.
        var huge: [UInt8] = [EventLog.compressedProjectionForm, 7, 0, 0x28, 0xB5, 0x2F, 0xFD, 0xE0]
        huge += [0, 0, 0, 0, 0, 1, 0, 0]
        huge += [0x01, 0x00, 0x00]
        // And a record of a form no release writes.
        let unknown: [UInt8] = [0x05] + value.dropFirst()
        for (bad, says) in [(huge, "does not decompress"), (unknown, "unknown form")] {
            try store.log.environment.write { txn in try txn.put(store.log.tables.projections, damaged.bytes, bad) }
            do {
                _ = try store.log.state(of: damaged)
                Issue.record("a bad record was read: \(bad.prefix(16))")
            } catch {
                #expect(error.reason == .corrupt && error.message.contains(says), "\(error)")
            }
        }
        // Repaired by a rebuild, from the events.
        _ = try store.log.rebuild()
        #expect(try store.log.state(of: damaged) != nil)
    }
}
