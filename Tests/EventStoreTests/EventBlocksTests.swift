import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// Events in blocks (store format 7): commits of every size, one event to hundreds and
/// events larger than a block's bound, read back by id, by seq and by entity as written;
/// a damaged block is `corrupt`, naming its seqs, and leaves the rest readable.
@Suite struct EventBlocksTests {
    @Test(arguments: [1, 2, 3] as [UInt64])
    func commitsOfEverySizeReadBackAsWritten(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let store = try TempStore { $0.dictionaryTrainingThreshold = 1500 }
        var written: [(id: ULID, entity: EntityKey)] = []
        for round in 0..<120 {
            // Mostly single events (a client each), now and then a batch, rarely a large event.
            let count = random.next() % 4 == 0 ? Int(random.next() % 200) + 2 : 1
            let inputs = (0..<count).map { index -> InputEvent in
                let name = entity("job/\(seed)-\(round)-\(index % 7)")
                if random.next() % 50 == 0 {
                    let notes = String(repeating: "n", count: 20_000 + Int(random.next() % 20_000))
                    return InputEvent(
                        entity: name,
                        change: .edit([FieldChange(name: "notes", value: try! JSONBytes(parsing: "\"\(notes)\""))]))
                }
                return InputEvent(
                    entity: name, change: .status(["assigned", "en_route", "done"][Int(random.next() % 3)]))
            }
            let result = try store.log.append(inputs)
            written += zip(result.ids, inputs.map(\.entity)).map { ($0, $1) }
        }
        // By seq: in the order written.
        let feed = try store.log.feed(after: 0, limit: 1_000_000, scanLimit: 1_000_000)
        #expect(feed.events.map(\.event.id) == written.map(\.id))
        #expect(feed.events.map(\.seq) == Array(1...UInt64(written.count)))
        // By id, at random, and resumed from every seq around a block's edges.
        for _ in 0..<300 {
            let pick = written[Int(random.next() % UInt64(written.count))]
            #expect(try store.log.event(pick.id)?.entity == pick.entity)
        }
        for after in [63, 64, 65, 127, 128, 129] as [UInt64] where after < UInt64(written.count) {
            let page = try store.log.feed(after: after, limit: 5)
            #expect(page.events.first?.seq == after + 1)
        }
        try store.check()
        try store.reopen()
        #expect(try store.log.feed(after: 0, limit: 1_000_000, scanLimit: 1_000_000).events.count == written.count)
        try store.check()
    }

    /// A store of 100 events, in a full block (seqs 1 to 64) and the tail, whose full block
    /// `damage` has replaced; the events' ids.
    private func eventsWithTheFirstBlock(
        damagedBecause reason: String, _ damage: ([UInt8]) throws -> [UInt8]
    ) throws -> (TempStore, [ULID]) {
        let store = try TempStore { $0.trainsDictionaryAutomatically = false }
        let inputs = (0..<100).map { InputEvent(entity: entity("job/\($0 % 20)"), change: .status("assigned")) }
        let ids = try store.log.append(inputs).ids
        store.writesTablesDirectly(because: reason)
        try store.log.environment.write { txn in
            let key = bigEndian(UInt64(1))
            let value = try #require(try txn.get(store.log.tables.blocks, key))
            try txn.put(store.log.tables.blocks, key, try damage(value))
        }
        store.log.blockCache.removeAll()
        return (store, ids)
    }

    /// A record whose JSON was damaged in a block written without a checksum (as blocks were
    /// before it was added) that still decompresses is `corrupt` to a read that passes events
    /// on without decoding them (`log`, a watch's catch-up), which checks their JSON, as to
    /// one that decodes them; the records around it still read.
    @Test func aRecordThatIsNotJSONIsCorruptToEveryRead() throws {
        // Record 11 (seq 11) loses its closing brace.
        let (store, ids) = try eventsWithTheFirstBlock(damagedBecause: "a record is damaged on purpose") { value in
            var records = try EventBlocks.records(of: value, first: 1, dictionaries: [:], decompressor: Decompressor())
            #expect(records.count == 64)
            records[10].payload.removeLast()
            let damaged = try EventBlocks.encode(
                records, dictionaryVersion: 0, dictionary: nil, compressor: Compressor(), checksum: false)
            #expect(!EventBlocks.hasChecksum(damaged, frameStart: try EventBlocks.header(damaged, first: 1).frameStart))
            return damaged
        }
        #expect(throws: EventStoreError.self) { try store.log.storedFeed(after: 0, limit: 64) }
        #expect(throws: EventStoreError.self) { try store.log.feed(after: 0, limit: 64) }
        #expect(throws: EventStoreError.self) { try store.log.event(ids[10]) }
        #expect(try store.log.storedFeed(after: 0, limit: 10).events.count == 10)
        #expect(try store.log.storedFeed(after: 11, limit: 100).events.count == 89)
    }

    /// What a write keeps of the events it has not put in a block yet: found by seq, and
    /// a job rolled back gives its seqs up to the next job's events.
    @Test func theUncommittedRecordsFollowTheSeqsOfTheWrite() {
        func record(_ n: UInt64) -> EventBlocks.Record {
            EventBlocks.Record(id: ULID(high: 1, low: n), payload: [UInt8(n)])
        }
        var kept = EventBlocks.Uncommitted()
        #expect(kept.record(at: 1) == nil)
        for seq in UInt64(5)...7 { kept.keep(record(seq), at: seq) }
        #expect(kept.record(at: 4) == nil)
        #expect(kept.record(at: 6)?.id == record(6).id)
        #expect(kept.record(at: 8) == nil)
        // A job that stored seqs 6 and 7 was rolled back; the next one takes 6 again.
        kept.keep(record(60), at: 6)
        #expect(kept.record(at: 5)?.id == record(5).id)
        #expect(kept.record(at: 6)?.id == record(60).id)
        #expect(kept.record(at: 7) == nil)
        kept.keep(record(70), at: 7)
        #expect(kept.record(at: 7)?.payload == [70])
        kept.removeAll()
        #expect(kept.record(at: 5) == nil)
        // The next write starts from its own first seq.
        kept.keep(record(8), at: 8)
        #expect(kept.record(at: 8)?.id == record(8).id)
        #expect(kept.record(at: 5) == nil)
    }

    /// A block's frame ends with zstd's checksum of its records: damage anywhere in them,
    /// JSON or not, is `corrupt` to every read, naming the block's seqs.
    @Test func aBlockWhoseRecordsDoNotMatchTheirChecksumIsCorrupt() throws {
        let (store, ids) = try eventsWithTheFirstBlock(damagedBecause: "a checksum is damaged on purpose") { value in
            let header = try EventBlocks.header(value, first: 1)
            #expect(EventBlocks.hasChecksum(value, frameStart: header.frameStart))
            // The checksum is the frame's last 4 bytes: the records still decompress as they
            // were written, and only the checksum tells them from damaged ones.
            var damaged = value
            damaged[damaged.count - 2] ^= 0x01
            return damaged
        }
        for read in [
            { _ = try store.log.storedFeed(after: 0, limit: 64) },
            { _ = try store.log.feed(after: 0, limit: 64) },
            { _ = try store.log.event(ids[10]) },
        ] as [() throws -> Void] {
            do {
                try read()
                Issue.record("a block whose checksum does not match was read")
            } catch let error as EventStoreError {
                #expect(error.reason == .corrupt && error.message.contains("seqs 1 to 64"), "\(error)")
            }
        }
        #expect(try store.log.storedFeed(after: 64, limit: 100).events.count == 36)
    }

    @Test func aDamagedBlockIsCorruptNamingItsSeqs() throws {
        let store = try TempStore { $0.trainsDictionaryAutomatically = false }
        let inputs = (0..<200).map { InputEvent(entity: entity("job/\($0 % 20)"), change: .status("assigned")) }
        let ids = try store.log.append(inputs).ids
        store.writesTablesDirectly(because: "a block is damaged on purpose")
        // The second block, seqs 65 to 128: bytes of its frame flipped.
        try store.log.environment.write { txn in
            let key = bigEndian(UInt64(65))
            var value = try #require(try txn.get(store.log.tables.blocks, key))
            for index in stride(from: value.count / 2, to: value.count, by: 7) { value[index] ^= 0x5A }
            try txn.put(store.log.tables.blocks, key, value)
        }
        store.log.blockCache.removeAll()
        #expect(throws: EventStoreError.self) { try store.log.event(ids[70]) }
        do {
            _ = try store.log.event(ids[70])
        } catch {
            #expect(error.reason == .corrupt && error.message.contains("seqs 65 to 128"), "\(error)")
        }
        // The blocks before and after still read.
        #expect(try store.log.event(ids[3]) != nil)
        #expect(try store.log.event(ids[150]) != nil)
        #expect(try store.log.feed(after: 0, limit: 64).events.count == 64)
        #expect(throws: EventStoreError.self) { try store.log.feed(after: 0, limit: 200) }
        // A block that says it holds more events than a block may is refused before it is decompressed.
        try store.log.environment.write { txn in
            var value = try #require(try txn.get(store.log.tables.blocks, bigEndian(UInt64(129))))
            value[2] = 0x7F
            try txn.put(store.log.tables.blocks, bigEndian(UInt64(129)), value)
        }
        store.log.blockCache.removeAll()
        do {
            _ = try store.log.event(ids[150])
            Issue.record("a block saying it holds 127 events was read")
        } catch {
            #expect(error.message.contains("seq 129") && error.message.contains("127 events"), "\(error)")
        }
    }

    /// The decompressed blocks kept for readers: bounded in bytes in total, a kept block read
    /// again without decompressing it, and a lowered bound applied at once.
    @Test func theBlockCacheKeepsToItsBytesAndServesWhatItKeeps() throws {
        let store = try TempStore {
            $0.trainsDictionaryAutomatically = false
            $0.blockCacheBytes = 64 << 10
        }
        var written: [(id: ULID, entity: EntityKey)] = []
        for round in 0..<20 {
            let inputs = (0..<100).map { index in
                InputEvent(
                    entity: entity("job/\(round)-\(index % 9)"),
                    change: .edit([
                        FieldChange(
                            name: "note",
                            value: try! JSONBytes(parsing: "\"visit \(round * 100 + index) at site \(index)\""))
                    ]))
            }
            written += zip(try store.log.append(inputs).ids, inputs.map(\.entity)).map { ($0, $1) }
        }
        var random = SplitMix64(seed: 11)
        func readAll() throws {
            for pick in written.shuffled(using: &random) {
                #expect(try store.log.event(pick.id)?.entity == pick.entity)
            }
        }
        try readAll()
        var statistics = store.log.blockCacheStatistics
        #expect(statistics.maxBytes == 64 << 10)
        #expect(statistics.blocks >= 1 && statistics.bytes > 0 && statistics.bytes <= 64 << 10)
        #expect(statistics.misses > statistics.blocks, "2,000 events' blocks do not fit in 64 KiB")

        // Read again at once: kept, not decompressed.
        let last = try #require(written.last)
        _ = try store.log.event(last.id)
        let before = store.log.blockCacheStatistics
        #expect(try store.log.event(last.id)?.entity == last.entity)
        #expect(store.log.blockCacheStatistics.hits == before.hits + 1)
        #expect(store.log.blockCacheStatistics.misses == before.misses)

        // None kept: every read decompresses, and reads are as right.
        store.log.setBlockCacheBytes(0)
        statistics = store.log.blockCacheStatistics
        #expect(statistics.blocks == 0 && statistics.bytes == 0)
        try readAll()
        #expect(store.log.blockCacheStatistics.blocks == 0)
        #expect(store.log.blockCacheStatistics.misses >= statistics.misses + written.count)

        // A walk through the log keeps only the block it stops in, where its next page starts.
        store.log.setBlockCacheBytes(1 << 30)
        let walked = try store.log.feed(after: 0, limit: 1_000_000, scanLimit: 1_000_000)
        #expect(walked.events.count == written.count)
        #expect(store.log.blockCacheStatistics.blocks == 1, "the walk pushed out the blocks reads come back to")
        let page = try store.log.feed(after: 100, limit: 10)
        #expect(page.events.map(\.seq) == Array(101...110))
        let beforeNextPage = store.log.blockCacheStatistics
        #expect(try store.log.feed(after: 110, limit: 10).events.map(\.seq) == Array(111...120))
        #expect(store.log.blockCacheStatistics.misses == beforeNextPage.misses, "the next page's block was kept")

        // Room for all: the second pass decompresses nothing.
        try readAll()
        let full = store.log.blockCacheStatistics
        #expect(full.blocks >= written.count / EventBlocks.maxEvents)
        try readAll()
        #expect(store.log.blockCacheStatistics.misses == full.misses)
        #expect(store.log.blockCacheStatistics.hits == full.hits + written.count)
    }

    /// A block of the tail is topped up by each commit under the same key: a reader that
    /// kept it before a commit gets the new one after, never the events it held then alone.
    @Test func aKeptBlockOfTheTailIsNotServedOnceACommitToppedItUp() throws {
        let store = try TempStore { $0.trainsDictionaryAutomatically = false }
        var ids: [ULID] = []
        for round in 0..<(EventBlocks.maxEvents + 5) {
            ids += try store.log.append([
                InputEvent(entity: entity("job/\(round % 3)"), change: .status(round % 2 == 0 ? "assigned" : "done"))
            ]).ids
            // Every event so far, read after each commit: the first ones from a block kept
            // since an earlier commit, the newest from the block that commit rewrote.
            for (index, id) in ids.enumerated() where index % 7 == 0 || index == ids.count - 1 {
                #expect(try store.log.event(id)?.id == id, "event \(index) after commit \(round)")
            }
        }
        #expect(store.log.blockCacheStatistics.hits > 0)
        try store.check()
    }

}
