import Projections

/// The commit sequence's table, `seq_blocks`: which event each seq names, in blocks of
/// consecutive seqs.
///
/// An entry's key is its first seq (8 bytes, big-endian); its value the ids of that seq
/// and the ones after it, 16 bytes each, at most `capacity`. A write appends its events'
/// ids to the last block while it has room and starts new ones after, so a block holds
/// the events of several small commits as well as of one large one. `capacity` keeps an
/// entry within half a 4 KiB page, where LMDB stores it inline (a larger value would take
/// overflow pages of its own): about 16 bytes per event in all, where an entry per event
/// would take 34 (key, value, node header and its pointer in the page).
///
/// Seqs in a block are consecutive; the table may have gaps between blocks (none today,
/// but nothing relies on there being none).
enum SequenceBlocks {
    /// Ids per block: an entry of 8 + 126 × 16 bytes and its node header fit in LMDB's
    /// largest inline node for 4 KiB pages (2038 bytes), two to a page.
    static let capacity = 126

    /// One entry: its first seq and its ids' bytes.
    struct Block {
        let first: UInt64
        let ids: [UInt8]

        var count: Int { ids.count / 16 }
        /// The seq of its last id.
        var last: UInt64 { first + UInt64(count) - 1 }

        func contains(_ seq: UInt64) -> Bool { seq >= first && seq - first < UInt64(count) }

        /// The id at `index` (0 ..< count).
        func id(at index: Int) throws -> ULID {
            guard let id = ULID(bytes: Array(ids[index * 16..<index * 16 + 16])) else {
                throw CorruptDataError("the seq table's block at \(first) holds a malformed id")
            }
            return id
        }

        init(first: UInt64, ids: [UInt8]) {
            self.first = first
            self.ids = ids
        }

        init(_ entry: Cursor.Entry) throws {
            guard entry.key.count == 8, !entry.value.isEmpty, entry.value.count % 16 == 0 else {
                throw CorruptDataError("a seq table entry is not a seq and a list of ids")
            }
            self.init(first: uint64(bigEndian: entry.key), ids: entry.value)
        }
    }

    /// Appends the ids of seqs `first`, `first + 1`, … (in that order), filling the last
    /// block when it ends just before `first` and has room, then new blocks.
    static func append(_ ids: [ULID], first: UInt64, table: Database, txn: inout WriteTransaction) throws {
        guard !ids.isEmpty else { return }
        var start = 0
        var blockStart = first
        if let last = try txn.withCursor(table, { try $0.last() }).map(Block.init),
            last.last &+ 1 == first, last.count < capacity
        {
            let take = min(capacity - last.count, ids.count)
            var value = last.ids
            value.reserveCapacity((last.count + take) * 16)
            for id in ids[0..<take] { id.append(to: &value) }
            try txn.put(table, bigEndian(last.first), value)
            start = take
            blockStart = first + UInt64(take)
        }
        while start < ids.count {
            let end = min(start + capacity, ids.count)
            var value: [UInt8] = []
            value.reserveCapacity((end - start) * 16)
            for id in ids[start..<end] { id.append(to: &value) }
            try txn.put(table, bigEndian(blockStart), value, flags: .append)
            blockStart += UInt64(end - start)
            start = end
        }
    }

    /// The greatest seq in the table (0: empty).
    static func last(table: Database, txn: borrowing some TransactionReading & ~Copyable) throws -> UInt64 {
        try txn.withCursor(table) { cursor in try cursor.last().map(Block.init)?.last } ?? 0
    }

    /// The block holding `seq`, or else the first one after it; the cursor is left on it.
    static func block(from seq: UInt64, cursor: inout Cursor) throws -> Block? {
        guard let found = try cursor.seek(bigEndian(seq)) else {
            // Every key is below `seq`: only the last block can hold it.
            guard let last = try cursor.last().map(Block.init), last.contains(seq) else { return nil }
            return last
        }
        let block = try Block(found)
        if block.first == seq { return block }
        // The first block starting after `seq`; the one before may hold it.
        if let previous = try cursor.prev().map(Block.init), previous.contains(seq) { return previous }
        // Back onto the block found (from the first entry, a failed move back leaves the
        // cursor where a step forward would not return to it).
        _ = try cursor.seek(bigEndian(block.first))
        return block
    }

    /// The block after the cursor's, the cursor moved onto it.
    static func next(cursor: inout Cursor) throws -> Block? {
        try cursor.next().map(Block.init)
    }

    /// Every seq and its id, in seq order.
    static func forEach(
        table: Database, txn: borrowing some TransactionReading & ~Copyable, _ body: (UInt64, ULID) throws -> Void
    ) throws {
        try txn.withCursor(table) { cursor in
            var item = try cursor.first()
            while let current = item {
                let block = try Block(current)
                for index in 0..<block.count { try body(block.first + UInt64(index), try block.id(at: index)) }
                item = try cursor.next()
            }
        }
    }
}
