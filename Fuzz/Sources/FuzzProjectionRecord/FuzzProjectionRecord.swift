import EventStore
import FuzzDriver
import FuzzEntries

/// The projection-record fuzzer: one stored record, or one record body to compress first, per
/// input (see `FuzzEntry.projectionRecord`).
@main
enum FuzzProjectionRecord {
    /// The store's dictionary table as the fuzzer sees it: the sample dictionary the seeds
    /// were compressed with, as the events' version 1 and as the records' first.
    static let dictionaries: [UInt32: CompressionDictionary] = {
        guard let dictionaries = try? FuzzEntry.sampleRecordDictionaries() else {
            fatalError("the sample dictionary does not train")
        }
        return dictionaries
    }()
    /// One decompressor and one compressor for every input, as the store reuses them.
    static let decompressor = Decompressor()
    static let compressor = Compressor(level: 3, levelWithoutDictionary: StoreOptions.levelWithoutDictionary)

    static func main() {
        _ = (dictionaries, decompressor, compressor)
        FuzzDriver.run { data, size in
            let bytes = FuzzDriver.bytes(data, size)
            _ = try? FuzzEntry.projectionRecord(
                bytes, dictionaries: FuzzProjectionRecord.dictionaries, decompressor: FuzzProjectionRecord.decompressor,
                compressor: FuzzProjectionRecord.compressor)
            return 0
        }
    }
}
