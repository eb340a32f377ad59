import Projections

/// A `projections` value as folded: its body uncompressed. `EventLog.expanded` makes one
/// from what the table holds; the record decoders take nothing else, so none can be handed
/// a compressed record by mistake.
struct ProjectionRecord {
    let bytes: [UInt8]
}

/// Projection records compressed as they are written.
///
/// A record is the entity's state and short status history in a compact binary form,
/// about 600 bytes for a job of the field workload, much of it field names, statuses and
/// ids that share their time prefix. zstd with a dictionary trained on records takes it to
/// about 190 (with the events' dictionary 290, with none 400), and the `projections` table
/// from 81 to 27.6 bytes per event of the field workload (docs/performance.md). Records get
/// their own dictionary with each training of the events' (`prepareDictionary`), and use
/// the events' until then (`RecordCompression`). Each write compresses the record (about 2.3
/// µs, zstd's cost for a frame this small) and each read decompresses it (about 0.6 µs).
/// It has to be done at the write: a record compressed later shrinks in a leaf that keeps
/// its size, since entities are keyed by time-ordered ids and new ones go to the right of
/// the tree, never into the room left in old leaves.
///
/// A compressed record keeps the header of one as folded — the state hash and the rev,
/// which `projectionRev` and the digest read without decompressing — and its body is one
/// length-prefixed value:
///
/// ```
/// byte 0      0xC7 (where a record as folded has its state's encoding, whose first byte
///             is that encoding's format, 1)
/// varint      dictionary version (0: none)
/// varint      the body's length before compression
/// rest        one zstd frame of the body as folded: the state, then the status history
/// ```
///
/// The state hash is of the state's encoding, so compression changes no digest, and a
/// record expanded is byte for byte the record as folded (`rebuild --verify` compares
/// those). Appends, sync, imports, `rebuild` and the upgrade from an older format all
/// write records this way; a record that would not save `projectionMinimumSaving` bytes
/// stays as folded, and readers take either.
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

    /// The value to store for `record` as folded: compressed, or the record itself when
    /// compressing would not save `projectionMinimumSaving` bytes or zstd fails (out of
    /// memory). Readers take both, so a failed compression costs bytes, never the write.
    func stored(_ record: [UInt8], entity: EntityKey) -> [UInt8] {
        let compressed = try? EventLog.compressedProjection(
            record, entity: entity, dictionaryVersion: dictionaryVersion, dictionary: dictionary,
            compressor: compressor)
        return compressed.flatMap { $0 } ?? record
    }
}

extension EventLog {
    /// The records' dictionaries share the `dictionaries` table with the events': record
    /// dictionary n is version `recordDictionaryBase + n`, far above any the events reach.
    static let recordDictionaryBase: UInt32 = 0x8000_0000
    static let compressedProjectionMarker: UInt8 = 0xC7
    /// A compressed record must save at least this much to be kept compressed.
    static let projectionMinimumSaving = 32

    /// Where a record's body starts: after its state hash and rev.
    static func projectionBodyStart(_ value: [UInt8], entity: EntityKey) throws(CorruptDataError) -> Int {
        var reader = ByteReader(value)
        do {
            _ = try reader.ulid()
            _ = try reader.varint()
        } catch {
            throw CorruptDataError("projection record of \(entity) is truncated")
        }
        return reader.position
    }

    /// Whether the body at `start` is compressed: a length prefix, then the marker.
    private static func isCompressedBody(_ value: [UInt8], at start: Int) -> Bool {
        var reader = ByteReader(value, at: start)
        guard let length = try? reader.count(), length > 0, let first = try? reader.byte() else { return false }
        return first == compressedProjectionMarker
    }

    /// The record `value` of `entity` as folded: itself, or its body decompressed.
    func expanded(_ value: [UInt8], entity: EntityKey, txn: borrowing some TransactionReading & ~Copyable) throws
        -> ProjectionRecord
    {
        let start = try EventLog.projectionBodyStart(value, entity: entity)
        guard EventLog.isCompressedBody(value, at: start) else { return ProjectionRecord(bytes: value) }
        let (version, rawBytes, frame): (UInt32, Int, [UInt8])
        do throws(CorruptDataError) {
            var reader = ByteReader(value, at: start)
            let length = try reader.count()
            guard length == reader.remaining else { throw CorruptDataError("its body does not end where it says") }
            _ = try reader.byte()
            let rawVersion = try reader.varint()
            guard rawVersion <= UInt64(UInt32.max) else {
                throw CorruptDataError("its dictionary version is out of range")
            }
            let raw = try reader.varint()
            guard raw > 0, raw <= UInt64(StoreOptions.absoluteMaxEventBytes) * 4 else {
                throw CorruptDataError("it says its body takes \(raw) bytes")
            }
            (version, rawBytes, frame) = (UInt32(rawVersion), Int(raw), try reader.bytes(reader.remaining))
        } catch {
            throw CorruptDataError("the compressed projection record of \(entity) does not read: \(error.message)")
        }
        let dictionary = try dictionary(version, txn: txn)
        let body: [UInt8]
        do {
            body = try decompressors.withDecompressor { decompressor in
                try decompressor.decompress(frame, dictionary: dictionary, maxSize: rawBytes)
            }
        } catch {
            throw CorruptDataError("the compressed projection record of \(entity) does not decompress: \(error)")
        }
        guard body.count == rawBytes else {
            throw CorruptDataError(
                "the compressed projection record of \(entity) holds \(body.count) bytes, not the \(rawBytes) it says")
        }
        return ProjectionRecord(bytes: Array(value[..<start]) + body)
    }

    /// The record `value` compressed, or nil when it is compressed already, or would not
    /// save `projectionMinimumSaving` bytes.
    static func compressedProjection(
        _ value: [UInt8], entity: EntityKey, dictionaryVersion: UInt32, dictionary: CompressionDictionary?,
        compressor: Compressor
    ) throws -> [UInt8]? {
        let start = try projectionBodyStart(value, entity: entity)
        guard !isCompressedBody(value, at: start), value.count - start > projectionMinimumSaving else { return nil }
        var body: [UInt8] = [compressedProjectionMarker]
        body.appendVarint(UInt64(dictionaryVersion))
        body.appendVarint(value.count - start)
        try compressor.compress(Array(value[start...]), dictionary: dictionary, appendingTo: &body)
        var out = Array(value[..<start])
        out.appendLengthPrefixed(body)
        return out.count + projectionMinimumSaving <= value.count ? out : nil
    }
}
