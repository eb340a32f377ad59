/// Compresses records into standard zstd frames, reusing one compression context.
///
/// Frames carry their content size and neither a checksum nor a dictionary ID.
///
/// - Important: Use a compressor from one thread at a time; keep one per writer. It is
///   `@unchecked Sendable` only so that its owner can hand it to the writer's thread.
public final class Compressor: @unchecked Sendable {
    /// The `ZSTD_CCtx`, reused for every frame.
    private let context: OpaquePointer

    /// Creates a compressor at `level` (zstd clamps it to its valid range).
    ///
    /// The corresponding C function is `ZSTD_createCCtx`.
    public init(level: Int32 = 3) {
        context = Zstd.makeCompressionContext(level: level)
    }

    deinit {
        Zstd.freeCompressionContext(context)
    }

    /// Compresses `input` into one frame, against `dictionary` when given.
    ///
    /// With a dictionary the dictionary's level applies. The corresponding C functions are
    /// `ZSTD_CCtx_refCDict` and `ZSTD_compress2`.
    public func compress(_ input: [UInt8], dictionary: CompressionDictionary?) throws -> [UInt8] {
        try Zstd.compress(context, input, dictionary: dictionary?.compressionHandle)
    }
}
