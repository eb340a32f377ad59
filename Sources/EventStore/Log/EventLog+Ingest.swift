import FoundationEssentials
import Projections

extension EventLog {
    /// Takes events replicated from a peer, in their stored form (canonical JSON with id
    /// and origin), in ONE write transaction.
    ///
    /// Ids and origins are kept. Events already held are skipped (deduplicated by id, not
    /// by idempotency key). An event that fails validation goes to the dead-letter table
    /// with the reason and never blocks the valid ones around it.
    public func ingest(_ rawEvents: [[UInt8]], from peer: String? = nil) throws(EventStoreError) -> IngestResult {
        try ingest(rawEvents.map { ReplicatedEvent(id: nil, json: $0) }, from: peer)
    }

    /// Takes replicated events whose id may travel beside their JSON (as sync sends them);
    /// otherwise as `ingest(_:from:)`.
    public func ingest(_ replicated: [ReplicatedEvent], from peer: String? = nil) throws(EventStoreError)
        -> IngestResult
    {
        try ingest(replicated, from: IngestPeer(name: peer))
    }

    /// As `ingest(_:from:)`, with the peer's node id for the dead letters. Once the batch has
    /// put `maxDeadLetters` events in the dead letters, the rest of it is refused (counted
    /// in `refused`, neither stored nor kept); what came before is committed.
    public func ingest(_ replicated: [ReplicatedEvent], from peer: IngestPeer, maxDeadLetters: Int = .max)
        throws(EventStoreError) -> IngestResult
    {
        guard !replicated.isEmpty else { return IngestResult() }
        return try perform(IngestJob(replicated, from: peer, maxDeadLetters: maxDeadLetters))
    }

    /// The work of `ingest(_:from:maxDeadLetters:)` inside a write in progress (the writer's
    /// group commit runs it beside appends in the same transaction).
    func ingest(
        _ replicated: [ReplicatedEvent], from peer: IngestPeer, maxDeadLetters: Int, batch: inout WriteBatch,
        txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> IngestResult {
        var result = IngestResult()
        var seen = SeenIDs()
        // Dropped dead letters stay refused: looked up only while there are any.
        let anyDropped = try txn.stat(tables.deadLetterIDs).entries > 0
        // Each record borrowed through a span: one taken out of the array is a copy, each of
        // its buffers retained and released again.
        let records = replicated.span
        for index in records.indices {
            if result.deadLettered.count >= maxDeadLetters {
                result.refused = replicated.count - index
                break
            }
            switch try judge(records[index], seen: seen, skipDropped: anyDropped, batch: &batch, txn: &txn) {
            case .invalid(let error):
                let record = records[index]
                if let letter = try batch.deadLetter(record.json, id: record.id, reason: error, peer: peer, txn: &txn) {
                    result.deadLettered.append(letter)
                } else {
                    result.skipped += 1
                }
            case .held:
                result.skipped += 1
            case .new(let event, let payload):
                seen.insert(event.id)
                try batch.recordRuleViolation(of: event, peer: peer.name, txn: &txn)
                try store(event, payload: payload, batch: &batch, txn: &txn, writer: &writer)
                result.ingested.append(event.id)
            }
        }
        return result
    }

    /// What a replicated event is to this node.
    enum Verdict {
        /// Valid and not held: to store.
        case new(Event, payload: [UInt8])
        /// Held already (or earlier in the batch), with the same content.
        case held
        /// Not to store, and why: a dead letter.
        case invalid(EventStoreError)
    }

    /// Validates a replicated event as ingest takes it — the settings now in force, the
    /// events held — without storing it. `seen`: the ids stored earlier in the same batch;
    /// `skipDropped`: an event whose dead letter was dropped (`dead_letters.drop`) counts as
    /// held, valid or not, so a drop is final on this node.
    func judge(
        _ record: borrowing ReplicatedEvent, seen: SeenIDs, skipDropped: Bool = false, batch: inout WriteBatch,
        txn: inout WriteTransaction
    ) throws -> Verdict {
        // Read out of the record by a switch, not mapped into a new result: each copy of
        // an event retains every buffer it holds.
        let event: Event
        let payload: [UInt8]
        switch record.decoded {
        case .success(let decoded)?:
            event = decoded.event
            payload = decoded.payload
        case .failure(let error)?:
            return .invalid(error)
        case nil:
            do {
                (event, payload) = try EventLog.received(record.json, id: record.id, log: batch.log)
            } catch {
                return .invalid(error)
            }
        }
        if seen.contains(event.id) { return .held }
        if skipDropped, try txn.get(tables.deadLetterIDs, event.id.bytes) == EventLog.droppedMarker { return .held }
        // A first sync of one origin, in id order, looks nothing up.
        if batch.mayHold(event.id), let held = try storedPayload(of: event.id, txn: txn) {
            // Held already. Honest nodes never give two events one id; a peer that
            // does is reported, and the event held first stays.
            guard held == payload else {
                return .invalid(
                    EventStoreError(
                        .invalidEvent,
                        "event \(event.id) is already held with different content; the one held first is kept"))
            }
            return .held
        }
        if event.origin == nodeID, batch.clock.isBeyondSkew(event.id, now: batch.now) {
            // This node makes its ids from its clock, so one of its origin this far
            // ahead was not made here. Stored, it would also set this node's own
            // version-vector entry past every id it will make, and peers would
            // never ask for its new events.
            let lead = HybridClock.lead(of: event.id, now: batch.now)
            batch.skews[event.origin] = max(batch.skews[event.origin] ?? 0, lead)
            return .invalid(
                EventLog.foreignOwnOrigin(
                    lead: lead, skew: batch.clock.maxSkewMilliseconds,
                    then:
                        "Look for the node that made it: a copy of this data directory running elsewhere, or a forged event"
                ))
        }
        return .new(event, payload: payload)
    }

    /// Stores a replicated event `judge` found new: the clock observes its id, and it is
    /// written (with the next seq) and folded.
    func store(
        _ event: Event, payload: [UInt8], batch: inout WriteBatch, txn: inout WriteTransaction,
        writer: inout EventLog.Writer
    ) throws {
        if let lead = batch.clock.observe(event.id, now: batch.now) {
            batch.skews[event.origin] = max(batch.skews[event.origin] ?? 0, lead)
        }
        try batch.writeAndFold(event, payload: payload, txn: &txn, writer: &writer)
    }
}

extension EventLog {
    /// Decodes received events before the writer takes them (the session's thread does,
    /// while the writer commits the batch before): what of validating an event depends on
    /// nothing stored — its JSON, its fields, its size — and its canonical payload. What
    /// depends on the store (held already, a dropped dead letter, this node's clock) the
    /// writer still checks.
    public func predecode(_ events: consuming [ReplicatedEvent]) -> [ReplicatedEvent] {
        // In place: the events are not copied (nor their buffers retained) to add what was decoded.
        for index in events.indices {
            events[index].decoded = Result { () throws(EventStoreError) in
                let (event, payload) = try EventLog.received(events[index].json, id: events[index].id, log: self)
                return DecodedReplica(event: event, payload: payload)
            }
        }
        return events
    }

    /// A received event decoded, and its payload: the received bytes themselves when they
    /// are the canonical payload already (as a node of this release sends them), else the
    /// event encoded again. Held to the protocol's limit, not `max_event_bytes`: see
    /// `storedPayload(of:replicated:)`.
    static func received(_ raw: [UInt8], id: ULID?, log: EventLog) throws(EventStoreError) -> (Event, [UInt8]) {
        var isPayload = false
        let event = try EventCodec.decodeStored(raw, id: id, isPayload: &isPayload)
        guard isPayload else { return (event, try log.storedPayload(of: event, replicated: true)) }
        try log.checkStoredSize(raw.count, replicated: true)
        assert(
            raw == EventCodec.encodeStored(event, includeID: false), "received bytes taken as canonical that are not")
        return (event, raw)
    }

    /// The refusal of an event of this node's origin whose id is `lead` ms ahead of its
    /// clock, beyond the allowed `skew` (`max_clock_skew_s`); `then` says what to do.
    static func foreignOwnOrigin(lead: UInt64, skew: UInt64, then advice: String) -> EventStoreError {
        EventStoreError(
            .foreignOwnOrigin,
            "it has this node's origin and an id \(describe(milliseconds: lead)) ahead of this node's clock, beyond max_clock_skew_s (\(describe(milliseconds: skew))), so this node did not make it; stored, it would set this node's own entry in version vectors past every id it will make, and peers would stop asking for its events. \(advice)"
        )
    }

    /// A duration for a message: whole days, hours, minutes or seconds, or ms.
    static func describe(milliseconds: UInt64) -> String {
        let units: [(UInt64, String)] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")]
        for (size, name) in units where milliseconds >= size {
            return "\(milliseconds / size) \(name)"
        }
        return "\(milliseconds) ms"
    }
}

extension WriteBatch {
    /// Keeps an event that failed validation, with why, where it came from and when.
    /// Nil when an event of that id is a dead letter already (a peer sends an invalid event
    /// again at each session while it is the last of its origin).
    mutating func deadLetter(
        _ raw: [UInt8], id knownID: ULID? = nil, reason: EventStoreError, peer: IngestPeer,
        txn: inout WriteTransaction
    ) throws -> DeadLetter? {
        var (id, origin) = EventCodec.identity(of: raw)
        if let knownID { id = knownID.description }
        let eventID = knownID ?? id.flatMap { ULID($0) }
        if let eventID, try txn.get(log.tables.deadLetterIDs, eventID.bytes) != nil { return nil }
        // From the hybrid clock, so dead letters keep the order they arrived in.
        let key = try clock.next(now: now)
        // Kept whole up to the replicated limit while the dead letters' raw bytes stay within
        // their budget, so it can be retried after an upgrade or a change of settings.
        let held = try log.deadLetterRawBytes(txn: txn)
        let whole =
            raw.count <= DeadLetter.prefixBytes
            || (raw.count <= DeadLetter.maxRawBytes && held + raw.count <= log.options.deadLetterRawBudget)
        let kept = whole ? raw : Array(raw.prefix(DeadLetter.prefixBytes))
        let letter = DeadLetter(
            key: key, id: id, origin: origin, peer: peer.name, reason: "\(reason.reason): \(reason.message)",
            receivedAt: now,
            raw: kept, peerNode: peer.node?.description, truncated: !whole)
        try log.setDeadLetterRawBytes(held + kept.count, txn: &txn)
        try txn.put(log.tables.deadLetters, key.bytes, letter.canonicalJSON(), flags: .noOverwrite)
        if let eventID { try txn.put(log.tables.deadLetterIDs, eventID.bytes, key.bytes) }
        return letter
    }
}

extension DeadLetter {
    /// Raw bytes kept of one dead letter at most: the replicated limit, so every event a
    /// peer may send can be kept whole.
    public static let maxRawBytes = StoreOptions.absoluteMaxEventBytes
    /// What is kept of a larger one, or of any once the dead letters hold
    /// `StoreOptions.deadLetterRawBudget` of raw bytes (and what releases up to 0.5 kept of
    /// every one).
    public static let prefixBytes = 64 * 1024

    /// Whether `raw` is only a prefix of the event, so it cannot be retried.
    public var isCut: Bool { truncated ?? (raw.count == DeadLetter.prefixBytes) }

    /// `{"id","key","origin","peer","peer_node","raw","reason","received_at","truncated"}`
    /// as canonical JSON; `peer_node` and `truncated` are left out when not known, as in the
    /// records of older releases.
    public func canonicalJSON() -> [UInt8] {
        var out = Array("{".utf8)
        func optional(_ key: StaticString, _ value: String?) {
            CanonicalWriter.appendKey(key, to: &out)
            if let value { CanonicalWriter.appendString(value, to: &out) } else { CanonicalWriter.appendNull(to: &out) }
            out.append(UInt8(ascii: ","))
        }
        optional("id", id)
        optional("key", key.description)
        optional("origin", origin)
        optional("peer", peer)
        if let peerNode {
            CanonicalWriter.appendKey("peer_node", to: &out)
            CanonicalWriter.appendString(peerNode, to: &out)
            out.append(UInt8(ascii: ","))
        }
        // Raw bytes as text; invalid UTF-8 shows as U+FFFD.
        optional("raw", String(decoding: raw, as: UTF8.self))
        optional("reason", reason)
        CanonicalWriter.appendKey("received_at", to: &out)
        CanonicalWriter.appendString(EventLog.timestamp(milliseconds: receivedAt), to: &out)
        if let truncated {
            out.append(UInt8(ascii: ","))
            CanonicalWriter.appendKey("truncated", to: &out)
            out += Array((truncated ? "true" : "false").utf8)
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    init(key: ULID, decoding record: [UInt8]) throws {
        var scanner = JSONScanner(record)
        var letter = DeadLetter(key: key, id: nil, origin: nil, peer: nil, reason: "", receivedAt: 0, raw: [])
        try scanner.readObject { (name, s) throws(JSONError) in
            let member = String(decoding: name, as: UTF8.self)
            if member == "truncated" {
                letter.truncated = try s.readBool()
                return
            }
            let value: String? = s.readNull() ? nil : try s.readString()
            switch member {
            case "id": letter.id = value
            case "origin": letter.origin = value
            case "peer": letter.peer = value
            case "peer_node": letter.peerNode = value
            case "raw": letter.raw = Array((value ?? "").utf8)
            case "reason": letter.reason = value ?? ""
            case "received_at": letter.receivedAt = EventLog.milliseconds(fromTimestamp: value ?? "") ?? 0
            default: break
            }
        }
        self = letter
    }
}

extension EventCodec {
    /// The `id` and `origin` strings of an event that may not be valid, when they can be read.
    static func identity(of raw: [UInt8]) -> (id: String?, origin: String?) {
        var scanner = JSONScanner(raw)
        var id: String?
        var origin: String?
        try? scanner.readObject { (key, s) throws(JSONError) in
            let name = String(decoding: key, as: UTF8.self)
            if name == "id" || name == "origin", s.peek() == UInt8(ascii: "\"") {
                let value = String(try s.readString().prefix(64))
                if name == "id" { id = value } else { origin = value }
            } else {
                try s.skipValue()
            }
        }
        return (id, origin)
    }
}

extension EventLog {
    /// RFC 3339 UTC with milliseconds (`2026-03-01T08:15:02.125Z`), from whole numbers: no
    /// calendar or formatter is needed for UTC, and the milliseconds are exact.
    public static func timestamp(milliseconds: UInt64) -> String {
        let seconds = milliseconds / 1000
        let (year, month, day) = civilDate(daysSince1970: Int64(seconds / 86400))
        let time = Int(seconds % 86400)
        return "\(digits(Int(year), 4))-\(digits(month, 2))-\(digits(day, 2))T"
            + "\(digits(time / 3600, 2)):\(digits(time / 60 % 60, 2)):\(digits(time % 60, 2))."
            + "\(digits(Int(milliseconds % 1000), 3))Z"
    }

    static func milliseconds(fromTimestamp text: String) -> UInt64? {
        guard let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) else { return nil }
        return UInt64(max(0, date.timeIntervalSince1970 * 1000).rounded())
    }

    /// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
    /// `civil_from_days`).
    private static func civilDate(daysSince1970 days: Int64) -> (year: Int64, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = Int(dayOfYear - (153 * monthFromMarch + 2) / 5 + 1)
        let month = Int(monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9)
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// `value` in decimal, zero-padded to `width` digits.
    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }
}

/// The ids a batch stored so far, for `EventLog.judge`. A peer sends an origin's events in
/// id order, so while they come ascending they are kept in a sorted array (an append each,
/// no hashing) and an id above the last is known unseen at once; the first out of order
/// moves them all to a set.
struct SeenIDs {
    private var ascending: [ULID] = []
    private var set: Set<ULID>?

    func contains(_ id: ULID) -> Bool {
        if let set { return set.contains(id) }
        guard let last = ascending.last, id <= last else { return false }
        // The first index whose id is not below `id`.
        var low = 0
        var high = ascending.count - 1
        while low < high {
            let middle = (low + high) / 2
            if ascending[middle] < id { low = middle + 1 } else { high = middle }
        }
        return ascending[low] == id
    }

    mutating func insert(_ id: ULID) {
        if set != nil {
            set!.insert(id)
        } else if let last = ascending.last, id <= last {
            var all = Set(ascending)
            all.insert(id)
            set = all
            ascending = []
        } else {
            ascending.append(id)
        }
    }
}
