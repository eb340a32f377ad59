import EventStore

/// The payload of a `dictionary` frame (`Frame.dictionaryCapability`): the sender's
/// events' dictionary and its projection records' one, each behind its length.
///
///     events length (4, big-endian) | events' dictionary | records length (4; 0: none) | records' dictionary
package enum DictionaryFrame {
    package static let maxPayloadBytes = 8 + 2 * SharedDictionaries.maxBytes

    package static func encode(_ dictionaries: SharedDictionaries) -> [UInt8] {
        let records = dictionaries.records ?? []
        var out: [UInt8] = []
        out.reserveCapacity(8 + dictionaries.events.count + records.count)
        for part in [dictionaries.events, records] {
            appendBigEndian(UInt32(part.count), to: &out)
            out.append(contentsOf: part)
        }
        return out
    }

    /// The two dictionaries; lengths that do not add up to the payload, an empty events'
    /// dictionary or one over `SharedDictionaries.maxBytes` are a protocol error. What
    /// the bytes are is checked when they are loaded (`SharedDictionaries.loaded(level:)`).
    package static func decode(_ payload: [UInt8]) throws(SyncError) -> SharedDictionaries {
        var position = 0
        func part() throws(SyncError) -> [UInt8] {
            guard payload.count - position >= 4 else { throw malformed(payload.count) }
            let length = Int(readBigEndian32(payload, at: position))
            position += 4
            guard length <= SharedDictionaries.maxBytes, length <= payload.count - position else {
                throw malformed(payload.count)
            }
            defer { position += length }
            return Array(payload[position..<position + length])
        }
        let events = try part()
        let records = try part()
        guard position == payload.count, !events.isEmpty else { throw malformed(payload.count) }
        return SharedDictionaries(events: events, records: records.isEmpty ? nil : records)
    }

    private static func malformed(_ size: Int) -> SyncError {
        SyncError(
            .protocolError,
            "the peer's dictionary frame (\(size) bytes) is not two dictionaries behind their lengths, the first not empty, each at most \(SharedDictionaries.maxBytes) bytes"
        )
    }
}
