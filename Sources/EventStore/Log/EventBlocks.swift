import Projections
import Synchronization

/// The events of store format 7: kept in blocks, a run of consecutive seqs compressed
/// together as one value of `event_blocks`, keyed by its first seq (8 bytes, big-endian).
///
/// ```
/// byte 0      format (2; 1 was a value of one event)
/// varint      dictionary version the frame was compressed with (0: none)
/// varint      count: the events, seqs first ..< first + count
/// varint      the records' length in bytes, before compression
/// rest        one zstd frame of the records, in seq order, each
///               id (16 bytes) | length (4 bytes, big-endian) | canonical JSON without the id
/// ```
///
/// The records are laid out as a sync batch's (`BatchCodec`). zstd compresses a run of
/// small, similar events far better than each alone: 64 fieldops events take about 20 bytes
/// each against 51 one at a time, with the same dictionary (docs/performance.md). A block
/// holds at most `maxEvents` events and, with more than one, at most `maxRecordBytes` of
/// records: reading one event decompresses its block, a few microseconds. `events` maps
/// each id to its seq, and the block holding a seq is the last one whose key is at most it.
///
/// A block is written whole in the transaction that stores its events. Full blocks go to
/// `event_blocks`; the last commits' events wait in `event_tail`, in small blocks that
/// together hold less than a full one, until a commit compresses them with its own into
/// full blocks (`WriteBatch.writeBlocks`). So small commits (one client's event each) leave
/// full blocks rather than one per commit, and a block of `event_blocks` is never written
/// again.
package enum EventBlocks {
    static let format: UInt8 = 2
    /// Events per block, and the records' bytes of a block of more than one event, chosen
    /// by measurement (docs/performance.md, "Store format 7"): 64 events of the field
    /// workload take 20.1 bytes each and decompress in about 6 µs; 32 take 23 and 4 µs.
    static let maxEvents = 64
    static let maxRecordBytes = 16 << 10
    static let recordHeaderBytes = 20

    /// One event of a block.
    struct Record {
        let id: ULID
        let payload: [UInt8]
    }

    /// The events a write in progress stored and has not put in a block yet
    /// (`EventLog.uncommitted`): their seqs are consecutive, from `first`.
    struct Uncommitted {
        private var first: UInt64 = 0
        private var records: [Record] = []

        /// Keeps `record`, stored at `seq`: the seq after the last one kept, or one a job
        /// that was rolled back had taken (what it kept from there on goes).
        mutating func keep(_ record: Record, at seq: UInt64) {
            if records.isEmpty || seq < first {
                first = seq
                records.removeAll(keepingCapacity: true)
            } else if seq - first < UInt64(records.count) {
                records.removeSubrange(Int(seq - first)...)
            }
            assert(seq == first + UInt64(records.count), "the seqs of one write are consecutive")
            records.append(record)
        }

        /// The record kept at `seq`, if any.
        func record(at seq: UInt64) -> Record? {
            guard seq >= first, seq - first < UInt64(records.count) else { return nil }
            return records[Int(seq - first)]
        }

        mutating func removeAll() { records.removeAll(keepingCapacity: true) }
    }

    /// A block's value for `records` (at least one). Its frame ends with zstd's checksum of
    /// the records unless `checksum` is false (as blocks were written before it was added).
    static func encode(
        _ records: some Collection<Record>, dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor, checksum: Bool = true
    ) throws -> [UInt8] {
        var raw: [UInt8] = []
        raw.reserveCapacity(records.reduce(0) { $0 + recordHeaderBytes + $1.payload.count })
        for record in records {
            record.id.append(to: &raw)
            let length = UInt32(record.payload.count)
            raw.append(UInt8(truncatingIfNeeded: length >> 24))
            raw.append(UInt8(truncatingIfNeeded: length >> 16))
            raw.append(UInt8(truncatingIfNeeded: length >> 8))
            raw.append(UInt8(truncatingIfNeeded: length))
            raw.append(contentsOf: record.payload)
        }
        var out: [UInt8] = []
        out.reserveCapacity(raw.count / 3 + 32)
        out.append(format)
        out.appendVarint(UInt64(dictionaryVersion))
        out.appendVarint(records.count)
        out.appendVarint(raw.count)
        try compressor.compress(raw, dictionary: dictionary, checksum: checksum, appendingTo: &out)
        return out
    }

    /// Whether the zstd frame at `start` of `value` ends with a checksum of its content: bit
    /// 2 of the frame header's descriptor, the byte after the 4-byte magic number.
    static func hasChecksum(_ value: [UInt8], frameStart start: Int) -> Bool {
        value.count > start + 4 && value[start + 4] & 0x04 != 0
    }

    /// What a block's header says, its frame not decompressed.
    struct Header {
        let dictionaryVersion: UInt32
        let count: Int
        let rawBytes: Int
        /// Where the zstd frame starts in the value.
        let frameStart: Int
    }

    /// The header of the block at `first`; a value that is not a block of this format is
    /// `corrupt`, naming the seq it starts at.
    static func header(_ value: [UInt8], first: UInt64) throws(CorruptDataError) -> Header {
        var reader = ByteReader(value)
        do throws(CorruptDataError) {
            let format = try reader.byte()
            guard format == EventBlocks.format else {
                throw CorruptDataError("its format is \(format); this version reads block format \(EventBlocks.format)")
            }
            let version = try reader.varint()
            guard version <= UInt64(UInt32.max) else {
                throw CorruptDataError("its dictionary version is out of range")
            }
            let count = try reader.varint()
            guard count >= 1, count <= UInt64(maxEvents) else {
                throw CorruptDataError("it says it holds \(count) events; a block holds 1 to \(maxEvents)")
            }
            let raw = try reader.varint()
            let limit = count == 1 ? StoreOptions.absoluteMaxEventBytes + recordHeaderBytes : maxRecordBytes
            guard raw >= count * UInt64(recordHeaderBytes), raw <= UInt64(limit) else {
                throw CorruptDataError("it says its \(count) records take \(raw) bytes")
            }
            return Header(
                dictionaryVersion: UInt32(version), count: Int(count), rawBytes: Int(raw), frameStart: reader.position)
        } catch {
            throw CorruptDataError("the block of seq \(first) does not read: \(error.message)")
        }
    }

    /// Decompresses the block `value` at `first` whose header is `header`, with its
    /// dictionary, and checks its records: a block that does not add up is `corrupt`, naming
    /// the seqs it covers.
    static func decode(
        _ value: [UInt8], first: UInt64, header: Header, dictionary: CompressionDictionary?,
        decompressor: Decompressor
    ) throws(CorruptDataError) -> DecodedBlock {
        let raw: [UInt8]
        do {
            raw = try decompressor.decompress(
                value[header.frameStart...], dictionary: dictionary, maxSize: header.rawBytes)
        } catch {
            throw CorruptDataError("the block of \(seqs(first, header.count)) does not decompress: \(error)")
        }
        guard raw.count == header.rawBytes else {
            throw CorruptDataError(
                "the block of \(seqs(first, header.count)) holds \(raw.count) bytes of records, not the \(header.rawBytes) it says"
            )
        }
        // zstd verified the checksum while decompressing, when the frame has one.
        return try DecodedBlock(
            first: first, value: value, raw: raw, count: header.count,
            checksummed: hasChecksum(value, frameStart: header.frameStart))
    }

    /// A block's records, read as the store reads them (the block fuzzer's entry):
    /// `dictionaries` stands for the store's dictionary table.
    package static func records(
        of value: [UInt8], first: UInt64, dictionaries: [UInt32: CompressionDictionary], decompressor: Decompressor
    ) throws -> [(id: ULID, payload: [UInt8])] {
        let header = try header(value, first: first)
        let dictionary = try EventLog.dictionary(header.dictionaryVersion, in: dictionaries)
        let block = try decode(value, first: first, header: header, dictionary: dictionary, decompressor: decompressor)
        return (0..<block.count).map { (block.id(at: $0), block.payload(at: $0)) }
    }

    /// A block's value for `records`, as the store writes one (the block fuzzer's seeds), or
    /// without the checksum, as blocks were written before it was added.
    package static func encode(
        _ records: [(id: ULID, payload: [UInt8])], dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor, checksum: Bool = true
    ) throws -> [UInt8] {
        try encode(
            records.map { Record(id: $0.id, payload: $0.payload) }, dictionaryVersion: dictionaryVersion,
            dictionary: dictionary, compressor: compressor, checksum: checksum)
    }

    /// The first seq of the block `entry`: its key.
    static func first(of entry: Cursor.Entry) throws(CorruptDataError) -> UInt64 {
        try first(ofKey: entry.key)
    }

    static func first(ofKey key: [UInt8]) throws(CorruptDataError) -> UInt64 {
        guard key.count == 8 else { throw CorruptDataError("an event_blocks key is not a seq") }
        return uint64(bigEndian: key)
    }

    /// The seqs the block `entry` holds, from its key and header alone (nothing decompressed).
    static func span(of entry: Cursor.Entry) throws(CorruptDataError) -> Range<UInt64> {
        let first = try first(of: entry)
        let (end, overflow) = first.addingReportingOverflow(UInt64(try header(entry.value, first: first).count))
        guard !overflow else { throw CorruptDataError("the block of seq \(first) runs past the last seq") }
        return first..<end
    }

    /// The seqs a block at `first` with `count` events covers, for messages.
    static func seqs(_ first: UInt64, _ count: Int) -> String {
        count == 1 ? "seq \(first)" : "seqs \(first) to \(first &+ UInt64(count) &- 1)"
    }
}

/// A block decompressed: its records' bytes and where each record starts.
struct DecodedBlock: Sendable {
    let first: UInt64
    /// The value it was decoded from, compressed: what tells a block of the tail from the
    /// one written under its key before it (a cached block is used only for the same bytes).
    let value: [UInt8]
    let raw: [UInt8]
    /// The offset in `raw` of each record's id.
    let starts: [Int]
    /// Whether its frame carried a checksum of its content, which zstd verified: a record
    /// damaged on disk would not have decompressed.
    let checksummed: Bool

    var count: Int { starts.count }
    /// The seq after its last event.
    var end: UInt64 { first + UInt64(count) }

    func contains(_ seq: UInt64) -> Bool { seq >= first && seq < end }

    func id(at index: Int) -> ULID { ULID(bytes: raw, at: starts[index])! }

    func payload(at index: Int) -> [UInt8] {
        let start = starts[index] + EventBlocks.recordHeaderBytes
        let end = index + 1 < starts.count ? starts[index + 1] : raw.count
        return Array(raw[start..<end])
    }

    func record(at index: Int) -> EventBlocks.Record {
        EventBlocks.Record(id: id(at: index), payload: payload(at: index))
    }

    /// Checks the records laid out in `raw` against what the header says: `count` records
    /// that fill it exactly (any 16 bytes are an id).
    init(first: UInt64, value: [UInt8], raw: [UInt8], count: Int, checksummed: Bool) throws(CorruptDataError) {
        self.value = value
        self.checksummed = checksummed
        var starts: [Int] = []
        starts.reserveCapacity(count)
        var position = 0
        while position < raw.count {
            guard starts.count < count, raw.count - position >= EventBlocks.recordHeaderBytes else {
                throw CorruptDataError(
                    "the block of \(EventBlocks.seqs(first, count)) does not read: its records do not end where it says"
                )
            }
            var length = 0
            for byte in raw[(position + 16)..<(position + 20)] { length = length << 8 | Int(byte) }
            guard length <= raw.count - position - EventBlocks.recordHeaderBytes else {
                throw CorruptDataError(
                    "the block of \(EventBlocks.seqs(first, count)) does not read: record \(starts.count) runs past its end"
                )
            }
            starts.append(position)
            position += EventBlocks.recordHeaderBytes + length
        }
        guard starts.count == count else {
            throw CorruptDataError(
                "the block of \(EventBlocks.seqs(first, count)) does not read: it holds \(starts.count) records, not \(count)"
            )
        }
        self.first = first
        self.raw = raw
        self.starts = starts
    }
}

/// The blocks read last, decompressed, for readers that go through a run of them (`log`,
/// a peer's range, an entity's history) or come back to one (one event by id, at random).
/// Shared by every reader and bounded in bytes in total (`StoreOptions.blockCacheBytes`,
/// `block_cache_bytes`): past it the least recently used go. A block never changes once
/// written, but for the last one, which a commit may top up under the same key (and a write
/// that failed may have left one under a key a later write takes); an entry is used only
/// for the very bytes it was decoded from. A read by seq compares them where they lie in
/// the map (`block(_:storedIn:)`), so a hit copies nothing; a walk compares the value it
/// copied out anyway. Walks keep only the block they stop in (`forEachStored`).
public final class BlockCache: Sendable {
    /// Bounds the entries however small the blocks: a block of one event costs little.
    static let maxEntries = 1 << 16
    /// What a block costs beside its bytes: the entry, its arrays' headers.
    static let overheadBytes = 160

    /// The cached blocks by first seq.
    private let blocks: Mutex<LeastRecentlyUsed<UInt64, DecodedBlock>>
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)

    /// What the cache holds and has done, for `status`.
    public struct Statistics: Sendable, Equatable {
        public var blocks: Int
        public var bytes: Int
        public var maxBytes: Int
        /// Reads of a block served by the cache.
        public var hits: Int
        /// Blocks decompressed.
        public var misses: Int
    }

    init(maxBytes: Int) {
        blocks = Mutex(LeastRecentlyUsed(maxEntries: BlockCache.maxEntries, maxCost: max(0, maxBytes)))
    }

    /// The bytes `block` holds the cache to.
    static func cost(of block: DecodedBlock) -> Int {
        block.value.count + block.raw.count + block.starts.count * MemoryLayout<Int>.stride + overheadBytes
    }

    /// The block kept under `first` when it was decoded from the value at `cursor`,
    /// compared where it lies in the map. Not counted: the caller counts it as a hit if it
    /// holds what it looks for (`countHit`).
    func block(_ first: UInt64, storedIn cursor: inout Cursor) throws -> DecodedBlock? {
        // Taken out under the lock and compared outside it: a block another reader replaces
        // meanwhile is still the one compared, and a hit marks whatever is kept as used.
        guard let kept = blocks.withLock({ $0.peek(first) }), try cursor.currentValueEquals(kept.value) else {
            return nil
        }
        blocks.withLock { _ = $0.value(for: first) }
        return kept
    }

    /// The block kept under `first` when it was decoded from `value`; counted as a hit.
    func block(_ first: UInt64, value: [UInt8]) -> DecodedBlock? {
        let found = blocks.withLock { blocks in
            blocks.value(for: first) { $0.value == value }
        }
        if found != nil { countHit() }
        return found
    }

    /// A read served by a kept block.
    func countHit() { hits.add(1, ordering: .relaxed) }

    /// A block decompressed (kept or not).
    func countMiss() { misses.add(1, ordering: .relaxed) }

    func keep(_ block: DecodedBlock) {
        let cost = BlockCache.cost(of: block)
        blocks.withLock { $0.set(block, for: block.first, cost: cost) }
    }

    func removeAll() { blocks.withLock { $0.removeAll() } }

    /// Holds the cache to `maxBytes` from now on, dropping the least recently used blocks
    /// past it (0: none kept).
    func setMaxBytes(_ maxBytes: Int) { blocks.withLock { $0.setMaxCost(max(0, maxBytes)) } }

    var statistics: Statistics {
        let (count, bytes, maxBytes) = blocks.withLock { ($0.count, $0.cost, $0.maxCost) }
        return Statistics(
            blocks: count, bytes: bytes, maxBytes: maxBytes, hits: hits.load(ordering: .relaxed),
            misses: misses.load(ordering: .relaxed))
    }
}

extension EventLog {
    /// The seq the event `id` took here, nil when it is not held.
    func seq(of id: ULID, txn: borrowing some TransactionReading & ~Copyable) throws -> UInt64? {
        guard let value = try txn.get(tables.events, id.bytes) else { return nil }
        return try EventLog.seq(indexValue: value, id: id)
    }

    static func seq(indexValue value: [UInt8], id: ULID) throws -> UInt64 {
        var reader = ByteReader(value)
        guard let seq = try? reader.varint(), reader.isAtEnd, seq > 0 else {
            throw CorruptDataError("the events index holds no seq for \(id)")
        }
        return seq
    }

    /// The block that holds `seq`, decompressed; nil when no block does.
    func block(holding seq: UInt64, txn: borrowing some TransactionReading & ~Copyable) throws -> DecodedBlock? {
        let key = bigEndian(seq)
        for table in tables.blockTables {
            // The block that would hold `seq`: kept in the cache with the very bytes stored
            // under its key (compared in place, not copied), or copied out to be decoded.
            let found = try txn.withCursor(table) { cursor -> BlockLookup in
                guard let blockKey = try EventLog.blockKey(atOrBefore: key, &cursor) else { return .noBlock }
                let first = try EventBlocks.first(ofKey: blockKey)
                if let kept = try blockCache.block(first, storedIn: &cursor) { return .kept(kept) }
                return try cursor.current().map { .stored($0) } ?? .noBlock
            }
            switch found {
            case .noBlock: continue
            case .kept(let block):
                // The last full block, when `seq` is in the tail.
                guard block.contains(seq) else { continue }
                blockCache.countHit()
                return block
            case .stored(let entry):
                // Passed over by its header when it does not hold `seq`; a decoded block
                // holds what its header says.
                guard try EventBlocks.span(of: entry).contains(seq) else { continue }
                return try decodeBlock(entry, txn: txn, lookUp: false)
            }
        }
        return nil
    }

    /// Where `block(holding:)` found the block of one table that would hold a seq.
    private enum BlockLookup {
        /// Every block of the table starts after the seq.
        case noBlock
        case kept(DecodedBlock)
        case stored(Cursor.Entry)
    }

    /// The key of the block of `cursor`'s table with the greatest key at most `key`, the
    /// cursor on it: the one that holds that seq if any does. Nil when every block starts
    /// after it. Moves by keys, copying no value.
    static func blockKey(atOrBefore key: [UInt8], _ cursor: inout Cursor) throws -> [UInt8]? {
        guard let found = try cursor.seekKey(key) else { return try cursor.lastKey() }
        if found == key { return found }
        return try cursor.prevKey()
    }

    /// The block of `cursor`'s table with the greatest key at most `key`: the one that holds
    /// that seq if any does. Nil when every block starts after it. Moves by keys, so the
    /// block after it is passed over uncopied.
    static func block(atOrBefore key: [UInt8], _ cursor: inout Cursor) throws -> Cursor.Entry? {
        guard try blockKey(atOrBefore: key, &cursor) != nil else { return nil }
        return try cursor.current()
    }

    /// A block's entry decompressed, its records checked: taken from the cache when
    /// `lookUp` (unless the caller has looked there already), and kept there once
    /// decompressed when `keep`. A walk through many blocks (`forEachStored`, the writer's
    /// merge of the tail, a rebuild) keeps none of them, so it does not push out the blocks
    /// that reads by id come back to.
    func decodeBlock(
        _ entry: Cursor.Entry, txn: borrowing some TransactionReading & ~Copyable, lookUp: Bool = true,
        keep: Bool = true
    ) throws -> DecodedBlock {
        let first = try EventBlocks.first(of: entry)
        if lookUp, let cached = blockCache.block(first, value: entry.value) { return cached }
        blockCache.countMiss()
        let header = try EventBlocks.header(entry.value, first: first)
        let dictionary = try dictionary(header.dictionaryVersion, txn: txn)
        let block = try decompressors.withDecompressor { decompressor in
            try EventBlocks.decode(
                entry.value, first: first, header: header, dictionary: dictionary, decompressor: decompressor)
        }
        if keep { blockCache.keep(block) }
        return block
    }

    /// Reads events by id inside one transaction, keeping the block it read last: events
    /// of one block, or of neighbouring seqs, cost one lookup of the index each and no
    /// further block lookup (a peer's range, an entity's events, a content window).
    struct BlockReader {
        var last: DecodedBlock?

        /// The canonical JSON of the stored event `id`, nil when it is not held.
        mutating func payload(
            of id: ULID, log: EventLog, txn: borrowing some TransactionReading & ~Copyable
        ) throws -> [UInt8]? {
            guard let seq = try log.seq(of: id, txn: txn) else { return nil }
            if let last, last.contains(seq) {
                let index = Int(seq - last.first)
                if last.id(at: index) == id { return last.payload(at: index) }
            }
            guard let block = try log.block(holding: seq, txn: txn) else {
                return try log.storedPayload(of: id, seq: seq, txn: txn)
            }
            last = block
            let index = Int(seq - block.first)
            guard block.id(at: index) == id else {
                throw CorruptDataError(
                    "event \(id) took seq \(seq), and the block of \(EventBlocks.seqs(block.first, block.count)) holds \(block.id(at: index)) there"
                )
            }
            return block.payload(at: index)
        }
    }

    /// The canonical JSON (without its id) of the stored event `id`, nil when it is not held.
    func storedPayload(of id: ULID, txn: borrowing some TransactionReading & ~Copyable) throws -> [UInt8]? {
        guard let seq = try seq(of: id, txn: txn) else { return nil }
        return try storedPayload(of: id, seq: seq, txn: txn)
    }

    /// The canonical JSON of the event `id`, which took `seq`.
    func storedPayload(of id: ULID, seq: UInt64, txn: borrowing some TransactionReading & ~Copyable) throws
        -> [UInt8]
    {
        guard let block = try block(holding: seq, txn: txn) else {
            // Stored by the write in progress, whose own transaction this is.
            if let record = uncommitted.withLock({ $0.record(at: seq) }), record.id == id { return record.payload }
            throw CorruptDataError("event \(id) took seq \(seq), and no block holds that seq")
        }
        let index = Int(seq - block.first)
        guard block.id(at: index) == id else {
            throw CorruptDataError(
                "event \(id) took seq \(seq), and the block of \(EventBlocks.seqs(block.first, block.count)) holds \(block.id(at: index)) there"
            )
        }
        return block.payload(at: index)
    }

    /// Calls `body` with each stored event's seq, its block and its place there, from seq
    /// `from` on, in seq order, until it returns false. Of the blocks it decompresses, only
    /// the one it stops in is kept in the cache: where the next page of the walk starts.
    func forEachStored(
        from: UInt64, txn: borrowing some TransactionReading & ~Copyable,
        _ body: (UInt64, DecodedBlock, Int) throws -> Bool
    ) throws {
        var last: DecodedBlock?
        defer { if let last { blockCache.keep(last) } }
        for table in tables.blockTables {
            let goOn = try txn.withCursor(table) { cursor -> Bool in
                let key = bigEndian(from)
                var item = try EventLog.block(atOrBefore: key, &cursor) ?? cursor.seek(key)
                while let entry = item {
                    // A block that ends before `from` (the last full one, when `from` is in
                    // the tail) is passed over without being decompressed.
                    if try EventBlocks.span(of: entry).upperBound <= from {
                        item = try cursor.next()
                        continue
                    }
                    let block = try decodeBlock(entry, txn: txn, keep: false)
                    last = block
                    for index in 0..<block.count where block.first + UInt64(index) >= from {
                        guard try body(block.first + UInt64(index), block, index) else { return false }
                    }
                    item = try cursor.next()
                }
                return true
            }
            if !goOn { return }
        }
    }

    /// Calls `body` with every block's entry, in seq order (the full blocks, then the tail's).
    func forEachBlock(txn: borrowing some TransactionReading & ~Copyable, _ body: (Cursor.Entry) throws -> Void) throws
    {
        for table in tables.blockTables {
            try txn.withCursor(table) { cursor in
                var item = try cursor.first()
                while let current = item {
                    try body(current)
                    item = try cursor.next()
                }
            }
        }
    }
}
