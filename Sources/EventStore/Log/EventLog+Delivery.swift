import Projections

/// What a peer is known to hold: its last known version vector (per origin, the greatest
/// id it holds; it holds every event of that origin up to it) and the events it refused
/// as dead letters, which its vector may cover though it does not hold them.
public struct PeerHoldings: Equatable, Sendable {
    public var vector: [ULID: ULID]
    public var deadLettered: Set<ULID>

    public init(vector: [ULID: ULID] = [:], deadLettered: Set<ULID> = []) {
        self.vector = vector
        self.deadLettered = deadLettered
    }

    /// Whether the peer holds the event `id` made by `origin`.
    public func holds(_ id: ULID, origin: ULID) -> Bool {
        guard let last = vector[origin], id <= last else { return false }
        return !deadLettered.contains(id)
    }
}

/// Whether a peer holds every event of an entity.
public enum Delivery: Equatable, Sendable {
    /// Every event of the entity is covered by the peer's vector, and none of them is a
    /// dead letter there.
    case held
    /// Some event is not covered yet.
    case lacking
    /// The peer dead-lettered one of the entity's events: it will not get there by itself.
    case deadLettered
}

/// How far one page of `list` with `pending_for` may read, whatever the store holds.
public struct PendingScanBudget: Equatable, Sendable {
    /// At most this many events a peer lacks are decoded to find their entities; a peer
    /// lacking more is answered by walking the entities instead.
    public var decodedEvents: Int
    /// At most this many entities are checked by one page of the walk.
    public var entities: Int
    /// At most this many entity index entries (event ids) are read by one page of the walk;
    /// an entity is checked whole once begun.
    public var indexEntries: Int

    public init(decodedEvents: Int = 1_000, entities: Int = 10_000, indexEntries: Int = 100_000) {
        self.decodedEvents = decodedEvents
        self.entities = entities
        self.indexEntries = indexEntries
    }
}

extension EventLog {
    /// The state as `canonicalState(of:)` gives it, and for each of `peers` whether it
    /// holds every event of the entity, from one read transaction; nil when no event of
    /// the entity is held.
    ///
    /// The cost is the entity's events, not the store's: its ids come from the entity
    /// index, and each id's origin from the origin index (one lookup per origin that can
    /// hold it), without decoding an event.
    public func canonicalState(of entity: EntityKey, deliveredTo peers: [PeerHoldings]) throws(EventStoreError)
        -> (state: [UInt8], delivery: [Delivery])?
    {
        try reading { txn in
            guard let state = try canonicalState(of: entity, txn: txn) else { return nil }
            return (state, try delivery(of: entity, to: peers, txn: txn))
        }
    }

    /// For each origin this node holds events of, how many of them a node with `vector`
    /// lacks (all of them for an origin `vector` lacks), and how many this node holds.
    public func lackingByOrigin(_ vector: [ULID: ULID]) throws(EventStoreError) -> [ULID: (lacking: Int, held: Int)] {
        try reading { txn in
            var out: [ULID: (lacking: Int, held: Int)] = [:]
            for origin in try localVector(txn: txn).keys {
                var lacking = 0
                try forEachID(origin: origin, after: vector[origin], through: nil, txn: txn) { _ in lacking += 1 }
                let held = try txn.withCursor(tables.originIndex) { cursor in
                    try cursor.seekExact(origin.bytes) == nil ? 0 : try cursor.count()
                }
                out[origin] = (lacking, held)
            }
            return out
        }
    }

    /// The entities a peer holding `holdings` lacks an event of, in entity order after
    /// `after`, at most `limit`, filtered as `entities(type:status:includeDeleted:)`
    /// filters; `next` is where the next page goes on (after it, exclusive), nil at the end.
    ///
    /// A page costs what a page of `list` costs, give or take a bounded scan; no page reads
    /// the whole store. When the peer lacks at most `budget.decodedEvents` events (those
    /// after its vector's entry of each origin, every one of an origin it has none of, and
    /// its dead letters), only those are decoded, for their entity: a peer that is nearly up
    /// to date costs little, and the page is exact. Otherwise (a peer far behind, or never
    /// synced) the entities are walked in order from `after` and each is checked as `get`
    /// with `sync` checks it, from the entity and origin indices alone, without decoding an
    /// event: the walk ends once the page is full, or once it has checked `budget.entities`
    /// entities or read `budget.indexEntries` of their index entries. A page cut short by
    /// the budget holds fewer than `limit` entities, possibly none, and its `next` is the
    /// last entity checked: the client goes on from there.
    public func entitiesLacking(
        _ holdings: PeerHoldings, type: String? = nil, status: String? = nil, includeDeleted: Bool = false,
        after: EntityKey? = nil, limit: Int = 100, budget: PendingScanBudget = PendingScanBudget()
    ) throws(EventStoreError) -> (entities: [EntitySummary], next: EntityKey?) {
        try reading { txn in
            let prefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] } ?? []
            let keep = { (summary: EntitySummary) in
                (includeDeleted || !summary.deleted) && (status == nil || summary.status == status)
            }
            let origins = try localVector(txn: txn).sorted { $0.key < $1.key }
            guard let ids = try lackingIDs(holdings, origins: origins, atMost: budget.decodedEvents, txn: txn) else {
                return try walkLacking(
                    holdings, origins: origins, prefix: prefix, after: after, limit: limit, budget: budget, txn: txn,
                    keep: keep)
            }
            var lacking = Set<EntityKey>()
            for id in ids {
                guard let entity = try readEvent(id, txn: txn)?.entity else { continue }
                guard entity.bytes.starts(with: prefix) else { continue }
                if let after, !(after < entity) { continue }
                lacking.insert(entity)
            }
            var found: [EntitySummary] = []
            var more = false
            for entity in lacking.sorted() {
                guard let record = try txn.get(tables.projections, entity.bytes) else {
                    throw CorruptDataError("an event of \(entity) is held but the entity has no projection")
                }
                let summary = EventLog.summary(
                    try EventLog.decodeProjection(try expanded(record, entity: entity, txn: txn), entity: entity))
                guard keep(summary) else { continue }
                if found.count == limit {
                    more = true
                    break
                }
                found.append(summary)
            }
            return (found, more ? found.last?.entity : nil)
        }
    }

    // MARK: - Inside a transaction

    /// Per origin, the greatest id held.
    func localVector(txn: borrowing some TransactionReading & ~Copyable) throws -> [ULID: ULID] {
        try txn.withCursor(tables.originIndex) { cursor in
            var vector: [ULID: ULID] = [:]
            var item = try cursor.first()
            while let current = item {
                if let origin = ULID(bytes: current.key), let last = try cursor.lastDup(),
                    let id = ULID(bytes: last.value)
                {
                    vector[origin] = id
                }
                item = try cursor.nextNoDup()
            }
            return vector
        }
    }

    func delivery(of entity: EntityKey, to peers: [PeerHoldings], txn: borrowing some TransactionReading & ~Copyable)
        throws -> [Delivery]
    {
        guard !peers.isEmpty else { return [] }
        var ids: [ULID] = []
        var after: ULID?
        while true {
            let (page, more) = try eventIDs(
                in: tables.entityIndex, key: entity.bytes, after: after, limit: 4096, txn: txn)
            ids += page
            guard more, let last = page.last else { break }
            after = last
        }
        // The origins in the order tried: an event's origin holds ids up to its greatest.
        let origins = try localVector(txn: txn).sorted { $0.key < $1.key }
        var result = [Delivery](repeating: .held, count: peers.count)
        /// Whether nothing further can change a peer's answer: a dead letter is final, and
        /// so is a lacking event for a peer that dead-lettered nothing.
        func settled(_ index: Int) -> Bool {
            result[index] == .deadLettered || (result[index] == .lacking && peers[index].deadLettered.isEmpty)
        }
        try txn.withCursor(tables.originIndex) { cursor in
            for id in ids {
                if result.indices.allSatisfy(settled) { break }
                var origin: ULID?
                var looked = false
                for index in peers.indices where !settled(index) {
                    if peers[index].deadLettered.contains(id) {
                        result[index] = .deadLettered
                        continue
                    }
                    guard result[index] == .held else { continue }
                    if !looked {
                        looked = true
                        origin = try EventLog.origin(of: id, among: origins, cursor: &cursor)
                    }
                    if let origin, peers[index].holds(id, origin: origin) { continue }
                    result[index] = .lacking
                }
            }
        }
        return result
    }

    /// The origin of the held event `id`, looked up in the origin index (a cursor on it)
    /// under each of `origins` whose greatest id is not below it: no event is decoded.
    static func origin(of id: ULID, among origins: [(key: ULID, value: ULID)], cursor: inout Cursor) throws -> ULID? {
        for (candidate, last) in origins where id <= last {
            if let found = try cursor.seekBoth(candidate.bytes, id.bytes), found.value == id.bytes { return candidate }
        }
        return nil
    }

    /// The ids of the events a peer holding `holdings` lacks (after its vector's entry of
    /// each of `origins`, and its dead letters), or nil when they are more than `atMost`:
    /// the origin index is read no further than that.
    func lackingIDs(
        _ holdings: PeerHoldings, origins: [(key: ULID, value: ULID)], atMost: Int,
        txn: borrowing some TransactionReading & ~Copyable
    ) throws -> Set<ULID>? {
        guard holdings.deadLettered.count <= atMost else { return nil }
        var ids = holdings.deadLettered
        for (origin, _) in origins {
            let (page, more) = try eventIDs(
                in: tables.originIndex, key: origin.bytes, after: holdings.vector[origin], limit: atMost + 1, txn: txn)
            ids.formUnion(page)
            if more || ids.count > atMost { return nil }
        }
        return ids
    }

    /// One page of `entitiesLacking` by walking the entities from `after` (see there): the
    /// entities found, and where the next page goes on.
    func walkLacking(
        _ holdings: PeerHoldings, origins: [(key: ULID, value: ULID)], prefix: [UInt8], after: EntityKey?,
        limit: Int, budget: PendingScanBudget, txn: borrowing some TransactionReading & ~Copyable,
        keep: (EntitySummary) -> Bool
    ) throws -> (entities: [EntitySummary], next: EntityKey?) {
        // No id above the greatest the peer's vector names can be held by it.
        let covered = holdings.vector.values.max()
        return try txn.withCursor(tables.projections) { projections in
            try txn.withCursor(tables.entityIndex) { entityIDs in
                try txn.withCursor(tables.originIndex) { originIDs in
                    var found: [EntitySummary] = []
                    var checked = 0
                    var entries = 0
                    var last: EntityKey?
                    var item = try EventLog.firstEntry(after: after, prefix: prefix, cursor: &projections)
                    while let current = item, current.key.starts(with: prefix) {
                        if checked >= budget.entities || entries >= budget.indexEntries { return (found, last) }
                        let entity = EntityKey(validated: current.key)
                        checked += 1
                        // Whether one of the entity's events is not held by the peer.
                        var lacks = false
                        var entry = try entityIDs.seekExact(entity.bytes)
                        while let index = entry {
                            entries += 1
                            guard let id = ULID(bytes: index.value) else {
                                throw CorruptDataError("the entity index of \(entity) holds a value that is not an id")
                            }
                            if let covered, id <= covered, !holdings.deadLettered.contains(id),
                                let origin = try EventLog.origin(of: id, among: origins, cursor: &originIDs),
                                holdings.holds(id, origin: origin)
                            {
                                entry = try entityIDs.nextDup()
                                continue
                            }
                            lacks = true
                            break
                        }
                        if lacks {
                            let summary = EventLog.summary(
                                try EventLog.decodeProjection(
                                    try expanded(current.value, entity: entity, txn: txn), entity: entity))
                            if keep(summary) {
                                if found.count == limit { return (found, found.last?.entity) }
                                found.append(summary)
                            }
                        }
                        last = entity
                        item = try projections.next()
                    }
                    return (found, nil)
                }
            }
        }
    }
}
