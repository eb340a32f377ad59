/// A zstd dictionary, loaded once for compression and once for decompression.
///
/// Small records compress far better against a dictionary trained on similar records. Frames
/// do not name their dictionary, so the caller records which dictionary (version) it used.
///
/// This is `@unchecked Sendable` because zstd's digested dictionaries (`ZSTD_CDict`,
/// `ZSTD_DDict`) are read-only after creation and may be used by many contexts at once.
public final class CompressionDictionary: @unchecked Sendable {
    /// The dictionary as trained or stored.
    public let bytes: [UInt8]
    /// The digested dictionary for compression (`ZSTD_CDict`).
    let compressionHandle: OpaquePointer
    /// The digested dictionary for decompression (`ZSTD_DDict`).
    let decompressionHandle: OpaquePointer

    /// Loads `bytes` (a trained dictionary, or any raw content) for compression at `level`.
    ///
    /// With a dictionary, `level` replaces the compressor's own.
    /// The corresponding C functions are `ZSTD_createCDict` and `ZSTD_createDDict`.
    public init(bytes: [UInt8], level: Int32 = 3) throws {
        let compression = try Zstd.makeCompressionDictionary(bytes, level: level)
        do {
            decompressionHandle = try Zstd.makeDecompressionDictionary(bytes)
        } catch {
            Zstd.freeCompressionDictionary(compression)
            throw error
        }
        compressionHandle = compression
        self.bytes = bytes
    }

    /// The memory the digested dictionary for compression takes: its copy of the
    /// dictionary and its match-finding tables (`ZSTD_sizeof_CDict`).
    public var compressionMemoryBytes: Int { Zstd.memoryBytes(ofCompressionDictionary: compressionHandle) }

    deinit {
        Zstd.freeCompressionDictionary(compressionHandle)
        Zstd.freeDecompressionDictionary(decompressionHandle)
    }
}

/// Trains zstd dictionaries from sample records.
public enum DictionaryTrainer {
    /// The fewest samples worth training on.
    public static let minimumSampleCount = 16

    /// Trains a dictionary of at most `capacity` bytes from `samples`.
    ///
    /// zstd suggests a few thousand samples totalling about 100 times `capacity`.
    /// The corresponding C function is `ZDICT_trainFromBuffer`; with `quick`, which trains at
    /// one segment size instead of trying several (about a quarter of the time, for a
    /// dictionary that compresses about 1 % less well), `ZDICT_trainFromBuffer_fastCover`.
    public static func train(samples: [[UInt8]], capacity: Int, quick: Bool = false, level: Int32 = 3) throws
        -> [UInt8]
    {
        // ZDICT_DICTSIZE_MIN in zdict.h.
        guard capacity >= 256 else {
            throw ZstdError(
                operation: "ZDICT_trainFromBuffer", code: ZstdError.notEnoughSamples.code,
                message: "A dictionary needs a capacity of at least 256 bytes (got \(capacity)); raise it."
            )
        }
        guard samples.count >= minimumSampleCount else {
            throw ZstdError(
                operation: "ZDICT_trainFromBuffer", code: ZstdError.notEnoughSamples.code,
                message: "Training needs at least \(minimumSampleCount) samples (got \(samples.count)); "
                    + "collect more records first, or compress without a dictionary."
            )
        }
        return try Zstd.trainDictionary(samples: samples, capacity: capacity, quick: quick, level: level)
    }
}
