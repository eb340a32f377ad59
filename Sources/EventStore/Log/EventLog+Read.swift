import Projections

extension EventLog {
    /// Runs `body` in a read transaction, translating storage errors.
    func reading<R>(_ body: (borrowing ReadTransaction) throws -> R) throws(EventStoreError) -> R {
        do {
            return try environment.read(body)
        } catch {
            throw EventStoreError.from(error)
        }
    }

    /// One event by id, or nil.
    public func event(_ id: ULID) throws(EventStoreError) -> Event? {
        try reading { txn in try readEvent(id, txn: txn) }
    }

    /// The events with these ids, in the order given, in one read transaction; ids not
    /// held are left out.
    public func events(ids: [ULID]) throws(EventStoreError) -> [Event] {
        try reading { txn in
            var reader = BlockReader()
            return try ids.compactMap { id in
                try reader.payload(of: id, log: self, txn: txn).map { try decodePayload($0, id: id) }
            }
        }
    }

    /// Events in id order after `after` (exclusive), at most `limit`, and the cursor for
    /// the next page (nil at the end). Like `feed`, a page ends early once its events'
    /// canonical JSON would pass `maxBytes` (one event at least).
    public func events(after: ULID? = nil, limit: Int = 1000, maxBytes: Int = .max) throws(EventStoreError) -> (
        events: [Event], next: ULID?
    ) {
        try reading { txn in
            try txn.withCursor(tables.events) { cursor in
                var out: [Event] = []
                var bytes = 0
                var item = try cursor.first(after: after)
                while let current = item, out.count < limit {
                    guard let id = ULID(bytes: current.key) else { throw CorruptDataError("event key is not an id") }
                    let seq = try EventLog.seq(indexValue: current.value, id: id)
                    let payload = try storedPayload(of: id, seq: seq, txn: txn)
                    if !out.isEmpty, bytes + payload.count > maxBytes { break }
                    bytes += payload.count
                    out.append(try decodePayload(payload, id: id))
                    item = try cursor.next()
                }
                return (out, item == nil ? nil : out.last?.id)
            }
        }
    }

    /// The events of one entity in id order, after `after`, at most `limit` (and `maxBytes`).
    public func events(
        ofEntity entity: EntityKey, after: ULID? = nil, limit: Int = 1000, maxBytes: Int = .max
    ) throws(EventStoreError) -> (events: [Event], next: ULID?) {
        try indexedEvents(in: tables.entityIndex, key: entity.bytes, after: after, limit: limit, maxBytes: maxBytes)
    }

    /// The events created by one node, in id order, after `after`, at most `limit` (and `maxBytes`).
    public func events(
        ofOrigin origin: ULID, after: ULID? = nil, limit: Int = 1000, maxBytes: Int = .max
    ) throws(EventStoreError) -> (events: [Event], next: ULID?) {
        try indexedEvents(in: tables.originIndex, key: origin.bytes, after: after, limit: limit, maxBytes: maxBytes)
    }

    /// A page of the events an index lists under `key`.
    func indexedEvents(in index: Database, key: [UInt8], after: ULID?, limit: Int, maxBytes: Int = .max)
        throws(EventStoreError) -> (events: [Event], next: ULID?)
    {
        try reading { txn in
            let (ids, more) = try eventIDs(in: index, key: key, after: after, limit: limit, txn: txn)
            var events: [Event] = []
            var bytes = 0
            var reader = BlockReader()
            for id in ids {
                guard let payload = try reader.payload(of: id, log: self, txn: txn) else {
                    throw CorruptDataError("index names a missing event \(id)")
                }
                if !events.isEmpty, bytes + payload.count > maxBytes {
                    return (events, events.last?.id)
                }
                bytes += payload.count
                events.append(try decodePayload(payload, id: id))
            }
            return (events, more ? ids.last : nil)
        }
    }

    /// Ids of one origin's events after `after`, at most `limit` (no decoding).
    public func eventIDs(ofOrigin origin: ULID, after: ULID? = nil, limit: Int = 1000) throws(EventStoreError) -> [ULID]
    {
        try reading { txn in
            try eventIDs(in: tables.originIndex, key: origin.bytes, after: after, limit: limit, txn: txn).ids
        }
    }

    /// The version vector: for each origin, the greatest id held.
    public func versionVector() throws(EventStoreError) -> [ULID: ULID] {
        try reading { txn in
            try localVector(txn: txn)
        }
    }

    /// The current state of an entity, or nil when no event of it is held.
    public func state(of entity: EntityKey) throws(EventStoreError) -> EntityState? {
        try reading { txn in
            try txn.get(tables.projections, entity.bytes).map {
                try EventLog.decodeProjection(try expanded($0, entity: entity, txn: txn), entity: entity).1
            }
        }
    }

    /// The state as `get` returns it — canonical JSON with the status history, and the
    /// entity's `rev` on this node added as the last member (it is not part of the state) —
    /// or nil when no event of the entity is held.
    public func canonicalState(of entity: EntityKey) throws(EventStoreError) -> [UInt8]? {
        try reading { txn in try canonicalState(of: entity, txn: txn) }
    }

    /// `canonicalState(of:)` when the entity's record is at most `maxRecordBytes`: what a
    /// request answered on the event loop may cost. `tooLarge` leaves the answer to a
    /// request thread.
    public func canonicalState(of entity: EntityKey, maxRecordBytes: Int) throws(EventStoreError) -> BoundedState {
        try reading { txn in
            guard let value = try txn.get(tables.projections, entity.bytes) else { return .notFound }
            guard value.count <= maxRecordBytes else { return .tooLarge }
            let record = try expanded(value, entity: entity, txn: txn)
            if let json = EventLog.transcodedState(record.bytes, entity: entity) { return .state(json) }
            return .state(try decodedCanonicalState(record, entity: entity, txn: txn))
        }
    }

    public enum BoundedState: Equatable, Sendable {
        case state([UInt8])
        case notFound
        case tooLarge
    }

    func canonicalState(of entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws -> [UInt8]? {
        guard let value = try txn.get(tables.projections, entity.bytes) else { return nil }
        let record = try expanded(value, entity: entity, txn: txn)
        if let json = EventLog.transcodedState(record.bytes, entity: entity) { return json }
        return try decodedCanonicalState(record, entity: entity, txn: txn)
    }

    /// `canonicalState` the long way: the state decoded, then written out. It answers for
    /// every record (a history in `status_history`, corrupt bytes reported as such);
    /// `transcodedState` must give the same bytes wherever it answers.
    func decodedCanonicalState(
        _ record: ProjectionRecord, entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable
    ) throws -> [UInt8] {
        let (_, state, rev, history) = try EventLog.decodeProjection(record, entity: entity, history: true)
        var json = state.canonicalJSON(history: try history ?? tableHistory(of: entity, txn: txn))
        guard json.last == UInt8(ascii: "}") else { return json }
        json.removeLast()
        json.append(contentsOf: Array(#","rev":"#.utf8))
        json.append(contentsOf: Array(String(rev).utf8))
        json.append(UInt8(ascii: "}"))
        return json
    }

    /// The answer written from the record's bytes without decoding the state (see
    /// `EntityState.canonicalJSON(entity:encoded:history:rev:)`), or nil when the record's
    /// history is in `status_history` or the bytes are not as expected.
    static func transcodedState(_ record: [UInt8], entity: EntityKey) -> [UInt8]? {
        var reader = ByteReader(record)
        guard (try? reader.ulid()) != nil, let rev = try? reader.varint(), let length = try? reader.count() else {
            return nil
        }
        let start = reader.position
        let end = start + length
        // 0: the history follows in the record.
        guard end < record.count, record[end] == 0 else { return nil }
        return record.withUnsafeBufferPointer { bytes in
            EntityState.canonicalJSON(
                entity: entity, encoded: UnsafeBufferPointer(rebasing: bytes[start..<end]),
                history: UnsafeBufferPointer(rebasing: bytes[(end + 1)...]), rev: rev)
        }
    }

    /// The entity's rev on this node (the seq of the latest event folded into it), or nil
    /// when no event of it is held.
    public func rev(of entity: EntityKey) throws(EventStoreError) -> UInt64? {
        try reading { txn in
            try txn.get(tables.projections, entity.bytes).map { try EventLog.storedProjectionRev($0, entity: entity) }
        }
    }

    /// A page of the events this node stored, in seq order after `after` (0: from the
    /// first), that pass `filter`: at most `limit` of them, and at most `scanLimit` seqs
    /// looked at, so a filter that matches little still answers promptly.
    ///
    /// `next` is the last seq looked at when more follow (pass it as `after` for the next
    /// page; it can come with fewer than `limit` events), nil when the page reached the
    /// head; `head` is the head the page was read at: a consumer that got `next: nil` has
    /// seen everything up to `head` and resumes after it. The page also ends, with `next`,
    /// before the event that would take its events' canonical JSON past `maxBytes` (one
    /// event at least), so one request cannot make the daemon build an answer of gigabytes.
    public func feed(
        after: UInt64 = 0, limit: Int = 1000, filter: FeedFilter = FeedFilter(), scanLimit: Int = 10_000,
        maxBytes: Int = .max
    ) throws(EventStoreError) -> FeedPage {
        let (events, next, head) = try scanFeed(
            after: after, limit: limit, filter: filter, scanLimit: scanLimit, maxBytes: maxBytes, decode: true
        ) { seq, _, payload, event in SequencedEvent(seq: seq, event: event!, payload: payload) }
        return FeedPage(events: events, next: next, head: head)
    }

    /// The page `feed` gives, with each event as stored rather than decoded: for a reader
    /// that passes the events on as JSON (a watch's catch-up, `log`), which the payload
    /// makes without decoding it. Events are decoded only to be filtered by origin or type.
    /// The others come from blocks whose checksum zstd verified, or, in a block written
    /// without one, have their JSON checked (`checkStructure`), not decoded.
    public func storedFeed(
        after: UInt64 = 0, limit: Int = 1000, filter: FeedFilter = FeedFilter(), scanLimit: Int = 10_000,
        maxBytes: Int = .max
    ) throws(EventStoreError) -> StoredFeedPage {
        let (events, next, head) = try scanFeed(
            after: after, limit: limit, filter: filter, scanLimit: scanLimit, maxBytes: maxBytes, decode: false
        ) { seq, id, payload, _ in StoredEvent(seq: seq, id: id, payload: payload) }
        return StoredFeedPage(events: events, next: next, head: head)
    }

    /// The scan behind `feed` and `storedFeed`: `make` gets each event that passes the
    /// filter, decoded when `decode` is set or the filter needs it (nil otherwise).
    private func scanFeed<Item>(
        after: UInt64, limit: Int, filter: FeedFilter, scanLimit: Int, maxBytes: Int, decode: Bool,
        make: (UInt64, ULID, [UInt8], Event?) -> Item
    ) throws(EventStoreError) -> (events: [Item], next: UInt64?, head: UInt64) {
        try reading { txn in
            let head = try EventLog.sequenceHead(txn: txn, tables: tables)
            var entityIDs: Set<ULID>?
            if let entity = filter.entity {
                // Matched by id against the entity's index, so other events are not decoded.
                var ids = Set<ULID>()
                var cursor: ULID?
                while true {
                    let (page, more) = try eventIDs(
                        in: tables.entityIndex, key: entity.bytes, after: cursor, limit: 4096, txn: txn)
                    ids.formUnion(page)
                    guard more, let last = page.last else { break }
                    cursor = last
                }
                entityIDs = ids
            }
            let typePrefix = filter.type.map { Array($0.utf8) + [UInt8(ascii: "/")] }
            let decoding = decode || filter.origin != nil || typePrefix != nil
            var out: [Item] = []
            var bytes = 0
            var scanned = 0
            var lastSeq = after
            var stopped = false
            if after < UInt64.max, limit > 0, scanLimit > 0 {
                try forEachStored(from: after + 1, txn: txn) { seq, block, index in
                    let id = block.id(at: index)
                    if let entityIDs, !entityIDs.contains(id) {
                        scanned += 1
                        lastSeq = seq
                        stopped = scanned >= scanLimit
                        return !stopped
                    }
                    let payload = block.payload(at: index)
                    // Stops before this event, which the next page starts with.
                    if !out.isEmpty, bytes + payload.count > maxBytes {
                        stopped = true
                        return false
                    }
                    scanned += 1
                    lastSeq = seq
                    let event = decoding ? try decodePayload(payload, id: id) : nil
                    if !decoding, !block.checksummed { try checkStructure(payload, id: id) }
                    if let origin = filter.origin, event?.origin != origin {
                    } else if let typePrefix, event?.entity.bytes.starts(with: typePrefix) != true {
                    } else {
                        bytes += payload.count
                        out.append(make(seq, id, payload, event))
                    }
                    // Stops once the page is full, before a block it does not need is read.
                    stopped = out.count >= limit || scanned >= scanLimit
                    return !stopped
                }
            } else if after < UInt64.max {
                stopped = true
            }
            // Every seq up to the head names an event, so events follow the page while it
            // stopped short of the head.
            let more = stopped && lastSeq < head
            return (out, more ? lastSeq : nil, head)
        }
    }

    /// Every status event of an entity, in id order.
    public func statusHistory(of entity: EntityKey) throws(EventStoreError) -> [StatusEntry] {
        try reading { txn in try statusHistory(of: entity, txn: txn) }
    }

    /// Counts and fingerprints for `status`.
    public func statistics() throws(EventStoreError) -> StoreStatistics {
        let info = environment.info()
        return try reading { txn in
            var skewed: [ULID: UInt64] = [:]
            try txn.withCursor(tables.skew) { cursor in
                var item = try cursor.first()
                while let current = item {
                    if let origin = ULID(bytes: current.key) { skewed[origin] = uint64(bigEndian: current.value) }
                    item = try cursor.next()
                }
            }
            return StoreStatistics(
                events: try txn.stat(tables.events).entries,
                entities: try txn.stat(tables.projections).entries,
                conflicts: try txn.stat(tables.conflicts).entries,
                deadLetters: try txn.stat(tables.deadLetters).entries,
                bytesUsed: info.usedBytes,
                mapSize: info.mapSize,
                digest: try txn.get(tables.meta, Meta.digest).flatMap(StateDigest.init(bytes:)) ?? StateDigest(),
                dictionaryVersion: try txn.get(tables.meta, Meta.dictionaryVersion).map(uint32(bigEndian:)) ?? 0,
                seq: try EventLog.sequenceHead(txn: txn, tables: tables),
                skewedOrigins: skewed)
        }
    }

    /// Dead letters in the order received, after `after`, at most `limit`.
    public func deadLetters(after: ULID? = nil, limit: Int = 100) throws(EventStoreError) -> [DeadLetter] {
        try deadLetterPage(after: after, limit: limit).letters
    }

    /// At most `limit` dead letters after `after`, and fewer once their stored records add
    /// up to `maxBytes` (one at least): a raw event may be megabytes, so a page of them is
    /// bounded in bytes as well as in count. `more` tells whether any follow the page.
    public func deadLetterPage(
        after: ULID? = nil, limit: Int = 100, maxBytes: Int = .max
    ) throws(EventStoreError) -> (letters: [DeadLetter], more: Bool) {
        try reading { txn in
            try txn.withCursor(tables.deadLetters) { cursor in
                var out: [DeadLetter] = []
                var bytes = 0
                var item = try cursor.first(after: after)
                while let current = item, out.count < limit, out.isEmpty || bytes + current.value.count <= maxBytes {
                    guard let key = ULID(bytes: current.key) else { break }
                    bytes += current.value.count
                    out.append(try DeadLetter(key: key, decoding: current.value))
                    item = try cursor.next()
                }
                return (out, item != nil)
            }
        }
    }

    // MARK: - Inside a transaction

    func eventIDs(
        in index: Database, key: [UInt8], after: ULID?, limit: Int, txn: borrowing some TransactionReading & ~Copyable
    ) throws -> (ids: [ULID], more: Bool) {
        try txn.withCursor(index) { cursor in
            var ids: [ULID] = []
            var item: (key: [UInt8], value: [UInt8])?
            if let after {
                item = try cursor.seekBoth(key, after.bytes)
                if let found = item, found.value == after.bytes { item = try cursor.nextDup() }
            } else {
                item = try cursor.seekExact(key)
            }
            while let current = item, ids.count < limit {
                guard let id = ULID(bytes: current.value) else { throw CorruptDataError("index value is not an id") }
                ids.append(id)
                item = try cursor.nextDup()
            }
            return (ids, item != nil)
        }
    }

    func statusHistory(of entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws -> [StatusEntry]
    {
        guard let record = try txn.get(tables.projections, entity.bytes) else { return [] }
        return try EventLog.projectionHistory(try expanded(record, entity: entity, txn: txn), entity: entity)
            ?? tableHistory(of: entity, txn: txn)
    }

    /// The status history of an entity whose history is in `status_history`.
    func tableHistory(of entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws
        -> [StatusEntry]
    {
        try txn.withCursor(tables.statusHistory) { cursor in
            var entries: [StatusEntry] = []
            var item = try cursor.seekExact(entity.bytes)
            while let current = item {
                guard current.value.count >= 32, let id = ULID(bytes: current.value),
                    let origin = ULID(bytes: current.value, at: 16),
                    let status = validatedUTF8(current.value[32...])
                else { throw CorruptDataError("status history entry of \(entity) is unreadable") }
                entries.append(StatusEntry(id: id, origin: origin, status: status))
                item = try cursor.nextDup()
            }
            return entries
        }
    }

    func readEvent(_ id: ULID, txn: borrowing some TransactionReading & ~Copyable) throws -> Event? {
        guard let payload = try storedPayload(of: id, txn: txn) else { return nil }
        return try decodePayload(payload, id: id)
    }

    /// The canonical JSON payload (without id) of a value of the `events` table of format 6
    /// and older (`StoredValue`): what the upgrade to blocks reads.
    func legacyPayload(of value: [UInt8], txn: borrowing some TransactionReading & ~Copyable) throws -> [UInt8] {
        let (version, frame) = try StoredValue.decode(value)
        let dictionary = try dictionary(version, txn: txn)
        return try decompressors.withDecompressor { decompressor in
            try decompressor.decompress(frame, dictionary: dictionary, maxSize: StoreOptions.absoluteMaxEventBytes)
        }
    }

    /// Checks that a payload passed on without decoding is one JSON object (its grammar,
    /// strings, nesting, no key twice): in a block without a checksum, a record damaged on
    /// disk that still decompresses is `corrupt` to a reader that sends it on, as to one that
    /// decodes it, for a pass over its bytes that builds nothing.
    func checkStructure(_ payload: [UInt8], id: ULID) throws {
        var scanner = JSONScanner(payload)
        do {
            guard payload.first == UInt8(ascii: "{") else { throw JSONError("not an object", at: 0) }
            try scanner.skipValue()
            try scanner.expectEnd()
        } catch {
            throw EventStoreError(.corrupt, "stored event \(id) is not the JSON of an event: \(error)")
        }
    }

    func decodePayload(_ payload: [UInt8], id: ULID) throws -> Event {
        try EventLog.decodeStoredPayload(payload, id: id)
    }

    /// The event of a stored payload. - Throws: `corrupt` when it does not decode.
    static func decodeStoredPayload(_ payload: [UInt8], id: ULID) throws(EventStoreError) -> Event {
        do {
            return try EventCodec.decodeStored(payload, id: id)
        } catch {
            throw EventStoreError(.corrupt, "stored event \(id) does not decode: \(error.message)")
        }
    }

    func dictionary(_ version: UInt32, txn: borrowing some TransactionReading & ~Copyable) throws
        -> CompressionDictionary?
    {
        guard version != 0 else { return nil }
        if let cached = dictionaries.withLock({ $0[version] }) { return cached }
        guard let bytes = try txn.get(tables.dictionaries, bigEndian(version)) else {
            throw EventStoreError(.corrupt, "compression dictionary \(version) is missing from the store")
        }
        let loaded = try CompressionDictionary(bytes: bytes, level: options.compressionLevel)
        dictionaries.withLock { $0[version] = loaded }
        return loaded
    }

    /// Folds an entity again from all its events (the rare path: an event arrived that a
    /// folded one already names).
    func refold(_ entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws -> EntityState {
        Projection.fold(entity, try events(of: entity, txn: txn))
    }

    /// Every event of an entity, read through the entity index.
    func events(of entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws -> [Event] {
        var events: [Event] = []
        var after: ULID?
        var reader = BlockReader()
        while true {
            let (ids, more) = try eventIDs(
                in: tables.entityIndex, key: entity.bytes, after: after, limit: 4096, txn: txn)
            for id in ids {
                guard let payload = try reader.payload(of: id, log: self, txn: txn) else {
                    throw CorruptDataError("index names a missing event \(id)")
                }
                events.append(try decodePayload(payload, id: id))
            }
            guard more, let last = ids.last else { break }
            after = last
        }
        return events
    }
}

extension Cursor {
    /// The first entry whose key is greater than `after`'s bytes (the first entry when
    /// nil): where a page that continues from a cursor value starts.
    mutating func first(after: ULID?) throws -> (key: [UInt8], value: [UInt8])? {
        guard let after else { return try first() }
        let key = after.bytes
        guard let found = try seek(key) else { return nil }
        return found.key == key ? try next() : found
    }
}

/// An event as this node stored it, with the seq it took here.
public struct SequencedEvent: Equatable, Sendable {
    public var seq: UInt64
    public var event: Event
    /// The event's canonical JSON without its id (its stored payload), when the writer had
    /// it at hand: a watch notification is made from it without encoding the event again.
    public var payload: [UInt8]?

    public init(seq: UInt64, event: Event, payload: [UInt8]? = nil) {
        self.seq = seq
        self.event = event
        self.payload = payload
    }

    public static func == (lhs: SequencedEvent, rhs: SequencedEvent) -> Bool {
        lhs.seq == rhs.seq && lhs.event == rhs.event
    }
}

/// Which events a feed (`log`, `watch`) passes on: all of them when every member is nil.
public struct FeedFilter: Equatable, Sendable {
    public var entity: EntityKey?
    public var origin: ULID?
    /// An entity type: events of entities `TYPE/...`.
    public var type: String?

    public init(entity: EntityKey? = nil, origin: ULID? = nil, type: String? = nil) {
        self.entity = entity
        self.origin = origin
        self.type = type
    }
}

/// A page of `EventLog.feed(after:limit:filter:scanLimit:)`.
public struct FeedPage: Equatable, Sendable {
    public var events: [SequencedEvent]
    /// Where the next page starts (its `after`), nil when this one reached the head.
    public var next: UInt64?
    /// The head when the page was read.
    public var head: UInt64
}

/// An event as the log holds it: its seq, its id and its canonical JSON without the id
/// (the stored payload), not decoded.
public struct StoredEvent: Sendable {
    public var seq: UInt64
    public var id: ULID
    public var payload: [UInt8]

    public init(seq: UInt64, id: ULID, payload: [UInt8]) {
        self.seq = seq
        self.id = id
        self.payload = payload
    }

    /// The event, decoded as every read decodes one. - Throws: `corrupt` when it does not decode.
    public func decoded() throws(EventStoreError) -> Event {
        try EventLog.decodeStoredPayload(payload, id: id)
    }
}

/// A page of `EventLog.storedFeed(after:limit:filter:scanLimit:maxBytes:)`: as `FeedPage`,
/// with the events as stored.
public struct StoredFeedPage: Sendable {
    public var events: [StoredEvent]
    public var next: UInt64?
    public var head: UInt64
}
