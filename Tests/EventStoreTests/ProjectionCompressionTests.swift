import Projections
import StoreTestSupport
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

    /// Whether `value` is a compressed record: its body's first byte after the hash, the
    /// rev and the body's length is the marker.
    private func isCompressed(_ value: [UInt8]) throws -> Bool {
        var reader = ByteReader(value)
        _ = try reader.ulid()
        _ = try reader.varint()
        _ = try reader.count()
        return try reader.byte() == EventLog.compressedProjectionMarker
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
        // A record that says its body is far larger than any is refused before decompressing.
        try store.log.environment.write { txn in
            var reader = ByteReader(value)
            _ = try reader.ulid()
            _ = try reader.varint()
            var header = Array(value[..<reader.position])
            var body: [UInt8] = [EventLog.compressedProjectionMarker, 0]
            body.appendVarint(UInt64.max >> 1)
            body += [0x28, 0xB5, 0x2F, 0xFD]
            header.appendLengthPrefixed(body)
            try txn.put(store.log.tables.projections, damaged.bytes, header)
        }
        do {
            _ = try store.log.state(of: damaged)
            Issue.record("a record claiming a huge body was read")
        } catch {
            #expect(error.reason == .corrupt && error.message.contains("says its body takes"), "\(error)")
        }
        // Repaired by a rebuild, from the events.
        _ = try store.log.rebuild()
        #expect(try store.log.state(of: damaged) != nil)
    }
}
