import Projections

extension EventLog {
    /// Appends a batch of client events in ONE write transaction: ids, causal context from
    /// the current projection, the event, its entity and origin index entries, the
    /// idempotency key and the updated projection. All or nothing: an invalid event, an
    /// `if_match` mismatch or a deleted entity aborts the whole batch and writes nothing.
    public func append(_ inputs: [InputEvent]) throws(EventStoreError) -> AppendResult {
        guard !inputs.isEmpty else { return AppendResult(ids: [], versions: [:], written: []) }
        return try perform(AppendJob(inputs))
    }

    /// Runs `body` as the writer, in one write transaction with a fresh batch, and keeps the
    /// batch's clock once the transaction has committed. Storage errors become API errors.
    /// When the store has grown to where a dictionary is due, trains one after the commit
    /// (when `trainsDictionaryAutomatically`; a failed training never fails the write).
    func write<R: Sendable>(
        _ body: (inout WriteBatch, inout WriteTransaction, inout EventLog.Writer) throws -> R
    ) throws(EventStoreError) -> R {
        try requireWriterThread()
        let (result, trainingDue, first): (R, Bool, Bool)
        do {
            (result, trainingDue, first) = try writer.withLock { writer throws -> (R, Bool, Bool) in
                let now = options.wallClock()
                let (result, clock, count, head) = try environment.write { txn -> (R, HybridClock, Int, UInt64) in
                    // Built inside: a retry after the map grew starts again from the writer's clock,
                    // with the skew now in force (a reload may have changed it).
                    writer.clock.maxSkewMilliseconds = maxClockSkewMilliseconds
                    var batch = try WriteBatch(
                        log: self, txn: txn, clock: writer.clock, now: now, records: RecordCompression(writer))
                    let firstSeq = batch.seq
                    defer { uncommitted.withLock { $0.removeAll() } }
                    let result = try body(&batch, &txn, &writer)
                    try batch.writeBlocks(txn: &txn, writer: writer)
                    // The reading, kept for the next open (`resumeClock`).
                    if batch.clock.last != writer.clock.last {
                        try txn.put(tables.meta, Meta.clock, batch.clock.last.bytes)
                    }
                    // The head, in the transaction that took the seqs: never reused after a crash.
                    if batch.seq != firstSeq { try txn.put(tables.meta, Meta.sequenceHead, bigEndian(batch.seq)) }
                    return (result, batch.clock, try txn.stat(tables.events).entries, batch.seq)
                }
                writer.clock = clock
                committedSequence.store(head, ordering: .releasing)
                let due = count >= writer.nextTrainingAt
                if due { writer.nextTrainingAt = .max }  // one training at a time
                return (result, due, writer.dictionaryVersion == 0)
            }
        } catch {
            throw EventStoreError.from(error)
        }
        if trainingDue {
            if options.trainsDictionaryAutomatically || (first && options.trainsFirstDictionaryInline) {
                trainDictionaryAutomatically()
            } else {
                options.trainingDue?()
            }
        }
        return result
    }

    /// Trains a dictionary after a write made it due; on failure, waits until the store has
    /// doubled before trying again.
    func trainDictionaryAutomatically() {
        do {
            try trainDictionary()
        } catch {
            let count = (try? reading { txn in try txn.stat(tables.events).entries }) ?? 0
            writer.withLock { $0.nextTrainingAt = max(count * 2, count + options.dictionaryTrainingThreshold) }
        }
    }

    /// What became of one input of a batch.
    enum AppendOutcome {
        case appended(ULID)
        /// Its idempotency key was seen before: nothing written, the first event's id.
        case keySeenBefore(ULID)
    }
}

/// The state of one write transaction in progress: the entities it touched, in memory,
/// so each is read from LMDB at most once per batch and written back once at the end.
struct WriteBatch {
    let log: EventLog
    /// The types file's rules as they were when the transaction began.
    let rules: TypeRules
    var clock: HybridClock
    let now: UInt64
    /// The greatest key in `events`: ids above it go in with MDB_APPEND.
    var lastEventKey: ULID?
    /// The entities touched so far, in the order first touched: `slots` finds one with a
    /// single lookup, and its state is folded in place in `touched`.
    var touched: [Touched] = []
    /// How `finish` stores the records it writes: with the writer's record compressor and
    /// current dictionary (`ProjectionCompression.swift`).
    let recordCompression: RecordCompression
    var slots: [EntityKey: Int] = [:]
    var keysInBatch: [String: ULID] = [:]
    /// The `origin_index` entries of the events written, put at the end of the batch: one
    /// call per origin (`MDB_MULTIPLE`) instead of one per event. Nothing reads that index
    /// inside a write.
    var originEntries: [(origin: ULID, id: ULID)] = []
    /// The slots whose entities have events not yet in `entity_index` (`Touched.unindexed`),
    /// in the order first written; a slot whose ids were put early (`maxUnindexed`, a
    /// refold) comes again with its next event, and `writeEntityIndex` passes over it once
    /// it is empty. Inside a write, the index is read for an entity only together with its
    /// unindexed ids (`isHeld`: a fold, a second decision) or after they are put (a refold).
    var unindexedSlots: [Int] = []
    /// The events stored and not yet in a block, in seq order up to `seq`: compressed into
    /// blocks when the transaction's work is done (`writeBlocks`). A read inside the
    /// transaction finds them in `EventLog.uncommitted` meanwhile.
    var pendingRecords: [EventBlocks.Record] = []
    /// Where the events made here are encoded, before each is copied out at its own size.
    var encoding: [UInt8] = []
    /// The key and the value of the event's entry in `events`, overwritten for each event:
    /// two arrays made and freed for every event stored cost more than the entry's bytes.
    var eventKey = [UInt8](repeating: 0, count: 16)
    var eventValue: [UInt8] = []
    /// Counts the client batches appended, so each entity can tell whether the current one
    /// has named it already.
    var clientBatch = 0
    /// The slots of the entities the current client batch names, each once, in the order
    /// first named: what its result reports a version and rev for.
    var namedInBatch: [Int] = []
    var skews: [ULID: UInt64] = [:]
    /// The commit sequence's head: the seq of the last event this transaction stored (or
    /// of the last one stored before it). Each stored event takes the next one.
    var seq: UInt64
    /// The events this transaction stored with their seqs, in seq order, when the writer
    /// publishes them after the commit (nil: not kept).
    var stored: [CommittedEvent]?

    struct Touched {
        var state: EntityState
        /// Its status history in id order while the projection record holds it; once the
        /// history lives in `status_history`, the entries still to be put there.
        var history: [StatusEntry]
        /// Whether the history lives in `status_history` (it grew past `inlineHistoryLimit`).
        var historyInTable: Bool
        /// Whether an event was folded in during this batch.
        var changed = false
        /// The entity as it was when the batch first read it (nil: new entity).
        let before: Before?
        /// The seq of the latest event folded into the entity on this node (0: none yet).
        var rev: UInt64
        /// The entity's rev when client batch `startBatch` first named it: what `if_match`
        /// is compared with.
        var startBatch = -1
        var startRev: UInt64 = 0
        /// The entity's events this batch stored that `entity_index` does not hold yet: put
        /// there together, one call for the entity, when the batch's work is done
        /// (`writeEntityIndex`), before a refold reads the entity's events, or when they
        /// come to `maxUnindexed`.
        var unindexed: [ULID] = []
    }

    struct Before {
        let hash: StateHash
        let statusKey: [UInt8]?
        /// This node's rejected proposals of the entity (their records in the peers table).
        let ownRejected: [ULID]
    }

    init(
        log: EventLog, txn: borrowing WriteTransaction, clock: HybridClock, now: UInt64, records: RecordCompression
    ) throws {
        self.log = log
        self.recordCompression = records
        self.rules = log.typeRules
        self.clock = clock
        self.now = now
        try EventLog.observeStoredIDs(&self.clock, txn: txn, events: log.tables.events, now: now)
        self.lastEventKey = try txn.withCursor(log.tables.events) { try $0.last() }.flatMap { ULID(bytes: $0.key) }
        // The head as the last commit left it: every write holds the writer lock, so no seq
        // was taken since, and the transaction need not read `meta/seq` and the table again.
        self.seq = log.committedSequence.load(ordering: .acquiring)
        assert(self.seq == (try? EventLog.sequenceHead(txn: txn, tables: log.tables)), "the sequence head drifted")
    }

    // MARK: Local appends

    /// Appends one client batch; the first failing input fails it, with its index.
    mutating func append(_ inputs: [InputEvent], txn: inout WriteTransaction, writer: inout EventLog.Writer) throws
        -> (ids: [ULID], written: [ULID])
    {
        var ids: [ULID] = []
        ids.reserveCapacity(inputs.count)
        var written: [ULID] = []
        written.reserveCapacity(inputs.count)
        clientBatch += 1
        namedInBatch.removeAll(keepingCapacity: true)
        // By index: `enumerated()` would hand out a copy of each input (a retain and a
        // release of each of its strings).
        for index in inputs.indices {
            do {
                switch try append(inputs[index], txn: &txn, writer: &writer) {
                case .appended(let id):
                    ids.append(id)
                    written.append(id)
                case .keySeenBefore(let id):
                    ids.append(id)
                }
            } catch let error as EventStoreError {
                throw error.at(index: index)
            }
        }
        return (ids, written)
    }

    /// Appends one input, or finds the event its idempotency key already names.
    mutating func append(_ input: InputEvent, txn: inout WriteTransaction, writer: inout EventLog.Writer) throws
        -> EventLog.AppendOutcome
    {
        let tables = log.tables
        if let key = input.key {
            // Named either way, so the result reports the entity's version.
            if let id = keysInBatch[key] {
                name(try slot(input.entity, txn: txn))
                return .keySeenBefore(id)
            }
            if let stored = try txn.get(tables.keys, Array(key.utf8)), let id = ULID(bytes: stored) {
                name(try slot(input.entity, txn: txn))
                return .keySeenBefore(id)
            }
        }
        if let present = log.options.blobPresent {
            // Checked here, in the writer, as well as before the job was queued: retention
            // removes blobs in the writer too, so none can go between this check and the commit.
            for reference in input.blobReferences where !present(reference.hash) {
                throw EventStoreError(
                    .invalidEvent,
                    "the event names blob \(reference.hash), which this node does not hold: put the blob first (evctl blob put FILE)"
                )
            }
        }
        let slot = try slot(input.entity, txn: txn)
        let entity = input.entity
        name(slot)
        let revAtStart = touched[slot].startRev
        if let expected = input.ifMatch, expected != revAtStart {
            let actual = revAtStart == 0 ? "does not exist yet" : "is at rev \(revAtStart)"
            throw EventStoreError(
                .conflict, "\(entity) \(actual), not \(expected) (if_match): read it again and retry")
        }
        // Through the entry's address: a copy of its state would retain and release each of
        // its arrays, and reading the state of an array's element any other way copies it.
        let body = try WriteBatch.body(of: input, on: &touched[slot].state, rules: rules)
        let id = try freshID(txn: txn)
        let event = Event(
            id: id, origin: log.nodeID, entity: entity, body: body, key: input.key, by: input.by, at: input.at)
        let seq = try writeEncoding(event, slot: slot, txn: &txn, writer: &writer)
        if let key = input.key {
            try txn.put(tables.keys, Array(key.utf8), id.bytes)
            keysInBatch[key] = id
        }
        let log = self.log
        try WriteBatch.fold(event, seq: seq, into: &touched[slot], log: log, txn: txn)
        return .appended(id)
    }

    /// The body an appended `input` makes on `state`, its entity's: the causal context (the
    /// heads it names) read from the state, checked against it and the type's rules.
    /// `inout` only to read the state where it lies.
    static func body(of input: InputEvent, on state: inout EntityState, rules: TypeRules) throws -> EventBody {
        let entity = input.entity
        let body: EventBody
        switch input.change {
        case .restore:
            guard state.isDeleted else {
                throw EventStoreError(.conflict, "\(entity) is not deleted: there is nothing to restore")
            }
            body = .restore(base: state.liveDeletes)
        case _ where state.isDeleted:
            throw EventStoreError(
                .deleted,
                "\(entity) is deleted: restore it first (kind \"restore\"), then \(input.change.kind.rawValue) it")
        case .edit(let fields):
            // A field in conflict keeps its heads unless this edit is a resolution: a plain
            // edit of it names none of them and joins the conflict as one more head, so no
            // edit settles a conflict its author did not see.
            let settles = input.settlesConflicts
            let base = fields.compactMap { field -> FieldBase? in
                let heads = state.heads(ofField: field.name)
                guard !heads.isEmpty, heads.count == 1 || settles else { return nil }
                return FieldBase(field: field.name, heads: heads)
            }
            body = .edit(fields: fields, base: base)
        case .status(let status):
            let base = state.statusHeadIDs
            body = rules.proposes(entity) ? .propose(status, base: base) : .status(status, base: base)
        case .add(let set, let element):
            body = .add(set: set, element: element)
        case .remove(let set, let element):
            body = .remove(
                set: set, element: element, observed: state.liveAdds(set: set, element: element))
        case .delete:
            body = .delete
        case .incr(let counter, let amount):
            let current = state.counter(counter) ?? 0
            let sum = current + Int128(amount)
            guard sum >= Int128(Int64.min), sum <= Int128(Int64.max) else {
                throw EventStoreError.invalid(
                    "\(entity)'s counter \(counter) is \(current): adding \(amount) takes it out of a signed 64-bit integer"
                )
            }
            body = .incr(counter: counter, amount: amount)
        }
        try rules.check(input.change, of: entity, currentStatus: state.currentStatus?.status)
        return body
    }

    /// Marks the entity at `slot` as named by the current client batch; the first time, its
    /// rev then is what that batch's `if_match` is compared with.
    mutating func name(_ slot: Int) {
        guard touched[slot].startBatch != clientBatch else { return }
        touched[slot].startBatch = clientBatch
        touched[slot].startRev = touched[slot].rev
        namedInBatch.append(slot)
    }

    /// Whether the events index may hold `id`: it cannot when `id` is above its greatest key
    /// or the index is empty. Only an id it may hold is looked up; any other goes in with
    /// MDB_APPEND.
    func mayHold(_ id: ULID) -> Bool {
        lastEventKey.map { !($0 < id) } ?? false
    }

    /// The clock's next id that no stored event holds. The clock stays above every id it
    /// observed within the allowed skew, but an event of another origin further ahead, or
    /// stored while the wall clock read later than it does now, can sit where the clock goes
    /// next: the clock then steps past it. Only ids not above the greatest key are looked up.
    mutating func freshID(txn: borrowing WriteTransaction) throws -> ULID {
        while true {
            let id = try clock.next(now: now)
            guard mayHold(id), try txn.get(log.tables.events, id.bytes) != nil else { return id }
            clock.skip(past: id)
        }
    }

    // MARK: Shared by append and ingest

    /// The entity's index in `touched`, reading it from `projections` on first use. The
    /// fold then changes the state in place, `touched[slot]`, without copying its arrays.
    mutating func slot(_ entity: EntityKey, txn: borrowing WriteTransaction) throws -> Int {
        if let slot = slots[entity] { return slot }
        let entry: Touched
        if let record = try txn.get(log.tables.projections, entity.bytes) {
            let (hash, state, rev, history) = try EventLog.decodeProjection(
                try log.expanded(record, entity: entity, txn: txn), entity: entity, history: true)
            entry = Touched(
                state: state, history: history ?? [], historyInTable: history == nil,
                before: Before(
                    hash: hash, statusKey: EventLog.statusKey(state),
                    ownRejected: RejectedOwnProposal.of(state, origin: log.nodeID).map(\.id)),
                rev: rev)
        } else {
            entry = Touched(state: EntityState(entity: entity), history: [], historyInTable: false, before: nil, rev: 0)
        }
        touched.append(entry)
        slots[entity] = touched.count - 1
        return touched.count - 1
    }

    /// Puts `originEntries`, each origin's ids in order in one call.
    mutating func writeOriginEntries(txn: inout WriteTransaction) throws {
        guard !originEntries.isEmpty else { return }
        originEntries.sort { $0.origin == $1.origin ? $0.id < $1.id : $0.origin < $1.origin }
        let entries = originEntries
        try txn.withCursor(log.tables.originIndex) { cursor in
            var start = 0
            while start < entries.count {
                let origin = entries[start].origin
                var values: [UInt8] = []
                values.reserveCapacity(16 * (entries.count - start))
                var end = start
                while end < entries.count, entries[end].origin == origin {
                    entries[end].id.append(to: &values)
                    end += 1
                }
                try WriteBatch.putIDs(origin.bytes, values, first: entries[start].id, cursor: &cursor)
                start = end
            }
        }
        originEntries.removeAll()
    }

    /// The most ids an entity keeps unindexed: whether an id is held is asked of them one
    /// by one (`fold`), for each id an event names that is not a head, so a batch of
    /// thousands of one entity's events (an import, a sync's batches committed together)
    /// puts them this many at a time and each question stays cheaper than a lookup.
    static let maxUnindexed = 256

    /// Puts the `entity_index` entries of the events the batch wrote, one call for each
    /// entity, the entities in key order. Put once an event, they cost an append 6 % more
    /// instructions and the index a third more bytes (its pages split in the middle).
    mutating func writeEntityIndex(txn: borrowing WriteTransaction) throws {
        guard !unindexedSlots.isEmpty else { return }
        var entities: [(entity: EntityKey, ids: [ULID])] = []
        entities.reserveCapacity(unindexedSlots.count)
        for slot in unindexedSlots where !touched[slot].unindexed.isEmpty {
            entities.append((touched[slot].state.entity, touched[slot].unindexed))
            touched[slot].unindexed.removeAll()
        }
        unindexedSlots.removeAll()
        entities.sort { $0.entity < $1.entity }
        try txn.withCursor(log.tables.entityIndex) { cursor in
            for index in entities.indices {
                try WriteBatch.putEntityIndex(entities[index].entity, &entities[index].ids, cursor: &cursor)
            }
        }
    }

    /// Whether `entity` has the event `id`, asked inside a write: among the ids it stored
    /// that the index does not hold yet (`unindexed`), or in `entity_index`.
    static func isHeld(
        _ id: ULID, of entity: EntityKey, unindexed: [ULID], tables: EventLog.Tables,
        txn: borrowing WriteTransaction
    ) throws -> Bool {
        if unindexed.contains(id) { return true }
        return try txn.withCursor(tables.entityIndex) { cursor in
            try cursor.seekBoth(entity.bytes, id.bytes)?.value == id.bytes
        }
    }

    /// Puts `ids`, events of `entity`, into `entity_index` with a cursor of its own, and
    /// empties it.
    static func putEntityIndex(
        _ entity: EntityKey, _ ids: inout [ULID], tables: EventLog.Tables, txn: borrowing WriteTransaction
    ) throws {
        try txn.withCursor(tables.entityIndex) { cursor in try putEntityIndex(entity, &ids, cursor: &cursor) }
    }

    /// Puts `ids`, events of `entity`, into `entity_index` through `cursor`, and empties it:
    /// one alone with a plain put, several in one call (`putIDs`).
    static func putEntityIndex(_ entity: EntityKey, _ ids: inout [ULID], cursor: inout Cursor) throws {
        guard ids.count > 1 else {
            if let id = ids.first { try cursor.put(entity.bytes, id.bytes) }
            ids.removeAll()
            return
        }
        ids.sort()  // replicated events come in any order
        var values: [UInt8] = []
        values.reserveCapacity(16 * ids.count)
        for id in ids { id.append(to: &values) }
        try putIDs(entity.bytes, values, first: ids[0], cursor: &cursor)
        ids.removeAll()
    }

    /// Puts `values`, ids in order (16 bytes each, the first `first`), under `key` of an id
    /// index (dupsort, dupfixed) in one call (`MDB_MULTIPLE`): as appends when they follow
    /// the key's greatest held id (nearly always), which leaves the index's pages full (a
    /// split in the middle of a page left them half empty).
    static func putIDs(_ key: [UInt8], _ values: [UInt8], first: ULID, cursor: inout Cursor) throws {
        let last = try cursor.seekExact(key) == nil ? nil : try cursor.lastDup()
        let inOrder = last.map { ULID(bytes: $0.value).map { $0 < first } ?? false } ?? true
        try cursor.putMultiple(key, values: values, elementSize: 16, flags: inOrder ? .appendDup : [])
    }

    /// Puts `pendingRecords` into blocks of at most `EventBlocks.maxEvents` events and, with
    /// more than one, `EventBlocks.maxRecordBytes` of records.
    ///
    /// Full blocks go to `event_blocks`, appended in seq order. The last commits' events
    /// wait in `event_tail`, in small blocks that together hold fewer than `maxEvents`
    /// events and at most `maxRecordBytes`: a commit that would take the tail past either
    /// compresses the tail's events with its own into full blocks (the remainder, if any, is
    /// the new tail); one that would not adds a block of its own to the tail and
    /// decompresses nothing. So one-event commits leave full blocks behind them, each event
    /// compressed about twice, a commit's work stays bounded (the tail is under 64 events),
    /// and `event_blocks`' pages fill as a bulk load's do.
    mutating func writeBlocks(txn: inout WriteTransaction, writer: borrowing EventLog.Writer) throws {
        guard !pendingRecords.isEmpty else { return }
        let tables = log.tables
        let pendingFirst = seq - UInt64(pendingRecords.count) + 1
        let pendingBytes = pendingRecords.reduce(0) { $0 + EventBlocks.recordHeaderBytes + $1.payload.count }
        // The tail's blocks, headers only.
        var tail: [Cursor.Entry] = []
        var tailCount = 0
        var tailBytes = 0
        try txn.withCursor(tables.blockTail) { cursor in
            var item = try cursor.first()
            while let entry = item {
                guard entry.key.count == 8 else { throw CorruptDataError("an event_tail key is not a seq") }
                let header = try EventBlocks.header(entry.value, first: uint64(bigEndian: entry.key))
                tail.append(entry)
                tailCount += header.count
                tailBytes += header.rawBytes
                item = try cursor.next()
            }
        }
        if let last = tail.last, try EventBlocks.span(of: last).upperBound != pendingFirst {
            // A gap between the tail and this commit (no write leaves one; an old store's
            // sequence may): the tail's blocks stay as they are, moved to `event_blocks`.
            for entry in tail { try txn.put(tables.blocks, entry.key, entry.value, flags: .append) }
            try txn.drop(tables.blockTail)
            tail = []
            tailCount = 0
            tailBytes = 0
        }
        func encode(_ block: [EventBlocks.Record]) throws -> [UInt8] {
            try EventBlocks.encode(
                block, dictionaryVersion: writer.dictionaryVersion, dictionary: writer.dictionary,
                compressor: writer.compressor)
        }
        if tailCount + pendingRecords.count < EventBlocks.maxEvents,
            tailBytes + pendingBytes <= EventBlocks.maxRecordBytes
        {
            // Still short of a full block: one more small block in the tail.
            try txn.put(tables.blockTail, bigEndian(pendingFirst), try encode(pendingRecords), flags: .append)
            pendingRecords.removeAll()
            return
        }
        // The tail's events and this commit's, into full blocks; what is left is the new tail.
        var records: [EventBlocks.Record] = []
        records.reserveCapacity(tailCount + pendingRecords.count)
        for entry in tail {
            let block = try log.decodeBlock(entry, txn: txn, keep: false)
            for index in 0..<block.count { records.append(block.record(at: index)) }
        }
        records.append(contentsOf: pendingRecords)
        if !tail.isEmpty { try txn.drop(tables.blockTail) }
        var first = tail.first.map { uint64(bigEndian: $0.key) } ?? pendingFirst
        var rest = records[...]
        while !rest.isEmpty {
            var block: [EventBlocks.Record] = []
            var bytes = 0
            while let next = rest.first, block.count < EventBlocks.maxEvents {
                let size = EventBlocks.recordHeaderBytes + next.payload.count
                if !block.isEmpty, bytes + size > EventBlocks.maxRecordBytes { break }
                block.append(next)
                bytes += size
                rest.removeFirst()
            }
            // A last block short of full waits in the tail for the next commits.
            let full =
                block.count == EventBlocks.maxEvents || !rest.isEmpty
                || bytes + EventBlocks.recordHeaderBytes > EventBlocks.maxRecordBytes
            try txn.put(full ? tables.blocks : tables.blockTail, bigEndian(first), try encode(block), flags: .append)
            first += UInt64(block.count)
        }
        pendingRecords.removeAll()
    }

    /// The result of the client batch just appended: its ids, and the version and rev of
    /// each entity it names after its events.
    func result(ids: [ULID], written: [ULID]) -> AppendResult {
        var versions: [EntityKey: ULID] = [:]
        var revs: [EntityKey: UInt64] = [:]
        versions.reserveCapacity(namedInBatch.count)
        revs.reserveCapacity(namedInBatch.count)
        for slot in namedInBatch {
            let entry = touched[slot]
            if let version = entry.state.version { versions[entry.state.entity] = version }
            if entry.rev > 0 { revs[entry.state.entity] = entry.rev }
        }
        return AppendResult(ids: ids, versions: versions, revs: revs, written: written)
    }

    /// The entity's version as this batch sees it, when the batch has touched it.
    func version(of entity: EntityKey) -> ULID? {
        slots[entity].flatMap { touched[$0].state.version }
    }

    /// The event's canonical JSON without its id, checked against `max_event_bytes`.
    func storedPayload(of event: Event, replicated: Bool = false) throws(EventStoreError) -> [UInt8] {
        try log.storedPayload(of: event, replicated: replicated)
    }

    /// Writes an event made here: its payload encoded, and where its id goes kept for a
    /// watcher's notification.
    @discardableResult
    private mutating func writeEncoding(
        _ event: Event, slot: Int, txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> UInt64 {
        var idPosition = 0
        let payload = try log.storedPayload(of: event, through: &encoding, idPosition: &idPosition)
        return try write(event, payload: payload, idPosition: idPosition, slot: slot, txn: &txn, writer: &writer)
    }

    /// Writes an event (its payload from `storedPayload(of:)`) and its index entries, not
    /// the projection, and gives it the next seq. `slot` is its entity's in `touched`;
    /// `idPosition` is where the id goes in the payload, when the caller knows it.
    /// - Returns: the seq it took.
    @discardableResult
    mutating func write(
        _ event: Event, payload: [UInt8], idPosition: Int? = nil, slot: Int, txn: inout WriteTransaction,
        writer: inout EventLog.Writer
    ) throws -> UInt64 {
        // `open` refuses a head anywhere near the end, so this is only damage done since:
        // an error for the request, never a trap for the daemon.
        guard seq < UInt64.max else {
            throw EventStoreError(
                .corrupt,
                "the commit sequence is at its end (seq \(seq)): no event can take a further seq. This store was not written by evstore; restore it from a backup."
            )
        }
        let tables = log.tables
        event.id.store(into: &eventKey)
        // The index entry now, so that a later event of this transaction finds the id held;
        // the event itself goes into a block when the transaction's work is done.
        seq += 1
        eventValue.removeAll(keepingCapacity: true)
        eventValue.appendVarint(seq)
        if !mayHold(event.id) {
            try txn.put(tables.events, eventKey, eventValue, flags: .append)
            lastEventKey = event.id
        } else {
            try txn.put(tables.events, eventKey, eventValue, flags: .noOverwrite)
        }
        let record = EventBlocks.Record(id: event.id, payload: payload)
        pendingRecords.append(record)
        log.uncommitted.withLock { $0.keep(record, at: seq) }
        if touched[slot].unindexed.isEmpty { unindexedSlots.append(slot) }
        touched[slot].unindexed.append(event.id)
        if touched[slot].unindexed.count == WriteBatch.maxUnindexed {
            try WriteBatch.putEntityIndex(event.entity, &touched[slot].unindexed, tables: tables, txn: txn)
        }
        try recordBlobReferences(of: event, txn: &txn)
        originEntries.append((event.origin, event.id))
        // Every path that stores an event comes through here, so every stored event takes a
        // seq, in the transaction that stores it.
        if stored != nil {
            // A watcher's queue holds the payload until it is sent, and counts it at its size
            // on the wire: a payload in a buffer reserved larger (encoding reserves 512
            // bytes) is kept in one of its own size.
            var kept = payload
            if payload.capacity > payload.count + 64 {
                kept = []
                kept.reserveCapacity(payload.count)
                kept.append(contentsOf: payload)
            }
            stored?.append(
                CommittedEvent(
                    seq: seq, id: event.id, entity: event.entity, hasKey: event.key != nil, payload: kept,
                    idPosition: idPosition))
        }
        return seq
    }

    /// Stores an event made on another node (replicated or imported): writes it and its
    /// index entries, then folds it into its entity's state.
    mutating func writeAndFold(
        _ event: Event, payload: [UInt8], txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws {
        let slot = try slot(event.entity, txn: txn)
        let seq = try write(event, payload: payload, slot: slot, txn: &txn, writer: &writer)
        try WriteBatch.fold(event, seq: seq, into: &touched[slot], log: log, txn: txn)
        try decide(event, slot: slot, txn: &txn, writer: &writer)
    }

    /// At the authority of its type, decides a proposal just stored, in the same
    /// transaction: accepted when it was made from the current status and the move is legal
    /// by the types file, else rejected with the reason. A proposal decided already (a
    /// decision arrived first) is left as it is.
    mutating func decide(_ event: Event, slot: Int, txn: inout WriteTransaction, writer: inout EventLog.Writer)
        throws
    {
        guard case .propose(let status, let base) = event.body, rules.decides(event.entity),
            touched[slot].state.pendingIndex(event.id) != nil
        else { return }
        let reason = Self.rejection(
            of: status, base: base, entity: event.entity, state: touched[slot].state, rules: rules)
        let decision = Event(
            id: try freshID(txn: txn), origin: log.nodeID, entity: event.entity,
            body: .decide(proposal: event.id, accept: reason == nil, reason: reason), by: rules.localNode)
        let seq = try writeEncoding(decision, slot: slot, txn: &txn, writer: &writer)
        try WriteBatch.fold(decision, seq: seq, into: &touched[slot], log: log, txn: txn)
    }

    /// Decides up to `limit` pending proposals of the types this node decides, entity by
    /// entity (each one's in id order); whether some are left.
    mutating func decidePending(limit: Int, txn: inout WriteTransaction, writer: inout EventLog.Writer) throws
        -> (decided: Int, more: Bool)
    {
        var decided = 0
        for type in rules.types.keys.sorted() where rules.decides(type: type) {
            let prefix = Array((type + "/").utf8)
            var entities: [EntityKey] = []
            try txn.withCursor(log.tables.projections) { cursor in
                var item = try cursor.seek(prefix)
                while let (key, value) = item, key.starts(with: prefix) {
                    let entity = EntityKey(validated: key)
                    if try !EventLog.decodeProjection(try log.expanded(value, entity: entity, txn: txn), entity: entity)
                        .1
                        .proposals.isEmpty
                    {
                        entities.append(entity)
                    }
                    item = try cursor.next()
                }
            }
            for entity in entities {
                let slot = try slot(entity, txn: txn)
                for pending in touched[slot].state.proposals {
                    guard decided < limit else { return (decided, true) }
                    let proposal = Event(
                        id: pending.id, origin: pending.origin, entity: entity,
                        body: .propose(pending.status, base: pending.base))
                    try decide(proposal, slot: slot, txn: &txn, writer: &writer)
                    decided += 1
                }
            }
        }
        return (decided, false)
    }

    /// Why the authority rejects the proposal of `status` made from the status heads `base`,
    /// or nil when it accepts it.
    static func rejection(of status: String, base: [ULID], entity: EntityKey, state: EntityState, rules: TypeRules)
        -> String?
    {
        let current = state.currentStatus?.status
        if state.isDeleted { return "\(entity) is deleted" }
        guard base == state.statusHeadIDs else {
            let now = current.map { "is \($0) now" } ?? "has no status now"
            return "stale: \(entity) \(now), not the status this proposal was made from; propose again from it"
        }
        do {
            try rules.check(.status(status), of: entity, currentStatus: current)
        } catch {
            return error.message
        }
        return nil
    }

    /// Folds an event (already written, with `seq`) into its entity's state, and a status
    /// event into its history.
    static func fold(
        _ event: Event, seq: UInt64, into entry: inout Touched, log: EventLog, txn: borrowing WriteTransaction
    ) throws {
        let tables = log.tables
        var isFoldedError: (any Error)?
        let unindexed = entry.unindexed
        let outcome = entry.state.apply(event) { id in
            do {
                return try WriteBatch.isHeld(id, of: event.entity, unindexed: unindexed, tables: tables, txn: txn)
            } catch {
                isFoldedError = error
                return false
            }
        }
        if let isFoldedError { throw isFoldedError }
        if outcome == .needsRefold {
            // The refold reads the entity's events through the index: all of them first.
            try WriteBatch.putEntityIndex(event.entity, &entry.unindexed, tables: tables, txn: txn)
            entry.state = try log.refold(event.entity, txn: txn)
        }
        switch event.body {
        case .status(let status, _), .propose(let status, _):
            // In id order: a replicated event can be older than those held (rarely, and the
            // entries kept here are few, so the search from the end is linear).
            var index = entry.history.count
            while index > 0, event.id < entry.history[index - 1].id { index -= 1 }
            entry.history.insert(StatusEntry(id: event.id, origin: event.origin, status: status), at: index)
        default: break
        }
        entry.changed = true
        entry.rev = seq
    }

    /// Writes every touched projection back, with the status index, the conflicts table
    /// and the digest.
    mutating func finish(txn: inout WriteTransaction) throws {
        let tables = log.tables
        var digest = try txn.get(tables.meta, EventLog.Meta.digest).flatMap(StateDigest.init(bytes:)) ?? StateDigest()
        // By index, the state read in place: a copy of each entry would retain and release
        // every array it holds.
        for index in touched.indices where touched[index].changed {
            let entity = touched[index].state.entity
            if !touched[index].historyInTable, touched[index].history.count > EventLog.inlineHistoryLimit {
                touched[index].historyInTable = true
            }
            if touched[index].historyInTable {
                for entry in touched[index].history {
                    try txn.put(
                        tables.statusHistory, entity.bytes, EventLog.historyValue(entry.id, entry.origin, entry.status))
                }
                touched[index].history.removeAll()
            }
            let (record, hash) = EventLog.projectionRecord(
                touched[index].state, rev: touched[index].rev,
                history: touched[index].historyInTable ? nil : touched[index].history)
            let before = touched[index].before
            if let before { digest.remove(before.hash) }
            digest.add(hash)
            try txn.put(tables.projections, entity.bytes, recordCompression.stored(record, entity: entity))

            let statusKey = EventLog.statusKey(touched[index].state)
            if statusKey != before?.statusKey {
                if let old = before?.statusKey {
                    _ = try txn.delete(tables.statusIndex, old, value: entity.bytes)
                }
                if let statusKey { try txn.put(tables.statusIndex, statusKey, entity.bytes) }
            }
            if touched[index].state.hasConflicts {
                try txn.put(tables.conflicts, entity.bytes, EventLog.conflictRecord(touched[index].state))
            } else if before != nil {
                _ = try txn.delete(tables.conflicts, entity.bytes)
            }
            if touched[index].state.hasProposals || !(before?.ownRejected.isEmpty ?? true) {
                try RejectedOwnProposal.update(
                    touched[index].state, before: before?.ownRejected ?? [], origin: log.nodeID, table: tables.peers,
                    txn: &txn)
            }
        }
        try txn.put(tables.meta, EventLog.Meta.digest, digest.bytes)
        try writeEntityIndex(txn: txn)
        try writeOriginEntries(txn: &txn)
        for (origin, lead) in skews {
            let previous = try txn.get(tables.skew, origin.bytes).map(uint64(bigEndian:)) ?? 0
            if lead > previous { try txn.put(tables.skew, origin.bytes, bigEndian(lead)) }
        }
    }
}

extension EventLog {
    /// The most status history entries a projection record holds: a longer history moves
    /// to `status_history` (a record is rewritten on every change of its entity, and a
    /// history grows for as long as the entity lives).
    static let inlineHistoryLimit = 16

    /// A `status_history` value: id, origin, status.
    static func historyValue(_ id: ULID, _ origin: ULID, _ status: String) -> [UInt8] {
        var value: [UInt8] = []
        value.reserveCapacity(32 + status.utf8.count)
        id.append(to: &value)
        origin.append(to: &value)
        value.append(contentsOf: status.utf8)
        return value
    }

    /// A `projections` value and the state's hash (the state is encoded once for both):
    ///
    /// ```
    /// 16 bytes    state hash
    /// varint      rev
    /// varint      length of the encoded state, then the encoded state
    /// byte        0: the status history follows; 1: it is in `status_history`
    /// varint      origins of the history (n), then n × 16 bytes, sorted
    /// varint      history entries, each: id (16), varint index of its origin, varint
    ///             length + status; in id order
    /// ```
    /// The rev is this node's and stays out of the hash (and so out of the digest): equal
    /// event sets still hash equal on every node. A short status history rides in the
    /// record (`get` reads both), its origins written once each as the state's are; a
    /// history longer than `inlineHistoryLimit` is in `status_history` (nil here).
    static func projectionRecord(_ state: EntityState, rev: UInt64, history: [StatusEntry]?)
        -> (record: [UInt8], hash: StateHash)
    {
        let encoded = state.encoded()
        let hash = StateHash(hashing: encoded)
        var origins = history?.map(\.origin) ?? []
        origins.sort()
        var unique: [ULID] = []
        for origin in origins where unique.last != origin { unique.append(origin) }
        var out: [UInt8] = []
        out.reserveCapacity(33 + encoded.count + (history?.count ?? 0) * 28 + unique.count * 16)
        ULID(high: hash.high, low: hash.low).append(to: &out)
        out.appendVarint(rev)
        out.appendLengthPrefixed(encoded)
        guard let history else {
            out.append(1)
            return (out, hash)
        }
        out.append(0)
        out.appendULIDs(unique)
        out.appendVarint(history.count)
        for entry in history {
            entry.id.append(to: &out)
            out.appendVarint(unique.firstIndex(of: entry.origin) ?? 0)
            out.appendLengthPrefixed(entry.status)
        }
        return (out, hash)
    }

    static func decodeProjection(_ record: ProjectionRecord, entity: EntityKey) throws -> (
        StateHash, EntityState, UInt64
    ) {
        let (hash, state, rev, _) = try decodeProjection(record, entity: entity, history: false)
        return (hash, state, rev)
    }

    /// The hash, state and rev of a `projections` value, and when `history` its status
    /// history (nil: in `status_history`; else [] when not asked for).
    static func decodeProjection(_ record: ProjectionRecord, entity: EntityKey, history: Bool) throws
        -> (StateHash, EntityState, UInt64, [StatusEntry]?)
    {
        var reader = ByteReader(record.bytes)
        let (raw, rev) = try projectionHeader(&reader, entity: entity)
        let state = try EntityState(entity: entity, decoding: try reader.lengthPrefixed())
        let entries = history ? try projectionHistory(&reader, entity: entity) : []
        return (StateHash(high: raw.high, low: raw.low), state, rev, entries)
    }

    /// The rev of a `projections` value, its state left undecoded.
    static func projectionRev(_ record: [UInt8], entity: EntityKey) throws -> UInt64 {
        var reader = ByteReader(record)
        return try projectionHeader(&reader, entity: entity).rev
    }

    /// The status history of a `projections` value, its state left undecoded (nil: in
    /// `status_history`).
    static func projectionHistory(_ record: ProjectionRecord, entity: EntityKey) throws -> [StatusEntry]? {
        var reader = ByteReader(record.bytes)
        _ = try projectionHeader(&reader, entity: entity)
        _ = try reader.bytes(try reader.count())
        return try projectionHistory(&reader, entity: entity)
    }

    static func projectionHeader(_ reader: inout ByteReader, entity: EntityKey) throws
        -> (hash: ULID, rev: UInt64)
    {
        do {
            return (try reader.ulid(), try reader.varint())
        } catch {
            throw CorruptDataError("projection record of \(entity) is truncated")
        }
    }

    private static func projectionHistory(_ reader: inout ByteReader, entity: EntityKey) throws -> [StatusEntry]? {
        switch try reader.byte() {
        case 0: break
        case 1:
            guard reader.isAtEnd else { throw CorruptDataError("trailing bytes after the projection of \(entity)") }
            return nil
        default: throw CorruptDataError("the status history of \(entity) is unreadable")
        }
        let origins = try reader.ulids()
        var entries: [StatusEntry] = []
        for _ in 0..<(try reader.count(minimumElementSize: 18)) {
            let id = try reader.ulid()
            let origin = try reader.reference(into: origins)
            entries.append(StatusEntry(id: id, origin: origin, status: try reader.string()))
        }
        guard reader.isAtEnd else { throw CorruptDataError("trailing bytes after the status history of \(entity)") }
        return entries
    }

    /// `TYPE 0x00 STATUS`, the status index key of an entity, or nil without a status.
    static func statusKey(_ state: EntityState) -> [UInt8]? {
        guard let current = state.currentStatus else { return nil }
        var key = Array(state.entity.bytes[..<state.entity.typeLength])
        key.append(0)
        key.append(contentsOf: current.status.utf8)
        return key
    }

    static func conflictRecord(_ state: EntityState) -> [UInt8] {
        var out = Array("{\"fields\":[".utf8)
        for (index, name) in state.conflictingFields.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            CanonicalWriter.appendString(name, to: &out)
        }
        out.append(contentsOf: Array("],\"status\":".utf8))
        CanonicalWriter.appendBool(state.hasStatusConflict, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}
