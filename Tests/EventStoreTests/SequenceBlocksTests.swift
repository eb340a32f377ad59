import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// The sequence table of formats 4 to 6 (which the upgrade to format 7 reads) against a
/// plain list of (seq, id): blocks appended in runs of
/// random lengths, with gaps between some runs, then read from every position.
@Suite struct SequenceBlocksTests {
    /// A seq's block, or the next one, walked to the end: what `feed` reads.
    static func walk(from seq: UInt64, table: Database, txn: borrowing ReadTransaction) throws -> [(UInt64, ULID)] {
        try txn.withCursor(table) { cursor in
            var out: [(UInt64, ULID)] = []
            var block = try SequenceBlocks.block(from: seq, cursor: &cursor)
            while let current = block {
                for index in 0..<current.count where current.first + UInt64(index) >= seq {
                    out.append((current.first + UInt64(index), try current.id(at: index)))
                }
                block = try SequenceBlocks.next(cursor: &cursor)
            }
            return out
        }
    }

    @Test(arguments: [1, 2, 3, 4])
    func blocksReadBackAsTheListTheyHold(seed: UInt64) throws {
        var random = SplitMix64(seed: seed)
        let store = try TempStore()
        store.writesTablesDirectly(because: "the blocks name ids of no stored event")
        // The sequence table of formats 4 to 6, which the upgrade to format 7 reads.
        let table = try store.log.environment.openDatabase("seq_blocks", flags: [.create])
        var model: [(UInt64, ULID)] = []
        var next: UInt64 = 1
        for _ in 0..<60 {
            // Mostly consecutive (as writes are), now and then a gap.
            if random.next() % 5 == 0 { next += random.next() % 300 + 1 }
            let count = Int(random.next() % 300) + 1
            let ids = (0..<count).map { _ in ULID(high: random.next(), low: random.next()) }
            let first = next
            try store.log.environment.write { txn in
                try SequenceBlocks.append(ids, first: first, table: table, txn: &txn)
            }
            for (offset, id) in ids.enumerated() { model.append((first + UInt64(offset), id)) }
            next += UInt64(count)
        }
        try store.log.environment.read { txn in
            #expect(try SequenceBlocks.last(table: table, txn: txn) == model.last!.0)
            var all: [(UInt64, ULID)] = []
            try SequenceBlocks.forEach(table: table, txn: txn) { all.append(($0, $1)) }
            #expect(all.map(\.0) == model.map(\.0))
            #expect(all.map(\.1) == model.map(\.1))
            // Every block within LMDB's inline limit.
            try txn.withCursor(table) { cursor in
                var item = try cursor.first()
                while let current = item {
                    #expect(current.value.count <= SequenceBlocks.capacity * 16)
                    item = try cursor.next()
                }
            }
            // From before the first, every seq held, seqs in gaps, and past the last.
            var starts: [UInt64] = [0, 1, model.last!.0, model.last!.0 + 1, model.last!.0 + 1000]
            for _ in 0..<200 { starts.append(random.next() % (model.last!.0 + 10)) }
            for start in starts {
                let got = try SequenceBlocksTests.walk(from: start, table: table, txn: txn)
                let expected = model.filter { $0.0 >= start }
                #expect(got.map(\.0) == expected.map(\.0), "from \(start)")
                #expect(got.map(\.1) == expected.map(\.1), "from \(start)")
            }
        }
    }
}

/// A small deterministic generator, so a failure repeats.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
