import Synchronization

/// Decompresses zstd frames without trusting them, reusing one decompression context.
///
/// A frame is decoded only when it is exactly one complete frame whose content fits the
/// caller's limit; anything else — a declared size over the limit, truncation, corruption,
/// trailing bytes, the wrong dictionary — throws `ZstdError`.
///
/// - Important: Use a decompressor from one thread at a time. It is `@unchecked Sendable`
///   so that `DecompressorPool` can lend it to one reader thread after another.
public final class Decompressor: @unchecked Sendable {
    /// The `ZSTD_DCtx`, reused for every frame.
    private let context: OpaquePointer

    /// Creates a decompressor that refuses frames needing a window over `2^windowLogMax` bytes.
    ///
    /// The window limit matters only for frames that do not declare their size; frames that do
    /// are decoded into a buffer of exactly that size. The corresponding C function is
    /// `ZSTD_createDCtx` with `ZSTD_d_windowLogMax`.
    public init(windowLogMax: Int32 = 20) {
        context = Zstd.makeDecompressionContext(windowLogMax: windowLogMax)
    }

    deinit {
        Zstd.freeDecompressionContext(context)
    }

    /// Decompresses `frame`, which must be one complete frame of at most `maxSize` bytes of content.
    ///
    /// The corresponding C functions are `ZSTD_decompress_usingDDict` for frames that declare
    /// their size (checked against `maxSize` before anything is allocated) and
    /// `ZSTD_decompressStream` for frames that do not (stopped once past `maxSize`).
    public func decompress(_ frame: [UInt8], dictionary: CompressionDictionary?, maxSize: Int) throws -> [UInt8] {
        try decompress(frame[...], dictionary: dictionary, maxSize: maxSize)
    }

    /// The same for a frame that is part of a larger value (a block's, after its header),
    /// read where it lies.
    public func decompress(_ frame: ArraySlice<UInt8>, dictionary: CompressionDictionary?, maxSize: Int) throws
        -> [UInt8]
    {
        guard let declared = try Decompressor.declaredSize(ofWhole: frame, maxSize: maxSize) else {
            return try Zstd.decompressStream(
                context, frame, dictionary: dictionary?.decompressionHandle, limit: maxSize
            )
        }
        return try Zstd.decompress(
            context, frame, dictionary: dictionary?.decompressionHandle, contentSize: Int(declared)
        )
    }

    /// Decompresses `frame`, which must be one complete frame, handing its content to
    /// `consume` one piece at a time (at most `ZSTD_DStreamOutSize()`, 128 KiB, each);
    /// `consume` returns false to stop, and nothing more of the frame is decoded.
    ///
    /// Returns true when the frame was decoded to its end (its checksum, if it has one,
    /// verified), false when `consume` stopped it. For content from a peer, where a tiny frame
    /// may declare or hold far more than the caller will take: the caller decides, piece by
    /// piece, how much it accepts. A declared size over `maxSize` is refused before anything
    /// is decoded. The corresponding C function is `ZSTD_decompressStream`.
    public func decompress(
        _ frame: [UInt8], dictionary: CompressionDictionary?, maxSize: Int,
        pieces consume: (UnsafeRawBufferPointer) -> Bool
    ) throws -> Bool {
        _ = try Decompressor.declaredSize(ofWhole: frame[...], maxSize: maxSize)
        return try Zstd.decompressPieces(
            context, frame[...], dictionary: dictionary?.decompressionHandle, consume: consume)
    }

    /// The content size `frame` declares (nil when it declares none), once it is known to be
    /// exactly one complete frame declaring at most `maxSize` bytes: what both ways of
    /// decompressing check before they decode anything.
    private static func declaredSize(ofWhole frame: ArraySlice<UInt8>, maxSize: Int) throws -> UInt64? {
        let frameSize = try Zstd.frameSize(frame)
        guard frameSize == frame.count else {
            throw ZstdError(
                operation: "ZSTD_findFrameCompressedSize", code: ZstdError.trailingData.code,
                message: "\(frame.count - frameSize) bytes follow the \(frameSize)-byte frame; \(Zstd.decodeHint)."
            )
        }
        guard let declared = try Zstd.declaredContentSize(frame) else { return nil }
        guard declared <= UInt64(max(maxSize, 0)) else {
            throw ZstdError(
                operation: "ZSTD_getFrameContentSize", code: ZstdError.contentTooLarge.code,
                message: "The frame declares \(declared) bytes of content, more than the \(maxSize) allowed."
            )
        }
        return declared
    }
}

/// Lends decompressors to concurrent readers, keeping a few idle ones for reuse.
public final class DecompressorPool: Sendable {
    /// The idle decompressors; a decompressor taken out belongs to one caller until it is returned.
    private let idle = Mutex<[Decompressor]>([])
    /// How many idle decompressors are kept; more are freed on return.
    private let maximumIdle: Int
    private let windowLogMax: Int32

    public init(maximumIdle: Int = 8, windowLogMax: Int32 = 20) {
        self.maximumIdle = maximumIdle
        self.windowLogMax = windowLogMax
    }

    /// Runs `body` with a decompressor no other thread uses until `body` returns.
    public func withDecompressor<R>(_ body: (Decompressor) throws -> R) rethrows -> R {
        let decompressor = idle.withLock { $0.popLast() } ?? Decompressor(windowLogMax: windowLogMax)
        defer {
            idle.withLock { idle in
                if idle.count < maximumIdle { idle.append(decompressor) }
            }
        }
        return try body(decompressor)
    }
}
