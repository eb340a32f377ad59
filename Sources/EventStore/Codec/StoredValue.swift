import Projections

/// The on-disk form of an event value: a small header, then one standard zstd frame.
///
/// ```
/// byte 0      format (1)
/// varint      dictionary version the frame was compressed with (0: none)
/// rest        zstd frame of the event's canonical JSON without its "id" (the key holds it)
/// ```
/// Every dictionary ever used stays in the `dictionaries` table, so a value stays
/// readable however often the current dictionary changes.
package enum StoredValue {
    static let format: UInt8 = 1

    package static func encode(
        payload: [UInt8], dictionaryVersion: UInt32, dictionary: CompressionDictionary?, compressor: Compressor
    ) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + 80)
        out.append(format)
        out.appendVarint(UInt64(dictionaryVersion))
        try compressor.compress(payload, dictionary: dictionary, appendingTo: &out)
        return out
    }

    /// Splits a value into its dictionary version and frame.
    package static func decode(_ value: [UInt8]) throws(CorruptDataError) -> (dictionaryVersion: UInt32, frame: [UInt8]) {
        var reader = ByteReader(value)
        let format = try reader.byte()
        guard format == StoredValue.format else {
            throw CorruptDataError(
                "event value format \(format) is not known (this version reads format \(StoredValue.format))")
        }
        let version = try reader.varint()
        guard version <= UInt64(UInt32.max) else { throw CorruptDataError("dictionary version out of range") }
        return (UInt32(version), try reader.bytes(reader.remaining))
    }
}
