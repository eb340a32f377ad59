import Projections

/// The outcome of `EventLog.importEvents(_:dryRun:)`.
public struct ImportResult: Equatable, Sendable {
    /// Ids of the events written (or, in a dry run, that would be), in the order given.
    public var imported: [ULID] = []
    /// Events already held, or given twice in the request: nothing to write.
    public var skipped: Int = 0
}

extension EventLog {
    /// Takes stored events from a file a person gave (`evctl import`): as replication takes
    /// them, ids and origins kept, deduplicated by id, folded into the projections in the
    /// same write transaction; but all or nothing, with no dead letters.
    ///
    /// The first event that cannot be taken fails the whole request with its index, and
    /// nothing is written: one that fails validation or is over `max_event_bytes`, one
    /// held already with different content, and one that would leave its origin's events
    /// out of id order here (not held, and not above the greatest id of its origin held or
    /// given before it), which would break the prefix of each origin's events that version
    /// vectors rely on, and one of this node's own origin further ahead of its clock than
    /// `max_clock_skew_s` (`foreign_own_origin` in the message: where ingest makes it a dead
    /// letter, an import has none, and the person fixes the file).
    ///
    /// With `dryRun`, checks the same in a read transaction and writes nothing.
    public func importEvents(_ rawEvents: [[UInt8]], dryRun: Bool = false) throws(EventStoreError) -> ImportResult {
        guard !rawEvents.isEmpty else { return ImportResult() }
        if dryRun {
            let now = options.wallClock()
            return try reading { txn in
                var check = ImportCheck(log: self, now: now)
                var result = ImportResult()
                for (index, raw) in rawEvents.enumerated() {
                    switch try check.check(raw, index: index, txn: txn) {
                    case .held: result.skipped += 1
                    case .new(let event, _): result.imported.append(event.id)
                    }
                }
                return result
            }
        }
        return try perform(ImportJob(rawEvents))
    }

    /// The work of `importEvents(_:)` inside a write in progress (the writer's group commit
    /// runs it beside appends in the same transaction). Throws what refuses the request.
    func importEvents(
        _ rawEvents: [[UInt8]], batch: inout WriteBatch, txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> ImportResult {
        var check = ImportCheck(log: self, now: batch.now)
        var result = ImportResult()
        for (index, raw) in rawEvents.enumerated() {
            switch try check.check(raw, index: index, txn: txn) {
            case .held:
                result.skipped += 1
            case .new(let event, let payload):
                if let lead = batch.clock.observe(event.id, now: batch.now) {
                    batch.skews[event.origin] = max(batch.skews[event.origin] ?? 0, lead)
                }
                try batch.writeAndFold(event, payload: payload, txn: &txn, writer: &writer)
                result.imported.append(event.id)
            }
        }
        return result
    }
}

/// The checks of one import request, event after event, with what the request gave so far.
struct ImportCheck {
    let log: EventLog
    /// The events given so far in the request, by id: their payload, to tell a repeat from a
    /// different event under the same id.
    var given: [ULID: [UInt8]] = [:]
    /// Per origin, the greatest id held or given so far in the request.
    var newest: [ULID: ULID] = [:]

    enum Outcome {
        /// Held already, or given before in the request: skipped.
        case held
        /// To be written: the event and its stored payload.
        case new(Event, payload: [UInt8])
    }

    /// The wall clock the request is checked against.
    let now: UInt64

    init(log: EventLog, now: UInt64) {
        self.log = log
        self.now = now
    }

    mutating func check(_ raw: [UInt8], index: Int, txn: borrowing some TransactionReading & ~Copyable)
        throws(EventStoreError) -> Outcome
    {
        let event: Event
        let payload: [UInt8]
        do {
            event = try EventCodec.decodeStored(raw)
            payload = try log.storedPayload(of: event)
        } catch {
            let id = EventCodec.identity(of: raw).id.map { " (\($0))" } ?? ""
            throw EventStoreError(error.reason, "event \(index)\(id): \(error.message)", index: index)
        }
        func refusal(_ message: String) -> EventStoreError {
            EventStoreError(.invalidEvent, "event \(index) (\(event.id)): \(message)", index: index)
        }
        if let earlier = given[event.id] {
            guard earlier == payload else {
                throw refusal("an earlier event of the request has the same id and different content")
            }
            return .held
        }
        do {
            if let held = try log.storedPayload(of: event.id, txn: txn) {
                guard held == payload else {
                    throw refusal(
                        "this node holds an event with this id and different content; the one held is kept. "
                            + "The input was changed after it was exported, or comes from a store that is not this one's peer"
                    )
                }
                given[event.id] = payload
                return .held
            }
            let skew = log.maxClockSkewMilliseconds
            if event.origin == log.nodeID, HybridClock.isBeyondSkew(event.id, now: now, skew: skew) {
                let why = EventLog.foreignOwnOrigin(
                    lead: HybridClock.lead(of: event.id, now: now), skew: skew,
                    then:
                        "Leave it out of the input; an export of this node never holds it unless its clock was that far ahead"
                )
                throw refusal("\(why.reason): \(why.message)")
            }
            let newest = try self.newest[event.origin] ?? log.newestID(of: event.origin, txn: txn)
            if let newest, event.id < newest {
                throw refusal(
                    "it is not held, and its origin \(event.origin) has a newer event \(newest) here "
                        + "(held, or earlier in the input): storing it would leave that origin's events out of id order, "
                        + "which replication relies on. The input is a partial or filtered export, or not in id order "
                        + "per origin; export the whole store again with `evctl export` (or, if this node lacks older "
                        + "events of that origin, sync it with a node that holds them)")
            }
        } catch let error as EventStoreError {
            throw error
        } catch {
            throw EventStoreError.from(error)
        }
        given[event.id] = payload
        newest[event.origin] = event.id
        return .new(event, payload: payload)
    }
}

extension EventLog {
    /// The greatest id of `origin` that `txn` sees held; nil when it holds none.
    func newestID(of origin: ULID, txn: borrowing some TransactionReading & ~Copyable) throws -> ULID? {
        try txn.withCursor(tables.originIndex) { cursor in
            try cursor.seekExact(origin.bytes) == nil ? nil : try cursor.lastDup()
        }.flatMap { ULID(bytes: $0.value) }
    }

    /// The event's canonical JSON without its id, checked against `max_event_bytes`
    /// (local appends and imports), or with `replicated`, against the sync protocol's
    /// per-record limit (`StoreOptions.absoluteMaxEventBytes`, 16 MiB): an event another
    /// node stored under a larger `max_event_bytes` is taken here too, so nodes with
    /// different local limits still hold the same events.
    func storedPayload(of event: Event, replicated: Bool = false) throws(EventStoreError) -> [UInt8] {
        let payload = EventCodec.encodeStored(event, includeID: false)
        try checkStoredSize(payload.count, replicated: replicated)
        return payload
    }

    /// `storedPayload(of:)` for a writer that encodes one event after another: encoded in
    /// `scratch`, which the caller keeps for the next, and copied into an array of its own
    /// size (a watcher's queue may hold it until it is sent). `idPosition` is set to where
    /// the event's id goes in it, as `EventCodec.idPosition(inPayload:hasKey:)` finds it.
    func storedPayload(of event: Event, through scratch: inout [UInt8], idPosition: inout Int)
        throws(EventStoreError) -> [UInt8]
    {
        scratch.removeAll(keepingCapacity: true)
        idPosition = EventCodec.encodeStored(event, includeID: false, into: &scratch)
        try checkStoredSize(scratch.count, replicated: false)
        // Not `Array(scratch[...])`, which may share the scratch's buffer.
        var payload: [UInt8] = []
        payload.reserveCapacity(scratch.count)
        payload.append(contentsOf: scratch)
        return payload
    }

    func checkStoredSize(_ payloadBytes: Int, replicated: Bool) throws(EventStoreError) {
        let storedSize = payloadBytes + EventCodec.idMemberBytes
        let limit = replicated ? StoreOptions.absoluteMaxEventBytes : options.maxEventBytes
        guard storedSize <= limit else {
            throw EventStoreError(
                .tooLarge,
                replicated
                    ? "the event is \(storedSize) bytes in its stored form; the sync protocol's limit is \(limit) bytes per event"
                    : "the event is \(storedSize) bytes in its stored form; the limit is \(limit) (max_event_bytes): split it or store large content elsewhere"
            )
        }
    }
}
