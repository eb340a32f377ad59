import EventStore
import FuzzDriver
import FuzzEntries

/// The stored-value fuzzer: one stored event value per input (see `FuzzEntry.storedValue`).
@main
enum FuzzStoredValue {
    /// The store's dictionary table as the fuzzer sees it: version 1 is the sample
    /// dictionary the seeds were compressed with.
    static let dictionaries: [UInt32: CompressionDictionary] = {
        guard let dictionary = try? FuzzEntry.sampleDictionary() else {
            fatalError("the sample dictionary does not train")
        }
        return [1: dictionary]
    }()
    /// One decompressor for every input, as a reader reuses one.
    static let decompressor = Decompressor()

    static func main() {
        _ = (dictionaries, decompressor)
        FuzzDriver.run { data, size in
            let bytes = FuzzDriver.bytes(data, size)
            _ = try? FuzzEntry.storedValue(
                bytes, dictionaries: FuzzStoredValue.dictionaries, decompressor: FuzzStoredValue.decompressor)
            return 0
        }
    }
}
