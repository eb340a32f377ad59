import Projections

/// What replication reads: per-origin ranges of ids, their fingerprints and the events
/// themselves in their stored form, without decoding them.
///
/// A range of one origin's ids is `(after, through]`: greater than `after` (nil: from the
/// first) and at most `through` (nil: to the last).
extension EventLog {
    /// The fingerprint of one origin's ids in `(after, through]`.
    ///
    /// From the first id (`after` nil, what every sync asks), it is the origin's running
    /// summary less the ids above `through`: the cost is the ids added since the last
    /// call and those above `through`, not all of them.
    public func fingerprint(origin: ULID, after: ULID? = nil, through: ULID? = nil) throws(EventStoreError)
        -> Fingerprint
    {
        try reading { txn in
            var fingerprint = Fingerprint()
            guard after == nil else {
                try forEachID(origin: origin, after: after, through: through, txn: txn) { fingerprint.add($0) }
                return fingerprint
            }
            guard let whole = try summary(of: origin, txn: txn) else { return fingerprint }
            guard let through, through < whole.last else { return whole.fingerprint }
            try forEachID(origin: origin, after: through, through: nil, txn: txn) { fingerprint.add($0) }
            return whole.fingerprint.subtracting(fingerprint)
        }
    }

    /// Brings every origin's running summary up to date, so the next sync's fingerprints
    /// cost nothing: the first time it reads every origin's ids, afterwards only the ids
    /// added since. Replication calls it at start and after each session.
    public func refreshFingerprints() throws(EventStoreError) {
        let origins = try versionVector().keys
        try reading { txn in
            for origin in origins { _ = try summary(of: origin, txn: txn) }
        }
    }

    /// All of an origin's ids as `txn` sees them: their count, the greatest, their
    /// fingerprint; nil when it holds none.
    ///
    /// Ids are only ever added, so a summary taken from any snapshot stays a summary of a
    /// subset: when the count now is its count plus the ids above its greatest, nothing
    /// was added below (no gap was filled) and those ids are all that changed. Otherwise,
    /// and the first time, the origin is scanned whole.
    func summary(of origin: ULID, txn: borrowing some TransactionReading & ~Copyable) throws -> OriginSummary? {
        let total = try txn.withCursor(tables.originIndex) { cursor in
            try cursor.seekExact(origin.bytes) == nil ? 0 : try cursor.count()
        }
        guard total > 0 else { return nil }
        let cached = originSummaries.withLock { $0[origin] }
        if let cached, cached.count == total { return cached }
        var base = cached ?? OriginSummary(count: 0, last: .zero, fingerprint: Fingerprint())
        var added = Fingerprint()
        var last = base.last
        try forEachID(origin: origin, after: cached?.last, through: nil, txn: txn) { id in
            added.add(id)
            last = id
        }
        if base.count + added.count != total {
            // Filled in below the summary's greatest id: count them all again.
            base = OriginSummary(count: 0, last: .zero, fingerprint: Fingerprint())
            added = Fingerprint()
            try forEachID(origin: origin, after: nil, through: nil, txn: txn) { id in
                added.add(id)
                last = id
            }
        }
        let summary = OriginSummary(count: total, last: last, fingerprint: base.fingerprint.adding(added))
        originSummaries.withLock { $0[origin] = summary }
        return summary
    }

    /// One origin's ids in `(after, through]`, in order.
    public func ids(origin: ULID, after: ULID? = nil, through: ULID? = nil) throws(EventStoreError) -> [ULID] {
        var ids: [ULID] = []
        try forEachID(origin: origin, after: after, through: through) { ids.append($0) }
        return ids
    }

    /// For each origin, how many of its held ids are greater than `vector`'s entry (all of
    /// them for an origin `vector` lacks): the events a node with that vector lacks.
    public func countAfter(_ vector: [ULID: ULID]) throws(EventStoreError) -> Int {
        var total = 0
        for origin in try versionVector().keys {
            try forEachID(origin: origin, after: vector[origin], through: nil) { _ in total += 1 }
        }
        return total
    }

    /// Walks the origin index a page at a time (`MDB_GET_MULTIPLE`): a full scan of a
    /// million ids costs milliseconds.
    func forEachID(origin: ULID, after: ULID?, through: ULID?, _ body: (ULID) -> Void) throws(EventStoreError) {
        try reading { txn in try forEachID(origin: origin, after: after, through: through, txn: txn, body) }
    }

    func forEachID(
        origin: ULID, after: ULID?, through: ULID?, txn: borrowing some TransactionReading & ~Copyable,
        _ body: (ULID) -> Void
    ) throws {
        if let after, let through, through <= after { return }
        try txn.withCursor(tables.originIndex) { cursor in
            let start = (after ?? .zero).bytes
            guard let first = try cursor.seekBoth(origin.bytes, start) else { return }
            var page = try cursor.multiple(next: false)
            // A key with a single value has no page of duplicates: LMDB answers with none.
            if page?.isEmpty ?? true { page = first.value }
            while let values = page {
                var offset = 0
                while offset + 16 <= values.count {
                    let id = EventLog.id(in: values, at: offset)
                    offset += 16
                    if let after, id <= after { continue }
                    if let through, id > through { return }
                    body(id)
                }
                page = try cursor.multiple(next: true)
            }
        }
    }

    /// The id whose 16 bytes start at `offset` (the scan's inner loop: no generic indexing).
    static func id(in bytes: [UInt8], at offset: Int) -> ULID {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for index in offset..<(offset + 8) { high = high << 8 | UInt64(bytes[index]) }
        for index in (offset + 8)..<(offset + 16) { low = low << 8 | UInt64(bytes[index]) }
        return ULID(high: high, low: low)
    }

    /// Up to `limit` events of one origin after `after`, in id order, in their stored form,
    /// stopping early once `maxBytes` of JSON are gathered; `more` tells whether any are left.
    public func replicationEvents(origin: ULID, after: ULID?, limit: Int, maxBytes: Int) throws(EventStoreError)
        -> (events: [ReplicatedEvent], more: Bool)
    {
        try reading { txn in
            let (ids, more) = try eventIDs(
                in: tables.originIndex, key: origin.bytes, after: after, limit: limit, txn: txn)
            var events: [ReplicatedEvent] = []
            events.reserveCapacity(ids.count)
            var bytes = 0
            var reader = BlockReader()
            for id in ids {
                guard let json = try reader.payload(of: id, log: self, txn: txn) else {
                    throw CorruptDataError("the origin index names a missing event \(id)")
                }
                events.append(ReplicatedEvent(id: id, json: json))
                bytes += json.count
                if bytes >= maxBytes { return (events, more || events.count < ids.count) }
            }
            return (events, more)
        }
    }

    /// The ids among `ids` this node holds, in the order given.
    public func held(_ ids: [ULID]) throws(EventStoreError) -> [ULID] {
        try reading { txn in try ids.filter { try txn.get(tables.events, $0.bytes) != nil } }
    }

    /// The held events among `ids`, in their stored form (ids not held are left out).
    public func replicationEvents(ids: [ULID]) throws(EventStoreError) -> [ReplicatedEvent] {
        try reading { txn in
            var events: [ReplicatedEvent] = []
            var reader = BlockReader()
            for id in ids {
                guard let json = try reader.payload(of: id, log: self, txn: txn) else { continue }
                events.append(ReplicatedEvent(id: id, json: json))
            }
            return events
        }
    }

    /// The content hash of each held event among `ids`, in the order given (ids not held
    /// are left out): the first 16 bytes of the SHA-256 of its canonical JSON without the
    /// id, as it is stored and replicated, in lowercase hex. Two nodes holding the same event
    /// hold the same bytes, so a different hash under one id is a different event.
    public func contentHashes(ids: [ULID]) throws(EventStoreError) -> [(id: ULID, hash: String)] {
        try reading { txn in
            var out: [(id: ULID, hash: String)] = []
            var reader = BlockReader()
            for id in ids {
                guard let json = try reader.payload(of: id, log: self, txn: txn) else { continue }
                out.append((id, EventLog.contentHash(json)))
            }
            return out
        }
    }

    /// The content hash of an event's stored form (see `contentHashes(ids:)`).
    public static func contentHash(_ storedJSON: [UInt8]) -> String {
        SHA256.hexString(Array(SHA256.digest(storedJSON).prefix(16)))
    }

    // MARK: Peers

    /// Every entry of the peers table (replication's own records), by key.
    public func peerEntries() throws(EventStoreError) -> [(key: String, value: [UInt8])] {
        try reading { txn in
            try txn.withCursor(tables.peers) { cursor in
                var entries: [(key: String, value: [UInt8])] = []
                var item = try cursor.first()
                while let (key, value) = item {
                    entries.append((String(decoding: key, as: UTF8.self), value))
                    item = try cursor.next()
                }
                return entries
            }
        }
    }

    /// Stores (or with nil, deletes) entries of the peers table in one transaction.
    public func setPeerEntries(_ entries: [(key: String, value: [UInt8]?)]) throws(EventStoreError) {
        try perform(PeerEntriesJob(entries.map { PeerEntry(key: $0.key, value: $0.value) }))
    }

    func storePeerEntries(_ entries: [(key: String, value: [UInt8]?)], txn: inout WriteTransaction) throws {
        #if DEBUG
            try FaultSwitches.check(FaultSwitches.peerEntriesWrite)
        #endif
        for (key, value) in entries {
            if let value {
                try txn.put(tables.peers, Array(key.utf8), value)
            } else {
                _ = try txn.delete(tables.peers, Array(key.utf8))
            }
        }
    }
}
