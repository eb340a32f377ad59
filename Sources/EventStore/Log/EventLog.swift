import FoundationEssentials
import Projections
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The event log: one LMDB environment holding every event, its indices and the
/// projections, all updated in the same write transaction.
///
/// - Important: One writer at a time; any number of readers run in parallel on their own
///   read transactions and never wait for the writer. The daemon binds its one writer
///   thread (`bindWriterThread()`), which makes every write its own; tools and tests may
///   write from any thread, one at a time.
public final class EventLog: Sendable {
    public let directory: String
    public let options: StoreOptions
    /// This node's id: the `origin` of every event appended here.
    public let nodeID: ULID
    /// The node id this store had before this open gave it a fresh one, because it was
    /// recorded on another machine (see `StoreOptions.machineID`); nil when kept.
    public let previousNodeID: ULID?
    /// The format marker the store had when it was opened (older ones are upgraded by `open`).
    public let storedFormat: UInt32

    let environment: Environment
    let tables: Tables
    /// Guards the writer's state — the clock, the compressor and the current dictionary —
    /// for the whole of each write. In the daemon only its writer thread takes it (never
    /// contended); it is what keeps writes from several threads of a tool or test apart.
    let writer: Mutex<Writer>
    /// Dictionaries by version, for decoding; filled lazily from the `dictionaries` table.
    let dictionaries: Mutex<[UInt32: CompressionDictionary]>
    let decompressors = DecompressorPool()
    /// The blocks of events read last, decompressed (`EventBlocks`).
    let blockCache: BlockCache
    /// The events the write in progress stored and has not put in a block yet, by seq
    /// (`WriteBatch.pendingRecords`): a read inside that write finds their ids in `events`
    /// and their seqs in no block, and takes them from here. Only the writer's own
    /// transaction finds such a seq; emptied when each write ends.
    let uncommitted = Mutex(EventBlocks.Uncommitted())
    /// Per origin, the fingerprint of all its ids as some snapshot held them, so a sync's
    /// fingerprints cost the ids added since, not a scan of them all (`summary(of:txn:)`).
    let originSummaries = Mutex<[ULID: OriginSummary]>([:])
    /// Per peer node, how far its wall clock was from ours at its last sync session, ms
    /// (positive: ahead). Measured again by each session, so kept in memory only.
    private let clockOffsets = Mutex<[ULID: Int64]>([:])
    /// The commit sequence's head as the last committed write left it (`meta/seq`): set by
    /// the writer after each commit, so a publisher can tell which seqs a commit took.
    let committedSequence: Atomic<UInt64>
    /// `max_clock_skew_s` in ms as now in force: from `options` at open, changed by
    /// `setMaxClockSkew(milliseconds:)` (a reload); each write's clock takes it.
    private let clockSkew: Atomic<UInt64>
    /// The types file's rules now in force, checked on local appends (`setTypeRules`).
    private let rules = Mutex(TypeRules())
    /// The thread every write must run on once the daemon has named one
    /// (`bindWriterThread()`); 0: any thread may write (tools and tests).
    private let writerThread = Atomic<UInt>(0)

    struct Writer: ~Copyable {
        var clock: HybridClock
        let compressor: Compressor
        var dictionaryVersion: UInt32
        var dictionary: CompressionDictionary?
        /// The event count at which automatic training is next tried: the tenfold rule of
        /// `dictionaryTrainingDue()`, pushed further after a failed training so a store whose
        /// events cannot make a dictionary does not retry on every append, and `Int.max`
        /// while a training runs. Kept here so an append learns it from its own transaction.
        var nextTrainingAt: Int
        /// The projection records' own compressor and dictionary (`ProjectionCompression.swift`):
        /// trained on records with the events' one; until there is one, records take the
        /// events' dictionary.
        let recordCompressor: Compressor
        var recordDictionaryVersion: UInt32
        var recordDictionary: CompressionDictionary?
    }

    /// Every named database of the store, in one list: its name, the flags it is opened
    /// with, and its place in `Tables` (the order `storageBreakdown()` lists them in).
    enum Table: Int, CaseIterable, Sendable {
        /// ULID (16 bytes) → the seq it took here (a varint): its record in `event_blocks`.
        case events
        /// entity bytes → event ids (dupsort, 16-byte values).
        case entityIndex
        /// origin (16 bytes) → event ids (dupsort, 16-byte values).
        case originIndex
        /// entity bytes → state hash (16 bytes), rev, compact state and a short status
        /// history (`projectionRecord`).
        case projections
        /// idempotency key → event id.
        case keys
        /// TYPE 0x00 STATUS → entity bytes (dupsort).
        case statusIndex
        /// entity bytes → its status events, for an entity whose history grew past
        /// `inlineHistoryLimit`: id (16) + origin (16) + status (dupsort, in id order).
        case statusHistory
        /// entity bytes → {"fields":[...],"status":bool} for entities with conflicts.
        case conflicts
        /// local ULID → dead letter as canonical JSON.
        case deadLetters
        /// event id → the key of its dead letter, so an invalid event a peer sends again
        /// is not kept twice.
        case deadLetterIDs
        /// peer name → peer record (used by replication).
        case peers
        /// version (4 bytes, big-endian) → zstd dictionary.
        case dictionaries
        /// origin (16 bytes) → largest lead over our clock seen, ms (8 bytes, big-endian).
        case skew
        /// first seq (8 bytes, big-endian) → a block of the events that took that seq and the
        /// ones after it, compressed together (`EventBlocks`): every stored event, in the
        /// order this node stored it (the commit sequence). Node-local, never replicated.
        case blocks
        /// first seq (8 bytes, big-endian) → a block of events, as in `event_blocks`: the
        /// last commits' small blocks, which together hold fewer than `EventBlocks.maxEvents`
        /// events, until a commit merges them with its own into full blocks of
        /// `event_blocks`. Its seqs follow `event_blocks`' last.
        case blockTail
        /// consumer name → its record (`Consumer.record`): durable cursors over the commit
        /// sequence. Node-local, never replicated.
        case consumers
        /// blob digest (32 bytes) → its size (8 bytes, big-endian) and the id of the first
        /// stored event that named it (16): the blobs events name whose bytes this node does
        /// not hold, which sync asks peers for. Node-local, never replicated.
        case blobPending
        /// blob digest (32 bytes) and event id (16) → the event's origin (16): every stored
        /// event's references to blobs, which retention reads to tell a blob still needed
        /// (`EventLog.blobNeed(_:peers:)`). Node-local, never replicated; `rebuild` writes
        /// it again from the events.
        case blobReferences
        /// blob digest (32 bytes) → when retention first found the blob needed by nothing
        /// (milliseconds since the Unix epoch, 8 bytes, big-endian). Node-local.
        case blobUnused
        /// small named values: format, node id, digest, dictionary version, sequence head.
        case meta

        var name: String {
            switch self {
            case .events: "events"
            case .entityIndex: "entity_index"
            case .originIndex: "origin_index"
            case .projections: "projections"
            case .keys: "idempotency_keys"
            case .statusIndex: "status_index"
            case .statusHistory: "status_history"
            case .conflicts: "conflicts"
            case .deadLetters: "dead_letters"
            case .deadLetterIDs: "dead_letter_ids"
            case .peers: "peers"
            case .dictionaries: "dictionaries"
            case .skew: "clock_skew"
            case .blocks: "event_blocks"
            case .blockTail: "event_tail"
            case .consumers: "consumers"
            case .blobPending: "blob_pending"
            case .blobReferences: "blob_refs"
            case .blobUnused: "blob_unused"
            case .meta: "meta"
            }
        }

        var flags: DatabaseFlags {
            switch self {
            case .events, .projections, .keys, .conflicts, .deadLetters, .deadLetterIDs, .peers, .dictionaries, .skew,
                .blocks, .blockTail, .consumers, .blobPending, .blobReferences, .blobUnused, .meta:
                []
            case .entityIndex, .originIndex: [.dupSort, .dupFixed]
            case .statusIndex, .statusHistory: [.dupSort]
            }
        }
    }

    /// The store's open databases, one per `Table`.
    struct Tables: Sendable {
        private let databases: [Database]

        /// Opens (or creates) every table of `Table`.
        init(_ open: (Table) throws -> Database) rethrows {
            databases = try Table.allCases.map(open)
        }

        subscript(table: Table) -> Database { databases[table.rawValue] }

        var events: Database { self[.events] }
        var entityIndex: Database { self[.entityIndex] }
        var originIndex: Database { self[.originIndex] }
        var projections: Database { self[.projections] }
        var keys: Database { self[.keys] }
        var statusIndex: Database { self[.statusIndex] }
        var statusHistory: Database { self[.statusHistory] }
        var conflicts: Database { self[.conflicts] }
        var deadLetters: Database { self[.deadLetters] }
        var deadLetterIDs: Database { self[.deadLetterIDs] }
        var peers: Database { self[.peers] }
        var dictionaries: Database { self[.dictionaries] }
        var skew: Database { self[.skew] }
        var blocks: Database { self[.blocks] }
        var blockTail: Database { self[.blockTail] }
        /// The tables of blocks, in seq order: the full blocks, then the last commits' small ones.
        var blockTables: [Database] { [blocks, blockTail] }
        var consumers: Database { self[.consumers] }
        var blobPending: Database { self[.blobPending] }
        var blobReferences: Database { self[.blobReferences] }
        var blobUnused: Database { self[.blobUnused] }
        var meta: Database { self[.meta] }
    }

    enum Meta {
        static let format = Array("format".utf8)
        static let nodeID = Array("node_id".utf8)
        static let digest = Array("digest".utf8)
        static let dictionaryVersion = Array("dictionary_version".utf8)
        static let dictionaryTrainedAt = Array("dictionary_trained_at".utf8)
        /// The projection records' current dictionary: a version from
        /// `EventLog.recordDictionaryBase + 1` on, in the same `dictionaries` table.
        static let recordDictionaryVersion = Array("record_dictionary_version".utf8)
        static let machineID = Array("machine_id".utf8)
        /// The clock's reading (the greatest id it issued or observed) as the last write
        /// left it, so a restart resumes above it whatever the wall clock says.
        static let clock = Array("clock".utf8)
        /// The commit sequence's head: the greatest seq ever assigned (8 bytes, big-endian).
        /// Kept apart from the sequence table so the head never goes back, whatever it holds.
        static let sequenceHead = Array("seq".utf8)
        /// The raw bytes all dead letters keep (8 bytes, big-endian), for
        /// `StoreOptions.deadLetterRawBudget`. Absent in stores of earlier releases: counted
        /// from the dead letters at the first write that needs it.
        static let deadLetterRawBytes = Array("dead_letter_raw_bytes".utf8)
    }

    /// The store format this version writes and reads. Format 1 hashed each entity's
    /// canonical JSON for the digest; format 2 hashes its encoded state; format 3 (written
    /// only by development builds after 0.4.0) added the commit sequence, an entry per event
    /// in the `seq` table, `meta/seq`, and each projection's `rev`; format 4 keeps the
    /// sequence in blocks (`seq_blocks`, `SequenceBlocks`); format 5 keeps a short status
    /// history in its entity's projection record (only longer ones in `status_history`),
    /// the rev as a varint, and fills the origin index's pages; format 6 lists the blobs
    /// events name and the node lacks (`blob_pending`), every reference to a blob
    /// (`blob_refs`) and the blobs retention found unused (`blob_unused`); format 7 keeps
    /// the events in blocks of consecutive seqs compressed together (`event_blocks`,
    /// `EventBlocks`), `events` mapping each id to its seq, and no `seq_blocks`. An older
    /// store is upgraded when it is opened (`upgrade()`), in one transaction.
    public static let formatVersion: UInt32 = 7

    /// Opens (creating when needed) the store in `directory`.
    ///
    /// A store that does not add up is refused with `corrupt`, a message naming its
    /// `data.mdb` and what is wrong, and left as it was: a data file shorter than its LMDB
    /// meta pages say (`Environment.init`), or meta values no release wrote
    /// (`checkMeta(txn:tables:file:)`).
    public static func open(directory: String, options: StoreOptions = StoreOptions()) throws(EventStoreError)
        -> EventLog
    {
        do {
            let log = try EventLog(directory: directory, options: options)
            if log.storedFormat < EventLog.formatVersion {
                // Seqs, every projection, the digest and the format marker in one
                // transaction: a crash during it leaves the old store, upgraded at next open.
                try log.upgrade()
            }
            return log
        } catch {
            throw EventStoreError.from(error)
        }
    }

    private init(directory: String, options: StoreOptions) throws {
        guard (1...StoreOptions.absoluteMaxEventBytes).contains(options.maxEventBytes) else {
            throw EventStoreError(
                .invalidEvent,
                "max_event_bytes is \(options.maxEventBytes); it must be between 1 and \(StoreOptions.absoluteMaxEventBytes)"
            )
        }
        self.directory = directory
        self.options = options
        let environment = try Environment(directory: directory, options: options.environment)
        self.environment = environment
        self.tables = try Tables { try environment.openDatabase($0.name, flags: $0.flags.union(.create)) }
        let tables = self.tables
        let now = options.wallClock()
        let (nodeID, previousNodeID, dictionaryVersion, dictionaryBytes, clock, nextTrainingAt, storedFormat, head) =
            try environment.write {
                txn in
                // Before anything here reads or writes them: a store that does not add up is
                // refused, and this transaction, aborted, leaves it as it was.
                try EventLog.checkMeta(txn: txn, tables: tables, file: directory + "/data.mdb")
                var storedFormat = EventLog.formatVersion
                if let format = try txn.get(tables.meta, Meta.format) {
                    storedFormat = uint32(bigEndian: format)
                } else {
                    try txn.put(tables.meta, Meta.format, bigEndian(EventLog.formatVersion))
                }
                var nodeID: ULID
                var previousNodeID: ULID?
                if let stored = try txn.get(tables.meta, Meta.nodeID), let id = ULID(bytes: stored) {
                    nodeID = id
                } else {
                    var clock = HybridClock(maxSkewMilliseconds: options.maxClockSkewMilliseconds)
                    nodeID = try clock.next(now: now)
                    try txn.put(tables.meta, Meta.nodeID, nodeID.bytes)
                }
                // A store copied to another machine must not go on creating events under the
                // origin the original machine keeps using: it takes a fresh node id.
                if let machine = options.machineID.map({ Array($0.utf8) }), !machine.isEmpty {
                    let recorded = try txn.get(tables.meta, Meta.machineID)
                    if let recorded, recorded != machine {
                        previousNodeID = nodeID
                        var clock = HybridClock(maxSkewMilliseconds: options.maxClockSkewMilliseconds, last: nodeID)
                        nodeID = try clock.next(now: now)
                        try txn.put(tables.meta, Meta.nodeID, nodeID.bytes)
                    }
                    if recorded != machine { try txn.put(tables.meta, Meta.machineID, machine) }
                }
                let version =
                    try txn.get(tables.meta, Meta.dictionaryVersion).map(uint32(bigEndian:))
                    ?? 0
                let dictionary = version == 0 ? nil : try txn.get(tables.dictionaries, bigEndian(version))
                let recordVersion =
                    try txn.get(tables.meta, Meta.recordDictionaryVersion).map(uint32(bigEndian:)) ?? 0
                let recordDictionary =
                    recordVersion == 0 ? nil : try txn.get(tables.dictionaries, bigEndian(recordVersion))
                let clock = try EventLog.resumeClock(
                    nodeID: nodeID, txn: &txn, tables: tables, options: options, now: now)
                let trainedAt = try txn.get(tables.meta, Meta.dictionaryTrainedAt).map(uint64(bigEndian:)) ?? 0
                return (
                    nodeID, previousNodeID, (events: version, records: recordVersion),
                    (events: dictionary, records: recordDictionary), clock,
                    EventLog.trainingDue(after: Int(clamping: trainedAt), options: options), storedFormat,
                    try EventLog.sequenceHead(txn: txn, tables: tables)
                )
            }
        self.storedFormat = storedFormat
        self.committedSequence = Atomic(head)
        self.clockSkew = Atomic(options.maxClockSkewMilliseconds)
        self.blockCache = BlockCache(maxBytes: options.blockCacheBytes)
        self.nodeID = nodeID
        self.previousNodeID = previousNodeID
        var cache: [UInt32: CompressionDictionary] = [:]
        func load(_ bytes: [UInt8]?, _ version: UInt32) throws -> CompressionDictionary? {
            guard let bytes else { return nil }
            let loaded = try CompressionDictionary(bytes: bytes, level: options.compressionLevel)
            cache[version] = loaded
            return loaded
        }
        let dictionary = try load(dictionaryBytes.events, dictionaryVersion.events)
        let recordDictionary = try load(dictionaryBytes.records, dictionaryVersion.records)
        self.dictionaries = Mutex(cache)
        self.writer = Mutex(
            Writer(
                clock: clock,
                compressor: Compressor(
                    level: options.compressionLevel, levelWithoutDictionary: StoreOptions.levelWithoutDictionary),
                dictionaryVersion: dictionaryVersion.events, dictionary: dictionary, nextTrainingAt: nextTrainingAt,
                recordCompressor: Compressor(
                    level: options.compressionLevel, levelWithoutDictionary: StoreOptions.levelWithoutDictionary),
                recordDictionaryVersion: dictionaryVersion.records, recordDictionary: recordDictionary))
    }

    /// The clock at open: its reading as the last write recorded it, moved past the greatest
    /// stored id within the allowed skew of now.
    ///
    /// A store last written by a version that kept no reading (0.4 and before) resumes from
    /// its own newest event instead, when that is within the skew. One further ahead is
    /// taken like any other far-ahead id: it is not followed, and the lead is reported under
    /// this node's origin. Those versions let a peer store an event of this node's origin at
    /// any id, up to the greatest ULID, and following it would leave no id to make. The
    /// reading is recorded here, so the next open resumes from it.
    static func resumeClock(
        nodeID: ULID, txn: inout WriteTransaction, tables: Tables, options: StoreOptions, now: UInt64
    ) throws -> HybridClock {
        var clock = HybridClock(maxSkewMilliseconds: options.maxClockSkewMilliseconds)
        let reading = try txn.get(tables.meta, Meta.clock).flatMap { ULID(bytes: $0) }
        if let reading {
            clock.skip(past: reading)
        } else if let lastLocal = try txn.withCursor(
            tables.originIndex,
            { cursor in
                try cursor.seekExact(nodeID.bytes) == nil ? nil : try cursor.lastDup()
            }), let id = ULID(bytes: lastLocal.value)
        {
            if let lead = clock.observe(id, now: now) {
                let previous = try txn.get(tables.skew, nodeID.bytes).map(uint64(bigEndian:)) ?? 0
                if lead > previous { try txn.put(tables.skew, nodeID.bytes, bigEndian(lead)) }
            }
        }
        try EventLog.observeStoredIDs(&clock, txn: txn, events: tables.events, now: now)
        if reading != clock.last { try txn.put(tables.meta, Meta.clock, clock.last.bytes) }
        return clock
    }

    /// Moves the clock past the greatest stored id that is within the allowed skew of now
    /// (ids further ahead are stored but do not drag the clock).
    static func observeStoredIDs(
        _ clock: inout HybridClock, txn: borrowing some TransactionReading & ~Copyable, events: Database, now: UInt64
    ) throws {
        let limit = now.addingReportingOverflow(clock.maxSkewMilliseconds + 1)
        let bound = ULID.lowerBound(
            timestamp: limit.overflow ? ULID.maxTimestamp : min(limit.partialValue, ULID.maxTimestamp))
        let greatest = try txn.withCursor(events) { cursor -> [UInt8]? in
            if try cursor.seek(bound.bytes) != nil {
                return try cursor.prev()?.key
            }
            return try cursor.last()?.key
        }
        if let greatest, let id = ULID(bytes: greatest) {
            clock.observe(id, now: now)
        }
    }

    /// The commit sequence's head in `txn`: the greatest seq assigned, from `meta/seq`, or
    /// the last block's last seq should that be greater (it never is, short of damage: the
    /// head only moves forward either way).
    static func sequenceHead(txn: borrowing some TransactionReading & ~Copyable, tables: Tables) throws -> UInt64 {
        let recorded = try txn.get(tables.meta, Meta.sequenceHead).map(uint64(bigEndian:)) ?? 0
        guard
            let last = try txn.withCursor(tables.blockTail, { try $0.last() })
                ?? (try txn.withCursor(tables.blocks, { try $0.last() }))
        else { return recorded }
        return max(recorded, try EventBlocks.span(of: last).upperBound - 1)
    }

    /// The commit sequence's head: the seq of the last event this node stored (0: none yet).
    public var sequenceHead: UInt64 { committedSequence.load(ordering: .acquiring) }

    /// Records how far `node`'s wall clock is from this one's, in ms (positive: ahead), as
    /// a sync session measured it.
    public func recordClockOffset(of node: ULID, milliseconds: Int64) {
        clockOffsets.withLock { $0[node] = milliseconds }
    }

    /// How far ahead of the wall clock an id may be and still move the clock, ms
    /// (`max_clock_skew_s`), as now in force.
    public var maxClockSkewMilliseconds: UInt64 { clockSkew.load(ordering: .relaxed) }

    /// Changes `maxClockSkewMilliseconds` while serving (a reload): the next write, and
    /// every check of a replicated or imported id after it, use the new value.
    public func setMaxClockSkew(milliseconds: UInt64) {
        clockSkew.store(milliseconds, ordering: .relaxed)
    }

    /// Holds the decompressed blocks kept for readers to `bytes` from now on (a reload of
    /// `block_cache_bytes`); what no longer fits goes at once.
    public func setBlockCacheBytes(_ bytes: Int) { blockCache.setMaxBytes(bytes) }

    /// The block cache's size, bound, hits and misses (`status`).
    public var blockCacheStatistics: BlockCache.Statistics { blockCache.statistics }

    /// The rules of the types file, checked on local appends from the next write on.
    public var typeRules: TypeRules {
        get { rules.withLock { $0 } }
        set { rules.withLock { $0 = newValue } }
    }

    /// Per peer node, its clock's offset from this one's at its last sync session (ms).
    public var measuredClockOffsets: [ULID: Int64] { clockOffsets.withLock { $0 } }

    /// Origins whose clock is off this one's by more than `maxClockSkewMilliseconds`, in ms
    /// (positive: ahead, negative: behind): a peer's offset measured at its last session
    /// when that is beyond the bound either way, else the largest lead of an origin's ids
    /// over this clock seen when they were stored, when that is beyond it.
    public func skewedOrigins(idLeads: [ULID: UInt64]) -> [ULID: Int64] {
        let bound = Int64(clamping: maxClockSkewMilliseconds)
        var skewed = idLeads.mapValues { Int64(clamping: $0) }
        for (node, offset) in measuredClockOffsets where offset > bound || offset < -bound {
            skewed[node] = offset
        }
        return skewed
    }

    /// Makes the calling thread the only one that may open a write transaction from now on:
    /// a write started on any other thread fails with `unavailable` instead of running. The
    /// daemon binds its writer thread, so a path that skips the writer shows up at once.
    public func bindWriterThread() {
        writerThread.store(UInt(pthread_self()), ordering: .releasing)
    }

    /// Lets any thread write again (the writer thread has ended).
    public func releaseWriterThread() {
        writerThread.store(0, ordering: .releasing)
    }

    /// Throws unless the calling thread may write (see `bindWriterThread()`).
    func requireWriterThread() throws(EventStoreError) {
        let bound = writerThread.load(ordering: .acquiring)
        guard bound == 0 || bound == UInt(pthread_self()) else {
            throw EventStoreError(
                .unavailable, "a write was started outside the store's writer; every write goes through the writer")
        }
    }

    /// The size the store may grow to, in bytes (`EnvironmentOptions.maxMapSize`).
    public var maxStorageBytes: Int { environment.maxMapSize }

    /// Changes the size the store may grow to while it is open: raising it lets appends
    /// that failed with `storage_full` at the old maximum succeed, with no reopen.
    public func setMaxStorageBytes(_ bytes: Int) { environment.setMaxMapSize(bytes) }

    /// Flushes buffered commits to disk (only needed with `durable: false`).
    public func sync() throws(EventStoreError) {
        #if DEBUG
            try FaultSwitches.check(FaultSwitches.fsync)
        #endif
        do { try environment.sync(force: true) } catch { throw EventStoreError.from(error) }
    }

    /// Copies the whole store, consistent, to `directory` while it keeps serving.
    public func backup(to directory: String, compact: Bool = true) throws(EventStoreError) {
        do { try environment.copy(to: directory, compact: compact) } catch { throw EventStoreError.from(error) }
    }

    /// Copies the whole store, consistent, into the open file `descriptor` (it becomes a
    /// `data.mdb`) while it keeps serving, and flushes it to disk.
    public func backup(toDescriptor descriptor: Int32, compact: Bool = true) throws(EventStoreError) {
        do {
            try environment.copy(toDescriptor: descriptor, compact: compact)
        } catch {
            throw EventStoreError.from(error)
        }
    }
}

func bigEndian(_ value: UInt32) -> [UInt8] {
    [UInt8(value >> 24), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
}

func bigEndian(_ value: UInt64) -> [UInt8] {
    [
        UInt8(value >> 56), UInt8(value >> 48 & 0xFF), UInt8(value >> 40 & 0xFF), UInt8(value >> 32 & 0xFF),
        UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF),
    ]
}

func uint32(bigEndian bytes: [UInt8]) -> UInt32 {
    bytes.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
}

func uint64(bigEndian bytes: [UInt8]) -> UInt64 {
    bytes.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
}
