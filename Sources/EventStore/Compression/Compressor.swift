/// Compresses records into standard zstd frames, reusing one compression context.
///
/// Frames carry their content size and neither a checksum nor a dictionary ID.
///
/// - Important: Use a compressor from one thread at a time; keep one per writer. It is
///   `@unchecked Sendable` only so that its owner can hand it to the writer's thread.
public final class Compressor: @unchecked Sendable {
    /// The `ZSTD_CCtx`, reused for every frame.
    private let context: OpaquePointer
    /// The dictionary the context references, held so it outlives the reference. Changing
    /// it costs a reset, so it stays referenced from one frame to the next.
    private var referenced: CompressionDictionary?

    /// The level of frames compressed without a dictionary.
    private let levelWithoutDictionary: Int32

    /// Whether the context ends frames with a checksum of their content now.
    private var checksumming = false

    /// Creates a compressor at `level` (zstd clamps it to its valid range).
    ///
    /// `levelWithoutDictionary` (default: `level`) is for frames without a dictionary. For
    /// inputs of a few hundred bytes, such as single events, a positive level spends about
    /// 3 µs per frame building entropy tables that save a few percent of the size; with a
    /// dictionary the tables come from it, and without one level -1 skips them.
    ///
    /// The corresponding C function is `ZSTD_createCCtx`.
    public init(level: Int32 = 3, levelWithoutDictionary: Int32? = nil) {
        self.levelWithoutDictionary = levelWithoutDictionary ?? level
        context = Zstd.makeCompressionContext(level: self.levelWithoutDictionary)
    }

    deinit {
        Zstd.freeCompressionContext(context)
    }

    /// Compresses `input` into one frame, against `dictionary` when given.
    ///
    /// With a dictionary the dictionary's level applies. The corresponding C functions are
    /// `ZSTD_CCtx_refCDict` and `ZSTD_compress2`.
    public func compress(_ input: [UInt8], dictionary: CompressionDictionary?) throws -> [UInt8] {
        var frame: [UInt8] = []
        try compress(input, dictionary: dictionary, appendingTo: &frame)
        return frame
    }

    /// Compresses `input` into one frame appended to `out`, so a caller that prefixes a
    /// header writes the value in one buffer. With `checksum`, the frame ends with zstd's
    /// checksum of its content (4 bytes), which every decompression of it verifies.
    public func compress(
        _ input: [UInt8], dictionary: CompressionDictionary?, checksum: Bool = false, appendingTo out: inout [UInt8]
    ) throws {
        if checksum != checksumming {
            try Zstd.setChecksum(context, checksum)
            checksumming = checksum
        }
        if dictionary !== referenced {
            // The old dictionary stays held until the new reference is in place: if that
            // fails, the context points at one or the other, both alive.
            try Zstd.reference(context, dictionary: dictionary?.compressionHandle, level: levelWithoutDictionary)
            referenced = dictionary
        }
        try Zstd.compress(context, input, appendingTo: &out)
    }
}
