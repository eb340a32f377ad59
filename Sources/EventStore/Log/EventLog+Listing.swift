import Projections

/// One line of an entity listing.
public struct EntitySummary: Equatable, Sendable {
    public var entity: EntityKey
    public var version: ULID?
    /// The entity's rev on this node (what `if_match` takes).
    public var rev: UInt64 = 0
    /// The current status, nil when the entity has none.
    public var status: String?
    public var deleted: Bool
}

/// An entity with concurrent heads: which fields, and whether its status.
public struct ConflictSummary: Equatable, Sendable {
    public var entity: EntityKey
    public var fields: [String]
    public var status: Bool
}

extension EventLog {
    /// Entities in entity order after `after` (exclusive), at most `limit`, optionally of
    /// one type and with one current status; deleted ones only when `includeDeleted`.
    /// The cursor for the next page is the last entity returned, nil at the end.
    public func entities(
        type: String? = nil, status: String? = nil, includeDeleted: Bool = false, after: EntityKey? = nil,
        limit: Int = 100
    ) throws(EventStoreError) -> (entities: [EntitySummary], next: EntityKey?) {
        try reading { txn in
            var found: [EntitySummary] = []
            var more = false
            let keep = { (summary: EntitySummary) in includeDeleted || !summary.deleted }
            if let status {
                // Status index: TYPE 0x00 STATUS → entities (dupsort, entity order).
                var candidates: [EntitySummary] = []
                let statusBytes = Array(status.utf8)
                try txn.withCursor(tables.statusIndex) { cursor in
                    var keys: [[UInt8]] = []
                    if let type {
                        keys = [Array(type.utf8) + [0] + statusBytes]
                    } else {
                        var item = try cursor.first()
                        while let current = item {
                            if let zero = current.key.firstIndex(of: 0),
                                current.key[(zero + 1)...].elementsEqual(statusBytes)
                            {
                                keys.append(current.key)
                            }
                            item = try cursor.nextNoDup()
                        }
                    }
                    for key in keys {
                        // The entities under this key (dupsort, entity order), from after `after`.
                        var dup: (key: [UInt8], value: [UInt8])?
                        if let after {
                            dup = try cursor.seekBoth(key, after.bytes)
                            if dup?.value == after.bytes { dup = try cursor.nextDup() }
                        } else {
                            dup = try cursor.seekExact(key)
                        }
                        var taken = 0
                        while let entry = dup, taken <= limit {
                            let entity = EntityKey(validated: entry.value)
                            guard let record = try txn.get(tables.projections, entity.bytes) else {
                                throw CorruptDataError("status index names \(entity), which has no projection")
                            }
                            let summary = EventLog.summary(
                                try EventLog.decodeProjection(
                                    try expanded(record, entity: entity, txn: txn), entity: entity))
                            if keep(summary) {
                                candidates.append(summary)
                                taken += 1
                            }
                            dup = try cursor.nextDup()
                        }
                    }
                }
                candidates.sort { $0.entity < $1.entity }
                more = candidates.count > limit
                found = Array(candidates.prefix(limit))
            } else {
                let prefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] } ?? []
                (found, more) = try projectionPage(prefix: prefix, after: after, limit: limit, txn: txn, keep: keep)
            }
            return (found, more ? found.last?.entity : nil)
        }
    }

    /// The entities whose key starts with `prefix`, in key order after `after`, that `keep`
    /// keeps, at most `limit`; `more` when another one would follow.
    func projectionPage(
        prefix: [UInt8], after: EntityKey?, limit: Int, txn: borrowing some TransactionReading & ~Copyable,
        keep: (EntitySummary) throws -> Bool
    ) throws -> (found: [EntitySummary], more: Bool) {
        try txn.withCursor(tables.projections) { cursor in
            var found: [EntitySummary] = []
            var item = try EventLog.firstEntry(after: after, prefix: prefix, cursor: &cursor)
            while let current = item, current.key.starts(with: prefix) {
                let entity = EntityKey(validated: current.key)
                let summary = EventLog.summary(
                    try EventLog.decodeProjection(try expanded(current.value, entity: entity, txn: txn), entity: entity)
                )
                if try keep(summary) {
                    if found.count == limit { return (found, true) }
                    found.append(summary)
                }
                item = try cursor.next()
            }
            return (found, false)
        }
    }

    /// Where a page of a table keyed by entity starts: the first key after `after`, or the
    /// first with `prefix` when `after` is nil or sorts before it (the caller stops once keys
    /// leave it).
    static func firstEntry(after: EntityKey?, prefix: [UInt8], cursor: inout Cursor) throws -> Cursor.Entry? {
        guard let after, !after.bytes.lexicographicallyPrecedes(prefix) else {
            return prefix.isEmpty ? try cursor.first() : try cursor.seek(prefix)
        }
        let found = try cursor.seek(after.bytes)
        return found?.key == after.bytes ? try cursor.next() : found
    }

    /// The entity types of the entities held (deleted ones included), sorted.
    ///
    /// A skip scan of the projections, whose keys are `TYPE/ID`: from each type's first
    /// entity the cursor jumps to `TYPE0` ('0' follows '/'), the first key past every
    /// `TYPE/...`, so the cost grows with the number of types, not of entities. Keys come in
    /// byte order of `TYPE/`, where `job-x/` precedes `job/` ('-' sorts before '/'): the
    /// types are sorted by name at the end.
    public func types() throws(EventStoreError) -> [String] {
        try reading { txn in
            try txn.withCursor(tables.projections) { cursor in
                var found: [String] = []
                var item = try cursor.first()
                while let current = item {
                    guard let slash = current.key.firstIndex(of: UInt8(ascii: "/")), slash > 0 else {
                        throw CorruptDataError(
                            "a projection's key is not TYPE/ID: \(String(decoding: current.key.prefix(80), as: UTF8.self))"
                        )
                    }
                    let type = current.key[..<slash]
                    found.append(String(decoding: type, as: UTF8.self))
                    item = try cursor.seek(Array(type) + [UInt8(ascii: "/") + 1])
                }
                return found.sorted()
            }
        }
    }

    /// Entities with conflicts, in entity order after `after`, at most `limit`.
    public func conflicts(type: String? = nil, after: EntityKey? = nil, limit: Int = 100) throws(EventStoreError)
        -> (entities: [ConflictSummary], next: EntityKey?)
    {
        try reading { txn in
            let prefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] } ?? []
            return try txn.withCursor(tables.conflicts) { cursor in
                var found: [ConflictSummary] = []
                var item = try EventLog.firstEntry(after: after, prefix: prefix, cursor: &cursor)
                while let current = item, current.key.starts(with: prefix), found.count < limit {
                    found.append(try EventLog.conflictSummary(EntityKey(validated: current.key), record: current.value))
                    item = try cursor.next()
                }
                let more = item.map { $0.key.starts(with: prefix) } ?? false
                return (found, more ? found.last?.entity : nil)
            }
        }
    }

    static func summary(_ record: (StateHash, EntityState, UInt64)) -> EntitySummary {
        let state = record.1
        return EntitySummary(
            entity: state.entity, version: state.version, rev: record.2, status: state.currentStatus?.status,
            deleted: state.isDeleted)
    }

    /// Reads a conflicts-table record, `{"fields":[...],"status":bool}`.
    static func conflictSummary(_ entity: EntityKey, record: [UInt8]) throws -> ConflictSummary {
        var summary = ConflictSummary(entity: entity, fields: [], status: false)
        var scanner = JSONScanner(record)
        try scanner.readObject { (key, scanner) throws(JSONError) in
            switch String(decoding: key, as: UTF8.self) {
            case "fields":
                try scanner.readArray { (scanner) throws(JSONError) in summary.fields.append(try scanner.readString()) }
            case "status": summary.status = try scanner.readBool()
            default: try scanner.skipValue()
            }
        }
        return summary
    }
}
