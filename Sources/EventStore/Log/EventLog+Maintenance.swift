import Projections

/// What `EventLog.rebuild(verify:)` found.
public struct RebuildReport: Equatable, Sendable {
    public var entities: Int = 0
    public var events: Int = 0
    /// Entities whose stored projection (with its status history) differed from their events.
    public var mismatched: [EntityKey] = []
    /// Whether the stored digest differed from the digest of the folded states.
    public var digestMismatch = false
    /// How many more events the `events` index names than the blocks hold, or fewer (0 in
    /// a sound store: every stored event takes a seq, and its block holds it).
    public var unsequenced = 0
}

extension EventLog {
    /// Folds every entity again from the log. With `verify`, compares against the stored
    /// projections (each with its status history) and changes nothing; otherwise replaces
    /// projections, the status index, the conflicts table and the digest.
    ///
    /// The commit sequence is not touched: it records the order this node stored its
    /// events in, which the log alone cannot tell, and consumers resume by it. Each entity's
    /// `rev` is found again from it (the greatest seq among the entity's events).
    @discardableResult
    public func rebuild(verify: Bool = false) throws(EventStoreError) -> RebuildReport {
        try requireWriterThread()
        do {
            return try writer.withLock { writer throws -> RebuildReport in
                try environment.write { txn -> RebuildReport in
                    let report = try rebuildProjections(
                        txn: &txn, verify: verify, compression: RecordCompression(writer))
                    if verify { throw VerifyOnly(report: report) }
                    return report
                }
            }
        } catch let verified as VerifyOnly {
            return verified.report
        } catch {
            throw EventStoreError.from(error)
        }
    }

    /// Brings a store of an older format to this one, in one transaction (a crash during it
    /// leaves the old store, upgraded at the next open): before format 3, every event takes
    /// a seq, in id order (the order an older release's `log` gave), and the head is
    /// recorded; a format-3 store's per-event seq entries go into blocks; before format 5,
    /// the origin index is written again with full pages; before format 6, the blobs the
    /// events name and the node lacks are listed (`blob_pending`) and every reference to a
    /// blob is indexed (`blob_refs`); then every projection is folded
    /// again, with its rev and its status history (in the record when short, else in
    /// `status_history`), and the format marker is written.
    func upgrade() throws(EventStoreError) {
        do {
            let head = try writer.withLock { writer throws -> UInt64 in
                try environment.write { txn -> UInt64 in
                    let format = try txn.get(tables.meta, Meta.format).map(uint32(bigEndian:)) ?? EventLog.formatVersion
                    var seq = try EventLog.sequenceHead(txn: txn, tables: tables)
                    // The sequence table of formats 3 to 6, `seq_blocks`, is read by name: its
                    // seqs go into the event blocks, and then it goes.
                    let legacy = format < 7 ? try txn.openDatabase("seq_blocks", flags: [.create]) : nil
                    if let legacy, format < 3 {
                        // Older releases kept no sequence table; should one be there anyway,
                        // its seqs are given again above its head, which never goes back.
                        try txn.drop(legacy)
                        var ids: [ULID] = []
                        try txn.withCursor(tables.events) { cursor in
                            var item = try cursor.first()
                            while let current = item {
                                if let id = ULID(bytes: current.key) { ids.append(id) }
                                item = try cursor.next()
                            }
                        }
                        try SequenceBlocks.append(ids, first: seq + 1, table: legacy, txn: &txn)
                        seq += UInt64(ids.count)
                        try txn.put(tables.meta, Meta.sequenceHead, bigEndian(seq))
                    } else if let legacy, format == 3 {
                        // An entry per event in `seq`: the same seqs, now in blocks; a gap
                        // between two seqs starts a new block.
                        try txn.drop(legacy)
                        let perEvent = try txn.openDatabase("seq", flags: [.create])
                        var entries: [(seq: UInt64, id: ULID)] = []
                        try txn.withCursor(perEvent) { cursor in
                            var item = try cursor.first()
                            while let current = item {
                                guard current.key.count == 8, let id = ULID(bytes: current.value) else {
                                    throw CorruptDataError("a seq table entry is not a seq and an id")
                                }
                                entries.append((uint64(bigEndian: current.key), id))
                                item = try cursor.next()
                            }
                        }
                        var start = 0
                        while start < entries.count {
                            var end = start + 1
                            while end < entries.count, entries[end].seq == entries[end - 1].seq + 1 { end += 1 }
                            try SequenceBlocks.append(
                                entries[start..<end].map(\.id), first: entries[start].seq, table: legacy, txn: &txn)
                            start = end
                        }
                        try txn.drop(perEvent)
                    }
                    if let legacy {
                        seq = max(seq, try SequenceBlocks.last(table: legacy, txn: txn))
                        try moveEventsIntoBlocks(from: legacy, txn: &txn, writer: writer)
                        try txn.removeDatabase(legacy)
                    }
                    if format < 5 { try repackOriginIndex(txn: &txn) }
                    if format < 6 { try indexBlobReferences(txn: &txn) }
                    _ = try rebuildProjections(txn: &txn, verify: false, compression: RecordCompression(writer))
                    return seq
                }
            }
            committedSequence.store(head, ordering: .releasing)
        } catch {
            throw EventStoreError.from(error)
        }
    }

    /// The upgrade to format 7: every event, one value each in `events` (`StoredValue`), goes
    /// into the blocks of `event_blocks` in the order of `legacy`'s seqs (a gap between two
    /// seqs starts a new block), compressed with the current dictionary, and `events` then
    /// maps each id to its seq.
    func moveEventsIntoBlocks(from legacy: Database, txn: inout WriteTransaction, writer: borrowing Writer) throws {
        var block: [EventBlocks.Record] = []
        var blockFirst: UInt64 = 0
        var blockBytes = 0
        var moved = 0
        func flush(_ txn: inout WriteTransaction, last: Bool = false) throws {
            guard !block.isEmpty else { return }
            let value = try EventBlocks.encode(
                block, dictionaryVersion: writer.dictionaryVersion, dictionary: writer.dictionary,
                compressor: writer.compressor)
            // The last events, short of a full block, wait in the tail as a commit's would.
            let short =
                last && block.count < EventBlocks.maxEvents
                && blockBytes + EventBlocks.recordHeaderBytes <= EventBlocks.maxRecordBytes
            try txn.put(short ? tables.blockTail : tables.blocks, bigEndian(blockFirst), value, flags: .append)
            block.removeAll(keepingCapacity: true)
            blockBytes = 0
        }
        var entries: [(seq: UInt64, id: ULID)] = []
        try SequenceBlocks.forEach(table: legacy, txn: txn) { seq, id in entries.append((seq, id)) }
        for (seq, id) in entries {
            guard let value = try txn.get(tables.events, id.bytes) else {
                throw CorruptDataError("seq \(seq) names event \(id), which the store does not hold")
            }
            let payload = try legacyPayload(of: value, txn: txn)
            let size = EventBlocks.recordHeaderBytes + payload.count
            let follows = !block.isEmpty && blockFirst + UInt64(block.count) == seq
            if !follows || block.count == EventBlocks.maxEvents || blockBytes + size > EventBlocks.maxRecordBytes {
                try flush(&txn)
                blockFirst = seq
            }
            block.append(EventBlocks.Record(id: id, payload: payload))
            blockBytes += size
            moved += 1
        }
        try flush(&txn, last: true)
        let held = try txn.stat(tables.events).entries
        guard moved == held else {
            throw CorruptDataError(
                "the store holds \(held) events and its sequence names \(moved): it cannot be upgraded. Restore it from a backup"
            )
        }
        // Written again in id order into an emptied table: values of a few bytes in place of
        // the events would leave its pages nearly empty.
        try txn.drop(tables.events)
        entries.sort { $0.id < $1.id }
        for (seq, id) in entries {
            var value: [UInt8] = []
            value.appendVarint(seq)
            try txn.put(tables.events, id.bytes, value, flags: .append)
        }
    }

    /// Every entity that has an event, in key order (the entity index's keys).
    func allEntities(txn: borrowing some TransactionReading & ~Copyable) throws -> [EntityKey] {
        var entities: [EntityKey] = []
        try txn.withCursor(tables.entityIndex) { cursor in
            var item = try cursor.first()
            while let current = item {
                entities.append(EntityKey(validated: current.key))
                item = try cursor.nextNoDup()
            }
        }
        return entities
    }

    /// The body of `rebuild(verify:)`, in the caller's write transaction. With `verify` it
    /// writes nothing (the caller aborts the transaction anyway).
    func rebuildProjections(txn: inout WriteTransaction, verify: Bool, compression: RecordCompression) throws
        -> RebuildReport
    {
        var report = RebuildReport()
        var digest = StateDigest()
        let entities = try allEntities(txn: txn)
        // Every event's seq, to find each entity's rev.
        var seqs: [ULID: UInt64] = [:]
        seqs.reserveCapacity(try txn.stat(tables.events).entries)
        try txn.withCursor(tables.events) { cursor in
            var item = try cursor.first()
            while let current = item {
                guard let id = ULID(bytes: current.key) else { throw CorruptDataError("event key is not an id") }
                seqs[id] = try EventLog.seq(indexValue: current.value, id: id)
                item = try cursor.next()
            }
        }
        // Events the blocks hold: one per seq the index names, short of damage.
        var inBlocks = 0
        try forEachBlock(txn: txn) { current in
            guard current.key.count == 8 else { throw CorruptDataError("an event_blocks key is not a seq") }
            inBlocks += try EventBlocks.header(current.value, first: uint64(bigEndian: current.key)).count
        }
        if !verify {
            try txn.drop(tables.projections)
            try txn.drop(tables.statusIndex)
            try txn.drop(tables.conflicts)
            try txn.drop(tables.statusHistory)
            try txn.drop(tables.blobReferences)
            for record in try rejectedOwnProposals(txn: txn) {
                _ = try txn.delete(tables.peers, RejectedOwnProposal.key(record.proposal.id))
            }
        }
        var rejected: [RejectedOwnProposal] = []
        // The references to blobs the events make: `blob_refs` written again, or compared.
        var references: [[UInt8]: (entity: EntityKey, origin: ULID)] = [:]
        for entity in entities {
            let events = try self.events(of: entity, txn: txn)
            for event in events {
                switch event.body {
                case .edit, .add: break
                default: continue
                }
                for reference in event.blobReferences {
                    let key = EventLog.referenceKey(reference.hash, event.id)
                    if verify {
                        references[key] = (entity, event.origin)
                    } else {
                        try txn.put(tables.blobReferences, key, event.origin.bytes)
                    }
                }
            }
            let state = Projection.fold(entity, events)
            let history = Projection.statusHistory(entity, events)
            let rev = events.reduce(UInt64(0)) { max($0, seqs[$1.id] ?? 0) }
            for proposal in RejectedOwnProposal.of(state, origin: nodeID) {
                rejected.append(RejectedOwnProposal(entity: entity, proposal: proposal))
            }
            let inTable = history.count > EventLog.inlineHistoryLimit
            let (record, hash) = EventLog.projectionRecord(state, rev: rev, history: inTable ? nil : history)
            digest.add(hash)
            report.entities += 1
            report.events += state.eventCount
            if !verify {
                try RejectedOwnProposal.update(state, before: [], origin: nodeID, table: tables.peers, txn: &txn)
            }
            if verify {
                // Expanded: a cold record is stored compressed, and expands to the bytes folded.
                if try txn.get(tables.projections, entity.bytes).map({
                    try expanded($0, entity: entity, txn: txn).bytes
                })
                    != record
                    || (inTable && tableHistory(of: entity, txn: txn) != history)
                {
                    report.mismatched.append(entity)
                }
                continue
            }
            try txn.put(tables.projections, entity.bytes, compression.stored(record, entity: entity))
            if inTable {
                for entry in history {
                    try txn.put(
                        tables.statusHistory, entity.bytes, EventLog.historyValue(entry.id, entry.origin, entry.status))
                }
            }
            if let key = EventLog.statusKey(state) { try txn.put(tables.statusIndex, key, entity.bytes) }
            if state.hasConflicts {
                try txn.put(tables.conflicts, entity.bytes, EventLog.conflictRecord(state))
            }
        }
        let stored =
            try txn.get(tables.meta, Meta.digest).flatMap(StateDigest.init(bytes:)) ?? StateDigest()
        report.digestMismatch = stored != digest
        report.unsequenced = abs(seqs.count - inBlocks)
        if verify {
            report.mismatched.append(contentsOf: try projectionsWithoutEvents(txn: txn, known: Set(entities)))
            report.mismatched.append(contentsOf: try referencesDiffering(from: references, txn: txn))
            // The records of this node's rejected proposals are what the states say.
            let held = try rejectedOwnProposals(txn: txn).sorted { $0.proposal.id < $1.proposal.id }
            let expected = rejected.sorted { $0.proposal.id < $1.proposal.id }
            if held != expected {
                report.mismatched.append(contentsOf: Set((held + expected).map(\.entity)).sorted())
            }
            return report
        }
        try txn.put(tables.meta, Meta.digest, digest.bytes)
        // Every projection is now in this version's format.
        try txn.put(tables.meta, Meta.format, bigEndian(EventLog.formatVersion))
        return report
    }

    /// The entities whose references to blobs `blob_refs` lists otherwise than `expected`
    /// (each reference's key, with its event's entity and origin) says.
    func referencesDiffering(
        from expected: [[UInt8]: (entity: EntityKey, origin: ULID)], txn: borrowing some TransactionReading & ~Copyable
    ) throws -> [EntityKey] {
        var differing = Set<EntityKey>()
        var listed = 0
        try txn.withCursor(tables.blobReferences) { cursor in
            var item = try cursor.first()
            while let current = item {
                if let reference = expected[current.key] {
                    listed += 1
                    if current.value != reference.origin.bytes { differing.insert(reference.entity) }
                } else if current.key.count == 48, let id = ULID(bytes: Array(current.key[32...])),
                    let event = try readEvent(id, txn: txn)
                {
                    differing.insert(event.entity)
                } else {
                    throw CorruptDataError("blob_refs lists a reference by an event the store does not hold")
                }
                item = try cursor.next()
            }
        }
        if listed < expected.count {
            for (key, reference) in expected where try txn.get(tables.blobReferences, key) == nil {
                differing.insert(reference.entity)
            }
        }
        return differing.sorted { $0.bytes.lexicographicallyPrecedes($1.bytes) }
    }

    /// Writes the origin index again, each origin's ids appended in order: an index written
    /// before format 5 split its pages in the middle and left them half empty.
    func repackOriginIndex(txn: inout WriteTransaction) throws {
        var byOrigin: [(origin: [UInt8], ids: [UInt8])] = []
        try txn.withCursor(tables.originIndex) { cursor in
            var item = try cursor.first()
            while let current = item {
                if byOrigin.last?.origin != current.key { byOrigin.append((current.key, [])) }
                byOrigin[byOrigin.count - 1].ids.append(contentsOf: current.value)
                item = try cursor.next()
            }
        }
        try txn.drop(tables.originIndex)
        try txn.withCursor(tables.originIndex) { cursor in
            for (origin, ids) in byOrigin where !ids.isEmpty {
                try cursor.putMultiple(origin, values: ids, elementSize: 16, flags: .appendDup)
            }
        }
    }

    /// Aborts a verifying rebuild's transaction (it must change nothing) and carries its report.
    struct VerifyOnly: Error {
        let report: RebuildReport
    }

    func projectionsWithoutEvents(txn: borrowing WriteTransaction, known: Set<EntityKey>) throws -> [EntityKey] {
        try txn.withCursor(tables.projections) { cursor in
            var orphans: [EntityKey] = []
            var item = try cursor.first()
            while let current = item {
                let entity = EntityKey(validated: current.key)
                if !known.contains(entity) { orphans.append(entity) }
                item = try cursor.next()
            }
            return orphans
        }
    }

    // MARK: - Compression dictionary

    /// Whether the store has grown enough since the last training to train a dictionary.
    public func dictionaryTrainingDue() throws(EventStoreError) -> Bool {
        try reading { txn in
            let count = try txn.stat(tables.events).entries
            let trainedAt = try txn.get(tables.meta, Meta.dictionaryTrainedAt).map(uint64(bigEndian:)) ?? 0
            return count >= EventLog.trainingDue(after: Int(clamping: trainedAt), options: options)
        }
    }

    /// The event count at which training is due after one at `trainedAt` events (0: none
    /// yet): the threshold first, then each tenfold growth.
    static func trainingDue(after trainedAt: Int, options: StoreOptions) -> Int {
        max(options.dictionaryTrainingThreshold, trainedAt.multipliedReportingOverflow(by: 10).partialValue)
    }

    /// Trains a new dictionary from the newest events when due, stores it under the next
    /// version and makes it current. Events written before keep their own dictionary.
    /// - Returns: the new version, or nil when training was not due.
    @discardableResult
    public func trainDictionaryIfDue() throws(EventStoreError) -> UInt32? {
        guard try dictionaryTrainingDue() else { return nil }
        return try trainDictionary()
    }

    /// Trains and installs a new dictionary now.
    @discardableResult
    public func trainDictionary() throws(EventStoreError) -> UInt32 {
        try requireWriterThread()
        return try install(try prepareDictionary())
    }

    /// Trains a dictionary from the newest events, in a read transaction: nothing waits for
    /// it. `install(_:)` then stores it, on the writer.
    public func prepareDictionary() throws(EventStoreError) -> PreparedDictionary {
        let (samples, recordSamples, count, first) = try reading { txn -> ([[UInt8]], [[UInt8]], Int, Bool) in
            let count = try txn.stat(tables.events).entries
            let first = try txn.get(tables.meta, Meta.dictionaryVersion) == nil
            let wanted =
                first
                ? min(options.firstDictionarySampleCount, options.dictionarySampleCount)
                : options.dictionarySampleCount
            // The newest events: the last blocks, from the end (the tail's first).
            var samples: [[UInt8]] = []
            for table in tables.blockTables.reversed() {
                try txn.withCursor(table) { cursor in
                    var item = try cursor.last()
                    while let current = item, samples.count < wanted {
                        let block = try decodeBlock(current, txn: txn, keep: false)
                        for index in (0..<block.count).reversed() where samples.count < wanted {
                            samples.append(block.payload(at: index))
                        }
                        item = try cursor.prev()
                    }
                }
            }
            return (samples, try sampleRecords(wanted / 4, txn: txn), count, first)
        }
        // The first is trained quickly, at one segment size: the writer waits for it (a
        // bulk load or a first sync, `trainsFirstDictionaryInline`), and the next training
        // replaces it.
        let level = options.compressionLevel
        let (bytes, dictionary): ([UInt8], CompressionDictionary)
        do {
            bytes = try DictionaryTrainer.train(
                samples: samples, capacity: options.dictionaryCapacity, quick: first, level: level)
            dictionary = try CompressionDictionary(bytes: bytes, level: level)
        } catch {
            throw EventStoreError.from(error)
        }
        // The records' own: none when they are too few or too alike to train on (zstd
        // refuses), and records then go on with the events' dictionary.
        var records: (bytes: [UInt8], dictionary: CompressionDictionary)?
        if let recordBytes = try? DictionaryTrainer.train(
            samples: recordSamples, capacity: options.dictionaryCapacity, quick: first, level: level),
            let recordDictionary = try? CompressionDictionary(bytes: recordBytes, level: level)
        {
            records = (recordBytes, recordDictionary)
        }
        return PreparedDictionary(
            bytes: bytes, dictionary: dictionary, eventCount: count, records: records, eventSamples: samples.count,
            recordSamples: recordSamples.count)
    }

    /// Projection records to train the records' dictionary on, as folded, from the end of
    /// the table (entities named by time-ordered ids: the newest): their bodies, the part
    /// that is compressed. At most `wanted`.
    private func sampleRecords(_ wanted: Int, txn: borrowing some TransactionReading & ~Copyable) throws -> [[UInt8]] {
        try txn.withCursor(tables.projections) { cursor in
            var samples: [[UInt8]] = []
            var item = try cursor.last()
            while let current = item, samples.count < wanted {
                let entity = EntityKey(validated: current.key)
                // A damaged record is left out: a read of it reports it, and training is no
                // place to fail for it. Anything else (the storage failing) fails the training.
                do {
                    samples.append(
                        try expanded(current.value, entity: entity, txn: txn).revAndBody(entity: entity).body)
                } catch let error as EventStoreError where error.reason == .corrupt {
                } catch is CorruptDataError {}
                item = try cursor.prev()
            }
            return samples
        }
    }

    /// Stores a trained dictionary under the next version and makes it current (a write).
    /// - Returns: its version.
    public func install(_ prepared: PreparedDictionary) throws(EventStoreError) -> UInt32 {
        try requireWriterThread()
        do {
            return try writer.withLock { writer throws -> UInt32 in
                var recordVersion: UInt32?
                let version = try environment.write { txn -> UInt32 in
                    recordVersion = nil
                    let current =
                        try txn.get(tables.meta, Meta.dictionaryVersion).map(uint32(bigEndian:)) ?? 0
                    let version = current + 1
                    try txn.put(tables.dictionaries, bigEndian(version), prepared.bytes)
                    try txn.put(tables.meta, Meta.dictionaryVersion, bigEndian(version))
                    try txn.put(tables.meta, Meta.dictionaryTrainedAt, bigEndian(UInt64(prepared.eventCount)))
                    if let records = prepared.records {
                        let current =
                            try txn.get(tables.meta, Meta.recordDictionaryVersion).map(uint32(bigEndian:))
                            ?? EventLog.recordDictionaryBase
                        let version = current + 1
                        try txn.put(tables.dictionaries, bigEndian(version), records.bytes)
                        try txn.put(tables.meta, Meta.recordDictionaryVersion, bigEndian(version))
                        recordVersion = version
                    }
                    return version
                }
                dictionaries.withLock { $0[version] = prepared.dictionary }
                if let records = prepared.records, let recordVersion {
                    dictionaries.withLock { $0[recordVersion] = records.dictionary }
                    writer.recordDictionaryVersion = recordVersion
                    writer.recordDictionary = records.dictionary
                }
                writer.dictionaryVersion = version
                writer.dictionary = prepared.dictionary
                writer.nextTrainingAt = EventLog.trainingDue(after: prepared.eventCount, options: options)
                return version
            }
        } catch {
            throw EventStoreError.from(error)
        }
    }
}

/// A dictionary trained and not yet stored (`EventLog.prepareDictionary()`).
public struct PreparedDictionary: Sendable {
    let bytes: [UInt8]
    let dictionary: CompressionDictionary
    /// The events held when it was sampled.
    let eventCount: Int
    /// The projection records' dictionary trained with it, if they made one.
    let records: (bytes: [UInt8], dictionary: CompressionDictionary)?
    /// The events and the projection records it was trained on.
    package let eventSamples: Int
    package let recordSamples: Int
}
