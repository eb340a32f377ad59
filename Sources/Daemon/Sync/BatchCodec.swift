import EventStore
import Projections

/// A batch frame's payload:
///
///     count (4 bytes, big-endian) | one zstd frame of `count` records
///
/// and each record, before compression:
///
///     id (16 bytes, the ULID's binary form) | length (4 bytes, big-endian) | canonical JSON without the id
///
/// The frame's CRC-32C covers the payload; zstd checks the frame itself. Decoding
/// rejects the whole batch on any inconsistency, so nothing of a damaged batch is kept.
enum BatchCodec {
    /// A batch holds at most this many events…
    static let maxEvents = 1000
    /// …and stops growing once its records pass this many bytes.
    static let targetBytes = 1 << 20

    static func encode(_ events: [ReplicatedEvent], compressor: Compressor) throws(SyncError) -> [UInt8] {
        var records: [UInt8] = []
        records.reserveCapacity(events.reduce(0) { $0 + $1.json.count + 20 })
        for event in events {
            // Replication reads events with their ids beside them (`replicationEvents`).
            guard let id = event.id else { preconditionFailure("a replicated event without its id") }
            id.append(to: &records)
            appendBigEndian(UInt32(event.json.count), to: &records)
            records.append(contentsOf: event.json)
        }
        var out: [UInt8] = []
        appendBigEndian(UInt32(events.count), to: &out)
        do {
            out.append(contentsOf: try compressor.compress(records, dictionary: nil))
        } catch {
            throw SyncError(.storage, "compressing a batch failed: \(error)")
        }
        return out
    }

    /// The events of a batch payload; `maxEventBytes` bounds each record. The receiver
    /// passes the largest size any store accepts, not its own limit: an event over its own
    /// limit is a dead letter (`too_large`), not a reason to refuse the batch around it.
    static func decode(_ payload: [UInt8], decompressor: Decompressor, maxEventBytes: Int) throws(SyncError)
        -> [ReplicatedEvent]
    {
        guard payload.count >= 4 else { throw corrupt("it is \(payload.count) bytes, shorter than its header") }
        let count = Int(readBigEndian32(payload, at: 0))
        guard count <= maxEvents * 10 else { throw corrupt("it claims \(count) events") }
        let records: [UInt8]
        do {
            records = try decompressor.decompress(
                Array(payload[4...]), dictionary: nil, maxSize: min(Frame.maxPayloadBytes, count * (maxEventBytes + 20))
            )
        } catch {
            throw corrupt("its zstd frame does not decompress: \(error)")
        }
        var events: [ReplicatedEvent] = []
        events.reserveCapacity(count)
        var offset = 0
        while offset < records.count {
            guard records.count - offset >= 20 else { throw corrupt("a record is cut short at byte \(offset)") }
            let id = ULID(bytes: records, at: offset)!
            let length = Int(readBigEndian32(records, at: offset + 16))
            offset += 20
            guard length <= records.count - offset else { throw corrupt("a record's length runs past the batch") }
            events.append(ReplicatedEvent(id: id, json: Array(records[offset..<(offset + length)])))
            offset += length
        }
        guard events.count == count else {
            throw corrupt("it holds \(events.count) records, not the \(count) it claims")
        }
        return events
    }

    private static func corrupt(_ what: String) -> SyncError {
        SyncError(.corruptBatch, "the peer sent a damaged batch (\(what)); nothing of it was kept")
    }
}
