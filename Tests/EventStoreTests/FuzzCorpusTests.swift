import Foundation
import FuzzEntries
import Projections
import TestSupport
import Testing

@testable import EventStore

/// The event, stored-value and projection-record fuzzers' seeds and regressions (Fuzz/Corpus, Fuzz/Regressions),
/// replayed through the fuzzers' entry points: each input must end in a value or a clear
/// error, never a crash. docs/fuzzing.md tells how to add a regression.
@Suite struct FuzzCorpusTests {
    @Test func eventSeedsDecodeOrFailClearly() {
        let seeds = FuzzInputs.files("Corpus", "event")
        #expect(seeds.count >= 10)
        var decoded = 0
        for (name, bytes) in seeds {
            do {
                _ = try FuzzEntry.event(bytes)
                decoded += 1
            } catch {
                #expect(name.hasPrefix("invalid"), "\(name): \(error)")
                #expect(!error.message.isEmpty)
            }
            _ = try? FuzzEntry.canonicalJSON(Array(bytes.dropFirst()))
        }
        #expect(decoded >= 10)
    }

    @Test func eventRegressionsFailClearly() {
        for (name, bytes) in FuzzInputs.files("Regressions", "event") {
            do {
                _ = try FuzzEntry.event(bytes)
            } catch {
                #expect(!error.message.isEmpty, "\(name)")
            }
            _ = try? FuzzEntry.canonicalJSON(Array(bytes.dropFirst()))
        }
    }

    @Test func storedValueSeedsAndRegressions() throws {
        // `make fuzz-seeds` sets it: the seeds are written afresh, then replayed as always.
        if ProcessInfo.processInfo.environment["EVSTORE_WRITE_FUZZ_SEEDS"] != nil { try writeStoredValueSeeds() }
        let dictionaries: [UInt32: CompressionDictionary] = [1: try FuzzEntry.sampleDictionary()]
        let decompressor = Decompressor()
        replay("stored-value", valid: "value") { bytes in
            let events = try FuzzEntry.storedValue(bytes, dictionaries: dictionaries, decompressor: decompressor)
            return (events, !events.isEmpty)
        }
    }

    /// Replays the seeds and regressions of `fuzzer` through `decode`: those whose name
    /// starts with `valid` must decode to something it finds sound, the others must fail
    /// with a message.
    func replay(_ fuzzer: String, valid: String, _ decode: ([UInt8]) throws -> (Any, Bool)) {
        let seeds = FuzzInputs.files("Corpus", fuzzer)
        #expect(seeds.count >= 10)
        for (name, bytes) in seeds + FuzzInputs.files("Regressions", fuzzer) {
            do {
                let (decoded, sound) = try decode(bytes)
                #expect(name.hasPrefix(valid), "\(name) decoded to \(decoded)")
                #expect(sound, "\(name) decoded to \(decoded)")
            } catch {
                #expect(!name.hasPrefix(valid), "\(name): \(error)")
                #expect(!"\(error)".isEmpty)
            }
        }
    }

    /// Writes the stored-value seeds into Fuzz/Corpus/stored-value: not a test of its own,
    /// run by `storedValueSeedsAndRegressions` when EVSTORE_WRITE_FUZZ_SEEDS is set (`make
    /// fuzz-seeds`, docs/fuzzing.md).
    func writeStoredValueSeeds() throws {
        let directory = FuzzInputs.directory.appendingPathComponent("Corpus/stored-value")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let dictionary = try FuzzEntry.sampleDictionary()
        let compressor = Compressor(level: 3, levelWithoutDictionary: StoreOptions.levelWithoutDictionary)
        var seeds: [(String, [UInt8])] = []
        for (index, json) in FuzzEntry.sampleEvents(count: 8).enumerated() {
            let event = try EventCodec.decodeStored(json, id: FuzzEntry.sampleID)
            seeds.append(
                (
                    "value-plain-\(index)",
                    try FuzzEntry.encodeStoredValue(
                        event, dictionaryVersion: 0, dictionary: nil, compressor: compressor)
                ))
            seeds.append(
                (
                    "value-dictionary-\(index)",
                    try FuzzEntry.encodeStoredValue(
                        event, dictionaryVersion: 1, dictionary: dictionary, compressor: compressor)
                ))
        }
        let event = try EventCodec.decodeStored(FuzzEntry.sampleEvents(count: 1)[0], id: FuzzEntry.sampleID)
        var unknown = try FuzzEntry.encodeStoredValue(
            event, dictionaryVersion: 0, dictionary: nil, compressor: compressor)
        unknown[0] = 3
        seeds.append(("bad-format", unknown))
        // Blocks of events (store format 7): of one event and of several, with and without
        // the dictionary, and damaged ones.
        let events = try FuzzEntry.sampleEvents(count: 40).enumerated().map { index, json in
            try EventCodec.decodeStored(json, id: ULID(high: FuzzEntry.sampleID.high, low: UInt64(index)))
        }
        for (count, version) in [(1, 0), (1, 1), (8, 0), (40, 1)] as [(Int, UInt32)] {
            seeds.append(
                (
                    "value-block-\(count)-\(version == 0 ? "plain" : "dictionary")",
                    try FuzzEntry.encodeBlock(
                        Array(events.prefix(count)), dictionaryVersion: version,
                        dictionary: version == 0 ? nil : dictionary,
                        compressor: compressor)
                ))
        }
        let block = try FuzzEntry.encodeBlock(
            Array(events.prefix(8)), dictionaryVersion: 0, dictionary: nil, compressor: compressor)
        var miscounted = block
        miscounted[2] = 9  // the count: 9 records said, 8 held
        seeds.append(("bad-block-count", miscounted))
        seeds.append(("bad-block-truncated", Array(block.dropLast(5))))
        var oversized = block
        oversized[3] = 0xFF  // the records' length: more than a block of several may hold
        seeds.append(("bad-block-length", oversized))
        seeds.append(
            (
                "bad-missing-dictionary",
                try FuzzEntry.encodeStoredValue(
                    event, dictionaryVersion: 300, dictionary: dictionary, compressor: compressor)
            ))
        let plain = try FuzzEntry.encodeStoredValue(
            event, dictionaryVersion: 0, dictionary: nil, compressor: compressor)
        seeds.append(("bad-truncated", Array(plain.dropLast(3))))
        for (name, bytes) in seeds {
            try Data(bytes).write(to: directory.appendingPathComponent(name))
        }
    }

    @Test func projectionRecordSeedsAndRegressions() throws {
        if ProcessInfo.processInfo.environment["EVSTORE_WRITE_FUZZ_SEEDS"] != nil { try writeProjectionRecordSeeds() }
        let dictionaries = try FuzzEntry.sampleRecordDictionaries()
        let decompressor = Decompressor()
        let compressor = Compressor(level: 3, levelWithoutDictionary: StoreOptions.levelWithoutDictionary)
        replay("projection-record", valid: "record") { bytes in
            let state = try FuzzEntry.projectionRecord(
                bytes, dictionaries: dictionaries, decompressor: decompressor, compressor: compressor)
            return (state, state.eventCount > 0)
        }
    }

    /// Writes the projection-record seeds into Fuzz/Corpus/projection-record (run by
    /// `projectionRecordSeedsAndRegressions` when EVSTORE_WRITE_FUZZ_SEEDS is set): records
    /// of states folded from the sample events, as the store writes them, with and without a
    /// dictionary, as folded, as bodies for the fuzzer to compress, and damaged ones.
    func writeProjectionRecordSeeds() throws {
        let directory = FuzzInputs.directory.appendingPathComponent("Corpus/projection-record")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let dictionaries = try FuzzEntry.sampleRecordDictionaries()
        let recordVersion = EventLog.recordDictionaryBase + 1
        let compressor = Compressor(level: 3, levelWithoutDictionary: StoreOptions.levelWithoutDictionary)
        let events = try FuzzEntry.sampleEvents(count: 60).enumerated().map { index, json in
            let event = try EventCodec.decodeStored(json, id: ULID(high: FuzzEntry.sampleID.high, low: UInt64(index)))
            return Event(
                id: event.id, origin: event.origin, entity: FuzzEntry.sampleEntity, body: event.body, key: event.key,
                by: event.by, at: event.at)
        }
        var seeds: [(String, [UInt8])] = []
        for count in [1, 6, 30, 60] {
            let folded = Array(events.prefix(count))
            let state = Projection.fold(FuzzEntry.sampleEntity, folded)
            let history = Projection.statusHistory(FuzzEntry.sampleEntity, folded)
            for version in [0, recordVersion] {
                let value = try FuzzEntry.encodeProjection(
                    folded, rev: UInt64(count), dictionaryVersion: version, dictionary: dictionaries[version],
                    compressor: compressor)
                seeds.append(("record-\(count)-\(version == 0 ? "plain" : "dictionary")", [0] + value))
            }
            let record = EventLog.projectionRecord(state, rev: UInt64(count), history: history).record
            seeds.append(("record-\(count)-folded", [0, EventLog.foldedProjectionForm] + record))
            // The body alone (state and history), which the fuzzer compresses: rev 5, with
            // and without the records' dictionary.
            let body = try ProjectionRecord(bytes: record).revAndBody(entity: FuzzEntry.sampleEntity).body
            seeds.append(("record-\(count)-body-plain", [5 << 2 | 1] + body))
            seeds.append(("record-\(count)-body-dictionary", [5 << 2 | 3] + body))
        }
        let state = Projection.fold(FuzzEntry.sampleEntity, events)
        let outOfRecord = try EventLog.storedProjection(
            state, rev: 60, history: nil, dictionaryVersion: recordVersion, dictionary: dictionaries[recordVersion],
            compressor: compressor)
        seeds.append(("record-history-in-table", [0] + outOfRecord))
        let compressed = try FuzzEntry.encodeProjection(
            events, rev: 60, dictionaryVersion: recordVersion, dictionary: dictionaries[recordVersion],
            compressor: compressor)
        seeds.append(("bad-truncated", [0] + compressed.dropLast(4)))
        var unknown = compressed
        unknown[0] = 0x42
        seeds.append(("bad-form", [0] + unknown))
        var missing = compressed
        missing[2] = 2 * 5 + 1  // the events' dictionary 5, which the store does not hold
        seeds.append(("bad-missing-dictionary", [0] + missing))
        seeds.append(("bad-body", [1, 0x05, 0xFF, 0xFF, 0x00, 0x01]))
        seeds.append(("bad-empty", [0]))
        for (name, bytes) in seeds {
            try Data(bytes).write(to: directory.appendingPathComponent(name))
        }
    }
}
