// FuzzEntries: the fuzzers' entry points, which only Fuzz/ and the tests link; each runs one
// input through the code a program runs and adds nothing to what that code does.

import EventStore
import Projections

/// Entry points for the fuzzers in `Fuzz/` and for the tests that replay their corpora and
/// regressions: each takes one input, runs it through the same code the store runs, and
/// either returns what it decoded or throws the error a caller would get.
///
/// Beyond "no crash", each checks what must hold for every input it accepts (a decoded event
/// re-encodes to bytes that decode to the same event) and stops the process with
/// `preconditionFailure` when it does not, so the fuzzer reports it as a finding.
public enum FuzzEntry {
    // MARK: Event codec

    /// One input for the event codec. The first byte picks the form of the rest: even, the
    /// input form (`EventCodec.decodeInput`); odd, the stored form (`EventCodec.decodeStored`,
    /// with the id from the bytes or, when they have none, a fixed one).
    ///
    /// An accepted event is encoded in the stored form and decoded again: both must give the
    /// same event and the same bytes. Its fold must encode as valid JSON. A stored form is
    /// said to be the event's payload exactly when it is.
    public static func event(_ data: [UInt8]) throws(EventStoreError) -> Event {
        guard let selector = data.first else { throw .invalid("an empty input") }
        let json = Array(data.dropFirst())
        let event: Event
        if selector & 1 == 0 {
            let input = try EventCodec.decodeInput(json)
            event = Event(
                id: sampleID, origin: sampleOrigin, entity: input.entity, body: body(of: input.change),
                key: input.key, by: input.by, at: input.at)
        } else {
            // As a receiver reads it: the bytes are kept as the payload when the decoder says
            // they are one, so it must say so exactly when they are the encoder's bytes.
            var isPayload = false
            event = try EventCodec.decodeStored(json, id: selector & 2 == 0 ? nil : sampleID, isPayload: &isPayload)
            let payload = EventCodec.encodeStored(event, includeID: false)
            precondition(
                isPayload == (json == payload),
                "\(quote(json)) is \(isPayload ? "" : "not ")taken as its payload, \(quote(payload))")
        }
        checkRoundTrip(event)
        checkJSON(Projection.canonicalJSON(event.entity, [event]), "the canonical state of \(event.entity)")
        return event
    }

    /// One input for the JSON scanner alone: its canonical form, when it has one, must be
    /// valid JSON that is its own canonical form.
    public static func canonicalJSON(_ data: [UInt8]) throws(JSONError) -> [UInt8] {
        var scanner = JSONScanner(data)
        var canonical: [UInt8] = []
        try scanner.canonicalValue(into: &canonical)
        try scanner.expectEnd()
        var again = JSONScanner(canonical)
        var twice: [UInt8] = []
        do {
            try again.canonicalValue(into: &twice)
            try again.expectEnd()
        } catch {
            preconditionFailure("the canonical form \(quote(canonical)) of \(quote(data)) does not parse: \(error)")
        }
        precondition(twice == canonical, "canonical JSON is not stable: \(quote(canonical)) became \(quote(twice))")
        return canonical
    }

    // MARK: Stored values

    /// One stored value, read the way `EventLog` reads it: by its first byte, a block of
    /// events of store format 7 (`EventBlocks`, taken as the block of seq 1000), or the one
    /// event value of format 6 and older (format byte, dictionary version, zstd frame)
    /// under `id`, which the upgrade reads. `dictionaries` stands for the store's dictionary
    /// table, and a version not in it is a corrupt store. Returns the events it holds.
    public static func storedValue(
        _ value: [UInt8], id: ULID = sampleID, dictionaries: [UInt32: CompressionDictionary],
        decompressor: Decompressor
    ) throws -> [Event] {
        if value.first == 2 {
            var events: [Event] = []
            for (id, payload) in try EventBlocks.records(
                of: value, first: 1000, dictionaries: dictionaries, decompressor: decompressor)
            {
                precondition(payload.count <= StoreOptions.absoluteMaxEventBytes, "a record inflated past the limit")
                do {
                    events.append(try EventCodec.decodeStored(payload, id: id))
                } catch {
                    throw EventStoreError(.corrupt, "stored event \(id) does not decode: \(error.message)")
                }
                checkRoundTrip(events[events.count - 1])
            }
            return events
        }
        return [try legacyValue(value, id: id, dictionaries: dictionaries, decompressor: decompressor)]
    }

    static func legacyValue(
        _ value: [UInt8], id: ULID, dictionaries: [UInt32: CompressionDictionary], decompressor: Decompressor
    ) throws -> Event {
        let (version, frame) = try StoredValue.decode(value)
        let dictionary = try EventLog.dictionary(version, in: dictionaries)
        let payload = try decompressor.decompress(
            frame, dictionary: dictionary, maxSize: StoreOptions.absoluteMaxEventBytes)
        precondition(payload.count <= StoreOptions.absoluteMaxEventBytes, "a value inflated past the limit")
        let event: Event
        do {
            event = try EventCodec.decodeStored(payload, id: id)
        } catch {
            throw EventStoreError(.corrupt, "stored event \(id) does not decode: \(error.message)")
        }
        checkRoundTrip(event)
        return event
    }

    // MARK: Projection records

    /// The entity the projection-record fuzzer reads its records as.
    public static let sampleEntity = EntityKey(validated: Array("job/01JD3Q8R5N8X6ZK2W7Y4V9B0A".utf8))

    /// The dictionary table the projection-record fuzzer reads with: the sample dictionary
    /// as the events' version 1 and as the records' first.
    public static func sampleRecordDictionaries() throws -> [UInt32: CompressionDictionary] {
        let dictionary = try sampleDictionary()
        return [1: dictionary, EventLog.recordDictionaryBase + 1: dictionary]
    }

    /// One input for the projection-record fuzzer. The first byte picks what the rest is:
    /// bit 0 clear, a value of `projections` as the store holds it (`0x01` and the record
    /// as folded, or `0xC7`, rev, dictionary code and zstd frame); bit 0 set, the body of a
    /// compressed record (state and status history), compressed here first — with the
    /// sample dictionary as records' dictionary 1 when bit 1 is set — so the fuzzer's
    /// changes reach the decoders behind the frame. Read as a `get` reads it, under
    /// `sampleEntity`.
    ///
    /// An accepted record is written again as the store writes one and read back: the same
    /// state, rev and history, and the state hash of its encoding.
    public static func projectionRecord(
        _ data: [UInt8], dictionaries: [UInt32: CompressionDictionary], decompressor: Decompressor,
        compressor: Compressor
    ) throws -> EntityState {
        guard let selector = data.first else { throw EventStoreError.invalid("an empty input") }
        var value = Array(data.dropFirst())
        if selector & 1 == 1 {
            let version: UInt32 = selector & 2 == 0 ? 0 : EventLog.recordDictionaryBase + 1
            value = try EventLog.compressedProjection(
                body: value, rev: UInt64(selector >> 2), dictionaryVersion: version, dictionary: dictionaries[version],
                compressor: compressor)
        }
        let (_, state, rev, history) = try EventLog.readStoredProjection(
            value, entity: sampleEntity, dictionaries: dictionaries, decompressor: decompressor)
        precondition(state.entity == sampleEntity, "a record read as \(sampleEntity) is of \(state.entity)")
        for version in [0, EventLog.recordDictionaryBase + 1] as [UInt32] {
            do {
                let stored = try EventLog.storedProjection(
                    state, rev: rev, history: history, dictionaryVersion: version, dictionary: dictionaries[version],
                    compressor: compressor)
                let again = try EventLog.readStoredProjection(
                    stored, entity: sampleEntity, dictionaries: dictionaries, decompressor: decompressor)
                precondition(again.state == state, "an accepted record's state reads back as another")
                precondition(again.rev == rev, "an accepted record's rev reads back as \(again.rev), not \(rev)")
                precondition(again.history == history, "an accepted record's status history reads back as another")
                precondition(
                    again.hash == StateHash(hashing: state.encoded()), "a stored record's hash is not its state's")
            } catch {
                preconditionFailure("an accepted record, written again, does not read: \(error)")
            }
        }
        return state
    }

    /// A record's value as the store writes one, of the state `events` fold to, with its
    /// status history in the record (seeds of the projection-record fuzzer).
    public static func encodeProjection(
        _ events: [Event], rev: UInt64, dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor
    ) throws -> [UInt8] {
        let events = events.filter { $0.entity == sampleEntity }
        return try EventLog.storedProjection(
            Projection.fold(sampleEntity, events), rev: rev, history: Projection.statusHistory(sampleEntity, events),
            dictionaryVersion: dictionaryVersion,
            dictionary: dictionary, compressor: compressor)
    }

    /// Encodes a block of events as the store writes one (seeds of the stored-value fuzzer).
    public static func encodeBlock(
        _ events: [Event], dictionaryVersion: UInt32, dictionary: CompressionDictionary?, compressor: Compressor
    ) throws -> [UInt8] {
        try EventBlocks.encode(
            events.map { ($0.id, EventCodec.encodeStored($0, includeID: false)) }, dictionaryVersion: dictionaryVersion,
            dictionary: dictionary, compressor: compressor)
    }

    /// Encodes a value of format 6 as that store wrote one (seeds of the stored-value fuzzer).
    public static func encodeStoredValue(
        _ event: Event, dictionaryVersion: UInt32, dictionary: CompressionDictionary?, compressor: Compressor
    ) throws -> [UInt8] {
        try StoredValue.encode(
            payload: EventCodec.encodeStored(event, includeID: false), dictionaryVersion: dictionaryVersion,
            dictionary: dictionary, compressor: compressor)
    }

    /// A dictionary trained on a fixed set of made-up events: the same bytes on every run, so
    /// seeds compressed with it keep decoding with it.
    public static func sampleDictionary() throws -> CompressionDictionary {
        try CompressionDictionary(bytes: DictionaryTrainer.train(samples: sampleEvents(), capacity: 4096))
    }

    /// Stored events (canonical JSON without ids) in the shape of the field workload, the
    /// same on every run.
    public static func sampleEvents(count: Int = 256) -> [[UInt8]] {
        let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
        let parts = ["valve-3", "gasket-12", "pump-seal", "filter-a", "fuse-10a", "relay-k4"]
        return (0..<count).map { index in
            let entity = "job/01JD3Q8R5N8X6ZK2W7Y4V9B\(index % 10)\(["A", "B", "C"][index % 3])"
            let change: String
            switch index % 4 {
            case 0:
                change =
                    #""kind":"edit","fields":{"address":"\#(index) Main St","floor":\#(index % 7),"notes":"call first"}"#
            case 1: change = #""kind":"status","status":"\#(statuses[index % statuses.count])""#
            case 2: change = #""kind":"add","set":"parts","element":"\#(parts[index % parts.count])""#
            default: change = #""kind":"remove","set":"parts","element":"\#(parts[index % parts.count])""#
            }
            let input = #"{"entity":"\#(entity)",\#(change),"by":"tech-\#(index % 12)","at":"2026-03-01T08:00:00Z"}"#
            guard let decoded = try? EventCodec.decodeInput(Array(input.utf8)) else {
                preconditionFailure("a sample event does not decode: \(input)")
            }
            let event = Event(
                id: sampleID, origin: sampleOrigin, entity: decoded.entity, body: body(of: decoded.change),
                key: decoded.key, by: decoded.by, at: decoded.at)
            return EventCodec.encodeStored(event, includeID: false)
        }
    }

    /// The id and origin the fuzz entries give events that have none.
    public static let sampleID = ULID(high: 0x0193_0000_0000_0001, low: 0x0000_0000_0000_0001)
    public static let sampleOrigin = ULID(high: 0x0193_0000_0000_0000, low: 0x0000_0000_0000_00AA)

    // MARK: Checks

    static func body(of change: InputEvent.Change) -> EventBody {
        switch change {
        case .edit(let fields): .edit(fields: fields, base: [])
        case .status(let status): .status(status, base: [])
        case .add(let set, let element): .add(set: set, element: element)
        case .remove(let set, let element): .remove(set: set, element: element, observed: [])
        case .delete: .delete
        case .restore: .restore(base: [])
        case .incr(let counter, let amount): .incr(counter: counter, amount: amount)
        }
    }

    /// The stored form of `event` decodes to `event`, with and without its id, and
    /// re-encodes to the same bytes.
    static func checkRoundTrip(_ event: Event) {
        let encoded = EventCodec.encodeStored(event, includeID: true)
        let withoutID = EventCodec.encodeStored(event, includeID: false)
        do {
            let decoded = try EventCodec.decodeStored(encoded)
            precondition(decoded == event, "\(quote(encoded)) decodes to another event: \(decoded) != \(event)")
            let keyed = try EventCodec.decodeStored(withoutID, id: event.id)
            precondition(keyed == event, "\(quote(withoutID)) under its key decodes to another event")
            let again = EventCodec.encodeStored(decoded, includeID: true)
            precondition(again == encoded, "the stored form is not stable: \(quote(encoded)) became \(quote(again))")
        } catch {
            preconditionFailure("the stored form \(quote(encoded)) of an accepted event does not decode: \(error)")
        }
    }

    /// Stops the process when `bytes` is not one valid JSON value; `what` names it.
    public static func checkJSON(_ bytes: [UInt8], _ what: String) {
        var scanner = JSONScanner(bytes)
        do {
            try scanner.skipValue()
            try scanner.expectEnd()
        } catch {
            preconditionFailure("\(what) is not valid JSON (\(error)): \(quote(bytes))")
        }
    }

    /// The first 400 bytes of `bytes` as text, for messages.
    public static func quote(_ bytes: [UInt8]) -> String {
        String(decoding: bytes.prefix(400), as: UTF8.self) + (bytes.count > 400 ? "…" : "")
    }
}
