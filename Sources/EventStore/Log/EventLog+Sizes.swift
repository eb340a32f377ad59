import Projections

/// Where a store's bytes go, per named database.
public struct StorageBreakdown: Sendable {
    public struct Table: Sendable {
        public var name: String
        public var entries: Int
        /// Pages (branch, leaf and overflow) times the page size.
        public var bytes: Int
    }

    public var tables: [Table]
    /// Bytes of every event value (header + zstd frame), summed.
    public var eventValueBytes: Int
    /// Bytes of every event's canonical JSON (with its id), summed.
    public var canonicalJSONBytes: Int
    public var events: Int
}

extension EventLog {
    /// Measures the store table by table and, reading every event, the size of event
    /// values against their canonical JSON. O(events): for benchmarks and diagnostics.
    public func storageBreakdown() throws(EventStoreError) -> StorageBreakdown {
        try reading { txn in
            let named: [(String, Database)] = [
                ("events", tables.events), ("entity_index", tables.entityIndex), ("origin_index", tables.originIndex),
                ("projections", tables.projections), ("idempotency_keys", tables.keys),
                ("status_index", tables.statusIndex), ("status_history", tables.statusHistory),
                ("conflicts", tables.conflicts), ("dead_letters", tables.deadLetters),
                ("dead_letter_ids", tables.deadLetterIDs),
                ("dictionaries", tables.dictionaries), ("seq_blocks", tables.sequence),
                ("meta", tables.meta),
            ]
            var result = StorageBreakdown(tables: [], eventValueBytes: 0, canonicalJSONBytes: 0, events: 0)
            for (name, db) in named {
                let stat = try txn.stat(db)
                result.tables.append(
                    .init(
                        name: name, entries: stat.entries,
                        bytes: (stat.branchPages + stat.leafPages + stat.overflowPages) * stat.pageSize))
            }
            try txn.withCursor(tables.events) { cursor in
                var item = try cursor.first()
                while let current = item {
                    result.events += 1
                    result.eventValueBytes += current.value.count
                    result.canonicalJSONBytes +=
                        try payload(of: current.value, txn: txn).count + EventCodec.idMemberBytes
                    item = try cursor.next()
                }
            }
            return result
        }
    }
}
