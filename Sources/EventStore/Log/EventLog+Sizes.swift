import Projections

/// Where a store's bytes go, per named database.
public struct StorageBreakdown: Sendable {
    public struct Table: Sendable {
        public var name: String
        public var entries: Int
        /// Pages (branch, leaf and overflow) times the page size.
        public var bytes: Int
        public var depth: Int = 0
        public var branchPages: Int = 0
        public var leafPages: Int = 0
        public var overflowPages: Int = 0
    }

    /// The main tree of each table, as `mdb_stat` counts it: in a `dupSort` table, a key's
    /// values that outgrow a page live in a tree of their own, which it does not count.
    public var tables: [Table]
    /// Bytes of every block of events (header + zstd frame), summed.
    public var eventValueBytes: Int
    /// Bytes of every event's canonical JSON (with its id), summed.
    public var canonicalJSONBytes: Int
    public var events: Int
}

extension EventLog {
    /// Every named database of the store with the flags it is opened with, in the order
    /// `storageBreakdown()` lists them: for tools that open a copy of a store's file
    /// directly (a `dupSort` table must be opened with its flags).
    public static let tableLayout: [(name: String, flags: DatabaseFlags)] = Table.allCases.map { ($0.name, $0.flags) }

    /// Measures the store table by table and, reading every event, the size of event
    /// values against their canonical JSON. O(events): for benchmarks and diagnostics.
    public func storageBreakdown() throws(EventStoreError) -> StorageBreakdown {
        try reading { txn in
            var result = StorageBreakdown(tables: [], eventValueBytes: 0, canonicalJSONBytes: 0, events: 0)
            for table in Table.allCases {
                let stat = try txn.stat(tables[table])
                result.tables.append(
                    .init(
                        name: table.name, entries: stat.entries,
                        bytes: (stat.branchPages + stat.leafPages + stat.overflowPages) * stat.pageSize,
                        depth: stat.depth, branchPages: stat.branchPages, leafPages: stat.leafPages,
                        overflowPages: stat.overflowPages))
            }
            try forEachBlock(txn: txn) { current in
                let block = try decodeBlock(current, txn: txn, keep: false)
                result.events += block.count
                result.eventValueBytes += current.value.count
                for index in 0..<block.count {
                    result.canonicalJSONBytes += block.payload(at: index).count + EventCodec.idMemberBytes
                }
            }
            return result
        }
    }

    /// The bytes each table takes, its every tree counted (in a `dupSort` table, a key's
    /// values that outgrow a page live in a tree of their own, which `mdb_stat` leaves out):
    /// a compacted copy of the store, less a compacted copy of it with the table emptied.
    /// Works in `scratch`, a directory it creates and empties again; O(tables × store
    /// size), for benchmarks and tests.
    /// - Returns: bytes by table name, and the compacted copy's size.
    public func tableBytes(scratch: String) throws -> (tables: [String: Int], compacted: Int) {
        let compact = scratch + "/compact"
        let work = scratch + "/work"
        let emptied = scratch + "/emptied"
        defer {
            for directory in [compact, work, emptied, scratch] { MDB.removeEnvironmentFiles(directory) }
        }
        try backup(to: compact, compact: true)
        let compacted = MDB.fileSize(compact + "/data.mdb")
        var bytes: [String: Int] = [:]
        for (name, flags) in EventLog.tableLayout {
            MDB.removeEnvironmentFiles(work)
            MDB.removeEnvironmentFiles(emptied)
            try backup(to: work, compact: true)
            do {
                let environment = try Environment(directory: work)
                let db = try environment.openDatabase(name, flags: flags)
                try environment.write { txn in try txn.drop(db) }
                try environment.copy(to: emptied, compact: true)
            }
            bytes[name] = compacted - MDB.fileSize(emptied + "/data.mdb")
        }
        return (bytes, compacted)
    }
}
