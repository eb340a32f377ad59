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
package enum BatchCodec {
    /// A batch holds at most this many events…
    package static let maxEvents = 1000
    /// …and stops growing once its records pass this many bytes.
    package static let targetBytes = 1 << 20

    package static func encode(_ events: [ReplicatedEvent], compressor: Compressor) throws(SyncError) -> [UInt8] {
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
    ///
    /// The records are read as they decompress and the decoding stops at the first that is
    /// wrong: one over `maxEventBytes` (by its length, before its bytes are kept), bytes
    /// past the `count` records the header claims, or more content than `count` records may
    /// hold (capped at `Frame.maxPayloadBytes`). A small frame that expands to megabytes of
    /// records nobody announced costs one output chunk, not the whole expansion.
    package static func decode(_ payload: [UInt8], decompressor: Decompressor, maxEventBytes: Int) throws(SyncError)
        -> [ReplicatedEvent]
    {
        guard payload.count >= 4 else { throw corrupt("it is \(payload.count) bytes, shorter than its header") }
        let count = Int(readBigEndian32(payload, at: 0))
        guard count <= maxEvents * 10 else { throw corrupt("it claims \(count) events") }
        var records = RecordReader(
            count: count, maxEventBytes: maxEventBytes,
            maxBytes: min(Frame.maxPayloadBytes, count * (maxEventBytes + recordHeaderBytes)))
        let finished: Bool
        do {
            finished = try decompressor.decompress(Array(payload[4...]), dictionary: nil, maxSize: records.maxBytes) {
                records.take($0)
            }
        } catch {
            throw corrupt("its zstd frame does not decompress: \(error)")
        }
        if let failure = records.failure { throw corrupt(failure) }
        precondition(finished, "the batch decoder stopped without a reason")
        guard records.pending.isEmpty else {
            throw corrupt(
                records.pending.count < recordHeaderBytes
                    ? "a record is cut short at byte \(records.consumed)" : "a record's length runs past the batch")
        }
        guard records.events.count == count else {
            throw corrupt("it holds \(records.events.count) records, not the \(count) it claims")
        }
        return records.events
    }

    /// A record's id and length.
    package static let recordHeaderBytes = 20

    /// Splits decompressed content into records as it arrives.
    private struct RecordReader {
        let count: Int
        let maxEventBytes: Int
        let maxBytes: Int
        var events: [ReplicatedEvent] = []
        /// Content received but not yet a whole record.
        var pending: [UInt8] = []
        /// Bytes of content made into records.
        var consumed = 0
        /// Why the batch is refused; set when `take` stops the decompression.
        var failure: String?

        init(count: Int, maxEventBytes: Int, maxBytes: Int) {
            self.count = count
            self.maxEventBytes = maxEventBytes
            self.maxBytes = maxBytes
            events.reserveCapacity(min(count, BatchCodec.maxEvents))
        }

        /// Takes one piece of content; false (with `failure` set) stops the decompression.
        mutating func take(_ piece: UnsafeRawBufferPointer) -> Bool {
            guard events.count < count else {
                return fail("it holds more than the \(count) records it claims")
            }
            guard piece.count <= maxBytes - consumed - pending.count else {
                return fail("its records pass \(maxBytes) bytes, more than \(count) records may hold")
            }
            pending.append(contentsOf: piece)
            var offset = 0
            while pending.count - offset >= BatchCodec.recordHeaderBytes {
                let length = Int(readBigEndian32(pending, at: offset + 16))
                guard length <= maxEventBytes else {
                    return fail(
                        "the record at byte \(consumed + offset) claims \(length) bytes, over the \(maxEventBytes) of the largest event"
                    )
                }
                guard length <= pending.count - offset - BatchCodec.recordHeaderBytes else { break }
                let id = ULID(bytes: pending, at: offset)!
                let start = offset + BatchCodec.recordHeaderBytes
                events.append(ReplicatedEvent(id: id, json: Array(pending[start..<(start + length)])))
                offset = start + length
                if events.count == count, offset < pending.count {
                    return fail("it holds more than the \(count) records it claims")
                }
            }
            pending.removeFirst(offset)
            consumed += offset
            return true
        }

        private mutating func fail(_ why: String) -> Bool {
            failure = why
            return false
        }
    }

    private static func corrupt(_ what: String) -> SyncError {
        SyncError(.corruptBatch, "the peer sent a damaged batch (\(what)); nothing of it was kept")
    }
}
