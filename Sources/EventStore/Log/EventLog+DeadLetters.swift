import Projections

/// Dead letters a person acts on: retried under the settings now in force, or dropped.
///
/// A dead letter is named by its `key` (the local id `dead_letters` lists) or by the id of
/// its event. A dropped event's id stays in `dead_letter_ids`, marked dropped: a peer that
/// offers it again has it skipped, not kept again, so a drop is final on this node (an
/// `import` of the event still takes it), and the hello of a sync session lists it with the
/// dead letters, so peers stop offering it.
extension EventLog {
    /// The most dead letters one `dead_letters.retry` or `dead_letters.drop` names.
    public static let maxDeadLetterIDsPerCall = 1000

    /// The value `dead_letter_ids` holds for a dropped event instead of a dead letter's key.
    static let droppedMarker = Array("dropped".utf8)

    /// Retries dead letters: each one's raw event is validated again as `ingest` would
    /// take it now, and one that passes is stored exactly as ingest stores it (a seq, folded,
    /// published by the writer) and leaves the dead letters. One held already with the same
    /// content (it came again by another path) leaves them too, and counts as stored.
    func retryDeadLetters(
        _ ids: [ULID], batch: inout WriteBatch, txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> DeadLetterRetry {
        var result = DeadLetterRetry()
        var seen = SeenIDs()
        for given in ids {
            guard let (key, letter) = try deadLetter(named: given, txn: txn) else {
                result.stillInvalid.append(
                    .init(id: given, reason: "not_found", message: "no dead letter has this key or event id"))
                continue
            }
            let eventID = letter.id.flatMap { ULID($0) }
            switch try judge(ReplicatedEvent(id: eventID, json: letter.raw), seen: seen, batch: &batch, txn: &txn) {
            case .invalid(let error):
                if letter.isCut, error.reason != .foreignOwnOrigin {
                    result.stillInvalid.append(
                        .init(
                            id: given, reason: "truncated",
                            message:
                                "only the first \(DeadLetter.prefixBytes) bytes of this event were kept (it was larger than \(DeadLetter.maxRawBytes) bytes, the dead letters already held \(options.deadLetterRawBudget) bytes of raw events, or a release before 0.5 kept it), so it cannot be stored from here; the peer does not send it again while it is a dead letter, nor after a drop, which is final"
                        ))
                } else {
                    result.stillInvalid.append(.init(id: given, reason: error.reason.rawValue, message: error.message))
                }
            case .held:
                try removeDeadLetter(key: key, letter: letter, eventID: eventID, txn: &txn)
                result.stored.append(given)
            case .new(let event, let payload):
                seen.insert(event.id)
                try store(event, payload: payload, batch: &batch, txn: &txn, writer: &writer)
                try removeDeadLetter(key: key, letter: letter, eventID: eventID, txn: &txn)
                result.stored.append(given)
            }
        }
        return result
    }

    /// Removes dead letters; their event ids stay marked dropped (see the type's comment).
    /// Ids that name no dead letter are skipped. - Returns: how many were removed.
    func dropDeadLetters(_ ids: [ULID], txn: inout WriteTransaction) throws -> Int {
        var dropped = 0
        for given in ids {
            guard let (key, letter) = try deadLetter(named: given, txn: txn) else { continue }
            _ = try txn.delete(tables.deadLetters, key.bytes)
            try releaseRawBytes(of: letter, txn: &txn)
            if let eventID = letter.id.flatMap({ ULID($0) }) {
                try txn.put(tables.deadLetterIDs, eventID.bytes, EventLog.droppedMarker)
            }
            dropped += 1
        }
        return dropped
    }

    /// The raw bytes the dead letters keep in all (`Meta.deadLetterRawBytes`); counted from
    /// the dead letters when a store of an earlier release does not have it.
    func deadLetterRawBytes(txn: borrowing WriteTransaction) throws -> Int {
        if let stored = try txn.get(tables.meta, Meta.deadLetterRawBytes), stored.count == 8 {
            return Int(clamping: uint64(bigEndian: stored))
        }
        return try txn.withCursor(tables.deadLetters) { cursor in
            var total = 0
            var item = try cursor.first()
            while let (key, value) = item {
                if let key = ULID(bytes: key) { total += try DeadLetter(key: key, decoding: value).raw.count }
                item = try cursor.next()
            }
            return total
        }
    }

    func setDeadLetterRawBytes(_ total: Int, txn: inout WriteTransaction) throws {
        try txn.put(tables.meta, Meta.deadLetterRawBytes, bigEndian(UInt64(max(0, total))))
    }

    private func releaseRawBytes(of letter: DeadLetter, txn: inout WriteTransaction) throws {
        try setDeadLetterRawBytes(try deadLetterRawBytes(txn: txn) - letter.raw.count, txn: &txn)
    }

    /// The dead letter whose key, or else whose event id, is `id`.
    func deadLetter(named id: ULID, txn: borrowing WriteTransaction) throws -> (ULID, DeadLetter)? {
        var key = id
        var record = try txn.get(tables.deadLetters, id.bytes)
        if record == nil, let mapped = try txn.get(tables.deadLetterIDs, id.bytes), let found = ULID(bytes: mapped) {
            key = found
            record = try txn.get(tables.deadLetters, found.bytes)
        }
        guard let record else { return nil }
        return (key, try DeadLetter(key: key, decoding: record))
    }

    private func removeDeadLetter(key: ULID, letter: DeadLetter, eventID: ULID?, txn: inout WriteTransaction) throws {
        _ = try txn.delete(tables.deadLetters, key.bytes)
        try releaseRawBytes(of: letter, txn: &txn)
        if let eventID, try txn.get(tables.deadLetterIDs, eventID.bytes) == key.bytes {
            _ = try txn.delete(tables.deadLetterIDs, eventID.bytes)
        }
    }

    /// The ids of the events this node holds as dead letters or dropped (`dead_letter_ids`),
    /// in id order, at most `limit`; `cut` tells whether there are more. What a sync hello
    /// tells the peer, so it knows which of its events did not arrive and stops sending them.
    public func deadLetteredIDs(limit: Int) throws(EventStoreError) -> (ids: [ULID], cut: Bool) {
        try reading { txn in
            try txn.withCursor(tables.deadLetterIDs) { cursor in
                var ids: [ULID] = []
                var item = try cursor.first()
                while let (key, _) = item {
                    guard ids.count < limit else { return (ids, true) }
                    if let id = ULID(bytes: key) { ids.append(id) }
                    item = try cursor.next()
                }
                return (ids, false)
            }
        }
    }

    /// How many of `ids` this node holds among the events a node with `vector` is taken
    /// to hold (at or below its entry for their origin): events the peer holds only as
    /// dead letters, which `pending` counts as not delivered.
    public func countHeld(_ ids: Set<ULID>, within vector: [ULID: ULID]) throws(EventStoreError) -> Int {
        guard !ids.isEmpty else { return 0 }
        // Held here under an origin whose vector entry covers it, found in the origin
        // index: `status` calls this, so no event is decoded.
        let origins = vector.sorted { $0.key < $1.key }
        return try reading { txn in
            try txn.withCursor(tables.originIndex) { cursor in
                var count = 0
                for id in ids where try EventLog.origin(of: id, among: origins, cursor: &cursor) != nil { count += 1 }
                return count
            }
        }
    }
}

/// The outcome of `dead_letters.retry`.
public struct DeadLetterRetry: Equatable, Sendable {
    /// The ids given (keys or event ids) whose events are stored now, in the order given.
    public var stored: [ULID] = []
    /// The ids given whose events still fail, with the stable reason and a sentence; the
    /// dead letter stays. `not_found`: no dead letter has that key or event id.
    public var stillInvalid: [StillInvalid] = []

    public struct StillInvalid: Equatable, Sendable {
        public var id: ULID
        public var reason: String
        public var message: String
    }

    public init() {}
}
