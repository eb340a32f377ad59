import Projections

/// A `projections` value as folded: its body uncompressed. `EventLog.expanded` makes one
/// from what the table holds; the record decoders take nothing else, so none can be handed
/// a compressed record by mistake.
struct ProjectionRecord {
    let bytes: [UInt8]

    /// Its rev, and what follows the hash and the rev: the state and the history, the part
    /// that is compressed.
    func revAndBody(entity: EntityKey) throws -> (rev: UInt64, body: [UInt8]) {
        var reader = ByteReader(bytes)
        let rev = try EventLog.projectionHeader(&reader, entity: entity).rev
        return (rev, Array(bytes[reader.position...]))
    }
}

/// The compressor and dictionary a write compresses its records with: the writer's.
struct RecordCompression {
    let compressor: Compressor
    let dictionaryVersion: UInt32
    let dictionary: CompressionDictionary?

    /// The records' dictionary, or the events' until records have one of their own.
    init(_ writer: borrowing EventLog.Writer) {
        compressor = writer.recordCompressor
        if writer.recordDictionary != nil {
            dictionaryVersion = writer.recordDictionaryVersion
            dictionary = writer.recordDictionary
        } else {
            dictionaryVersion = writer.dictionaryVersion
            dictionary = writer.dictionary
        }
    }

    /// The value to store for `record` as folded: compressed, or the record itself behind
    /// its form byte when compressing would not save `projectionMinimumSaving` bytes or
    /// zstd fails (out of memory). Readers take both, so a failed compression costs bytes,
    /// never the write.
    func stored(_ record: [UInt8], entity: EntityKey) -> [UInt8] {
        (try? EventLog.storedProjection(
            record, entity: entity, dictionaryVersion: dictionaryVersion, dictionary: dictionary,
            compressor: compressor)) ?? [EventLog.foldedProjectionForm] + record
    }
}

/// Projection records compressed as they are written.
///
/// A record is the entity's state and short status history in a compact binary form,
/// about 600 bytes for a job of the field workload, much of it field names, statuses and
/// ids that share their time prefix. zstd with a dictionary trained on records takes it to
/// about 190 (with the events' dictionary 290, with none 400), and the `projections` table
/// from 81 to 25 bytes per event of the field workload (docs/performance.md). Records get
/// their own dictionary with each training of the events' (`prepareDictionary`), and use
/// the events' until then (`RecordCompression`). Each write compresses the record (about 2.3
/// µs, zstd's cost for a frame this small) and each read decompresses it (about 0.6 µs).
/// It has to be done at the write: a record compressed later shrinks in a leaf that keeps
/// its size, since entities are keyed by time-ordered ids and new ones go to the right of
/// the tree, never into the room left in old leaves.
///
/// What `projections` holds under an entity, by its first byte:
///
/// ```
/// 0x01        the record as folded follows: [16-byte state hash][varint rev][state][history]
/// 0xC7        compressed:
///   varint    rev (read without decompressing: `storedProjectionRev`)
///   varint    dictionary code: 0 none, 2n the records' dictionary n, 2v + 1 the events' v
///   rest      one zstd frame (with its content size) of the state and the history
/// ```
///
/// A compressed record leaves its state hash out: it is the XXH64 pair of the state's
/// encoding, computed again when the record is read (`expanded`), 16 bytes of about 200
/// saved for 0.2 µs a read. So compression changes no digest, and a record expanded is byte
/// for byte the record as folded (`rebuild --verify` compares those). Appends, sync,
/// imports, `rebuild` and the upgrade from an older format (which folds every record again)
/// all write records this way; a record that would not save `projectionMinimumSaving`
/// bytes is stored as folded, and readers take either.
extension EventLog {
    /// The records' dictionaries share the `dictionaries` table with the events': record
    /// dictionary n is version `recordDictionaryBase + n`, far above any the events reach.
    package static let recordDictionaryBase: UInt32 = 0x8000_0000
    /// The first byte of a stored record: as folded, or compressed.
    static let foldedProjectionForm: UInt8 = 0x01
    static let compressedProjectionForm: UInt8 = 0xC7
    /// A compressed record must save at least this much to be kept compressed.
    static let projectionMinimumSaving = 32
    /// The most a compressed record's body may inflate to: far above any record (a state
    /// is bounded by its events, each at most `absoluteMaxEventBytes`, and a record over a
    /// few hundred kilobytes takes its history out to `status_history`).
    static let maxProjectionBodyBytes = 4 * StoreOptions.absoluteMaxEventBytes

    /// The dictionary code of a compressed record: 0 none, 2n the records' dictionary n,
    /// 2v + 1 the events' dictionary v, so the usual ones take one byte.
    static func dictionaryCode(_ version: UInt32) -> UInt64 {
        if version == 0 { return 0 }
        if version > recordDictionaryBase { return 2 * UInt64(version - recordDictionaryBase) }
        return 2 * UInt64(version) + 1
    }

    /// The dictionary version `code` names; nil when it names none that can exist.
    static func dictionaryVersion(code: UInt64) -> UInt32? {
        if code == 0 { return 0 }
        let number = code / 2
        if code % 2 == 1 { return number < UInt64(recordDictionaryBase) ? UInt32(number) : nil }
        return number < UInt64(UInt32.max - recordDictionaryBase) ? recordDictionaryBase + UInt32(number) : nil
    }

    /// The record `value` of `entity` as `projections` holds it, as folded:
    /// `[state hash][varint rev][length-prefixed state][history]`, its hash computed again
    /// when it was compressed.
    func expanded(_ value: [UInt8], entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws
        -> ProjectionRecord
    {
        let compressed: CompressedProjection
        switch try EventLog.storedProjectionForm(value, entity: entity) {
        case .folded(let record): return record
        case .compressed(let parts): compressed = parts
        }
        let dictionary = try dictionary(compressed.dictionaryVersion, txn: txn)
        return try decompressors.withDecompressor { decompressor in
            try EventLog.expand(compressed, entity: entity, dictionary: dictionary, decompressor: decompressor)
        }
    }

    /// A compressed record's parts, its frame not decompressed.
    struct CompressedProjection {
        let rev: UInt64
        let dictionaryVersion: UInt32
        let frame: [UInt8]
    }

    enum StoredProjectionForm {
        case folded(ProjectionRecord)
        case compressed(CompressedProjection)
    }

    /// What the first byte of a stored record says it is, and its parts.
    static func storedProjectionForm(_ value: [UInt8], entity: EntityKey) throws -> StoredProjectionForm {
        guard let form = value.first else { throw CorruptDataError("projection record of \(entity) is empty") }
        if form == foldedProjectionForm { return .folded(ProjectionRecord(bytes: Array(value[1...]))) }
        guard form == compressedProjectionForm else {
            throw CorruptDataError("projection record of \(entity) has an unknown form (its first byte is \(form))")
        }
        do throws(CorruptDataError) {
            var reader = ByteReader(value, at: 1)
            let rev = try reader.varint()
            guard let version = dictionaryVersion(code: try reader.varint()) else {
                throw CorruptDataError("its dictionary code is out of range")
            }
            return .compressed(
                CompressedProjection(rev: rev, dictionaryVersion: version, frame: try reader.bytes(reader.remaining)))
        } catch {
            throw CorruptDataError("the compressed projection record of \(entity) does not read: \(error.message)")
        }
    }

    /// A compressed record decompressed with `dictionary` (the one it names), as folded, its
    /// hash computed from its state.
    static func expand(
        _ compressed: CompressedProjection, entity: EntityKey, dictionary: CompressionDictionary?,
        decompressor: Decompressor
    ) throws -> ProjectionRecord {
        let body: [UInt8]
        do {
            body = try decompressor.decompress(
                compressed.frame, dictionary: dictionary, maxSize: maxProjectionBodyBytes)
        } catch {
            throw CorruptDataError("the compressed projection record of \(entity) does not decompress: \(error)")
        }
        // The hash is of the state's encoding, the body's first, length-prefixed value.
        var reader = ByteReader(body)
        let state: [UInt8]
        do {
            state = try reader.lengthPrefixed()
        } catch {
            throw CorruptDataError("the compressed projection record of \(entity) holds no state")
        }
        let hash = StateHash(hashing: state)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(26 + body.count)
        ULID(high: hash.high, low: hash.low).append(to: &bytes)
        bytes.appendVarint(compressed.rev)
        bytes.append(contentsOf: body)
        return ProjectionRecord(bytes: bytes)
    }

    /// A stored record read as a `get` reads it, without a store (the projection-record
    /// fuzzer's entry): its state hash, state, rev and status history (nil: in
    /// `status_history`). `dictionaries` stands for the store's dictionary table; a version
    /// not in it is a corrupt store.
    package static func readStoredProjection(
        _ value: [UInt8], entity: EntityKey, dictionaries: [UInt32: CompressionDictionary],
        decompressor: Decompressor
    ) throws -> (hash: StateHash, state: EntityState, rev: UInt64, history: [StatusEntry]?) {
        let record: ProjectionRecord
        switch try storedProjectionForm(value, entity: entity) {
        case .folded(let folded): record = folded
        case .compressed(let compressed):
            let dictionary = try dictionary(compressed.dictionaryVersion, in: dictionaries)
            record = try expand(compressed, entity: entity, dictionary: dictionary, decompressor: decompressor)
        }
        let (hash, state, rev, history) = try decodeProjection(record, entity: entity, history: true)
        return (hash, state, rev, history)
    }

    /// Dictionary `version` of `dictionaries`, which stands for the store's dictionary
    /// table (the fuzz entries' reads without a store): nil for version 0, none; a version
    /// it lacks is a corrupt store.
    package static func dictionary(_ version: UInt32, in dictionaries: [UInt32: CompressionDictionary]) throws
        -> CompressionDictionary?
    {
        guard version != 0 else { return nil }
        guard let known = dictionaries[version] else {
            throw EventStoreError(.corrupt, "compression dictionary \(version) is missing from the store")
        }
        return known
    }

    /// The value the store writes for a record of `state` (the projection-record fuzzer's
    /// seeds and checks).
    package static func storedProjection(
        _ state: EntityState, rev: UInt64, history: [StatusEntry]?, dictionaryVersion: UInt32,
        dictionary: CompressionDictionary?, compressor: Compressor
    ) throws -> [UInt8] {
        try storedProjection(
            projectionRecord(state, rev: rev, history: history).record, entity: state.entity,
            dictionaryVersion: dictionaryVersion, dictionary: dictionary, compressor: compressor)
    }

    /// The value to store for the record as folded `record`: compressed with `dictionary`,
    /// or behind its form byte as folded when compressing would not save
    /// `projectionMinimumSaving` bytes.
    static func storedProjection(
        _ record: [UInt8], entity: EntityKey, dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor
    ) throws -> [UInt8] {
        let (rev, body) = try ProjectionRecord(bytes: record).revAndBody(entity: entity)
        if body.count > projectionMinimumSaving {
            let compressed = try compressedProjection(
                body: body, rev: rev, dictionaryVersion: dictionaryVersion, dictionary: dictionary,
                compressor: compressor)
            if compressed.count + projectionMinimumSaving <= record.count + 1 { return compressed }
        }
        return [foldedProjectionForm] + record
    }

    /// A compressed record of `body`, the state and history of a record as folded (or
    /// whatever the projection-record fuzzer puts there, its way past the zstd frame to the
    /// decoders behind it): `[0xC7][varint rev][varint dictionary code][zstd frame of body]`,
    /// without the hash, which is the state's.
    package static func compressedProjection(
        body: [UInt8], rev: UInt64, dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor
    ) throws -> [UInt8] {
        var out: [UInt8] = [compressedProjectionForm]
        out.appendVarint(rev)
        out.appendVarint(dictionaryCode(dictionaryVersion))
        try compressor.compress(body, dictionary: dictionary, appendingTo: &out)
        return out
    }

    /// The rev of the record `value` as `projections` holds it, nothing decompressed.
    static func storedProjectionRev(_ value: [UInt8], entity: EntityKey) throws -> UInt64 {
        guard let form = value.first else { throw CorruptDataError("projection record of \(entity) is empty") }
        switch form {
        case foldedProjectionForm: return try projectionRev(Array(value[1...]), entity: entity)
        case compressedProjectionForm:
            var reader = ByteReader(value, at: 1)
            do {
                return try reader.varint()
            } catch {
                throw CorruptDataError("projection record of \(entity) is truncated")
            }
        default:
            throw CorruptDataError("projection record of \(entity) has an unknown form (its first byte is \(form))")
        }
    }
}
