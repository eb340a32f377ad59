import CZstd

/// Every call into libzstd goes through here.
///
/// Each wrapper checks the `size_t` result with `ZSTD_isError` and throws `ZstdError`, so
/// nothing above this file sees a raw result or a C buffer struct.
enum Zstd {
    /// What a decoding failure usually means, for the message.
    static let decodeHint = "the stored frame is damaged or truncated, or needs a different dictionary (or none)"

    /// Returns `result` when it is not an error code.
    @discardableResult
    static func check(_ result: Int, _ operation: String, hint: String) throws(ZstdError) -> Int {
        guard ZSTD_isError(result) != 0 else { return result }
        let name = String(cString: ZSTD_getErrorName(result))
        throw ZstdError(operation: operation, code: -result, message: "\(name): \(hint).")
    }

    // MARK: Compression

    /// A compression context writing standard frames with the content size, no checksum and
    /// no dictionary ID.
    static func makeCompressionContext(level: Int32) -> OpaquePointer {
        guard let context = ZSTD_createCCtx() else { fatalError("ZSTD_createCCtx: out of memory") }
        for (parameter, value) in [
            (ZSTD_c_compressionLevel, level),  // clamped by zstd to its valid range
            (ZSTD_c_contentSizeFlag, 1),
            (ZSTD_c_checksumFlag, 0),
            (ZSTD_c_dictIDFlag, 0),
        ] {
            let result = ZSTD_CCtx_setParameter(context, parameter, value)
            precondition(ZSTD_isError(result) == 0, "ZSTD_CCtx_setParameter failed for a constant parameter")
        }
        return context
    }

    static func freeCompressionContext(_ context: OpaquePointer) {
        ZSTD_freeCCtx(context)
    }

    /// Makes `dictionary` (a `ZSTD_CDict`, or nil for none) the one the context compresses
    /// every following frame with. The context only points at it: the caller keeps it alive
    /// for as long as it stays referenced.
    /// `level` is the level of frames without a dictionary; a dictionary brings its own.
    static func reference(_ context: OpaquePointer, dictionary: OpaquePointer?, level: Int32) throws(ZstdError) {
        let hint = "the dictionary could not be used"
        try check(ZSTD_CCtx_reset(context, ZSTD_reset_session_only), "ZSTD_CCtx_reset", hint: hint)
        try check(ZSTD_CCtx_refCDict(context, dictionary), "ZSTD_CCtx_refCDict", hint: hint)
        if dictionary == nil {
            try check(
                ZSTD_CCtx_setParameter(context, ZSTD_c_compressionLevel, level), "ZSTD_CCtx_setParameter", hint: hint)
        }
    }

    /// Whether the frames the context compresses from now on end with zstd's checksum of
    /// their content (the low 4 bytes of its XXH64), which decompression then verifies.
    static func setChecksum(_ context: OpaquePointer, _ on: Bool) throws(ZstdError) {
        try check(
            ZSTD_CCtx_setParameter(context, ZSTD_c_checksumFlag, on ? 1 : 0), "ZSTD_CCtx_setParameter",
            hint: "the checksum could not be set")
    }

    /// Compresses `input` into one frame appended to `out`, with the referenced dictionary.
    static func compress(_ context: OpaquePointer, _ input: [UInt8], appendingTo out: inout [UInt8])
        throws(ZstdError)
    {
        let bound = try check(ZSTD_compressBound(input.count), "ZSTD_compressBound", hint: "the input is too large")
        // zstd writes straight into the array's spare capacity, room for the worst case; only
        // the frame's bytes are counted in. Appending zeros to write over cost a temporary
        // array of `bound` bytes, filled, copied and trimmed, for every frame.
        var result = 0
        out.append(addingCapacity: bound) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                result = input.withUnsafeBytes { input in
                    ZSTD_compress2(context, buffer.baseAddress, buffer.count, input.baseAddress, input.count)
                }
                if ZSTD_isError(result) == 0 { initialized = result }
            }
        }
        try check(result, "ZSTD_compress2", hint: "the input could not be compressed")
    }

    // MARK: Dictionaries

    /// A digested dictionary for compression at `level`, its match-finding tables sized to
    /// the dictionary (`dictionaryTableParameters`).
    static func makeCompressionDictionary(_ bytes: [UInt8], level: Int32) throws(ZstdError) -> OpaquePointer {
        let parameters = dictionaryTableParameters(level: level, dictionaryBytes: bytes.count)
        let dictionary = bytes.withUnsafeBytes {
            ZSTD_createCDict_advanced(
                $0.baseAddress, $0.count, ZSTD_dlm_byCopy, ZSTD_dct_auto, parameters,
                ZSTD_customMem(customAlloc: nil, customFree: nil, opaque: nil))
        }
        guard let dictionary else {
            throw ZstdError(
                operation: "ZSTD_createCDict_advanced", code: ZstdError.invalidDictionary.code,
                message: "zstd could not load the \(bytes.count)-byte dictionary; it is damaged or memory ran out."
            )
        }
        return dictionary
    }

    /// The parameters `ZSTD_createCDict` would take for `level` and a dictionary of
    /// `dictionaryBytes`, with the hash tables of the fast strategies (levels 1 to 4 for a
    /// dictionary of tens of KiB) no larger than the dictionary has positions to fill.
    ///
    /// zstd sizes a dictionary's tables as for an input of 128 KiB: 384 KiB at level 3 for a
    /// 32 KiB dictionary, mostly empty. Every frame compressed with the dictionary looks
    /// positions up in them, and a commit of a few events, between two of the disk's
    /// flushes, finds them out of the cache. Capped to the dictionary (the hash table a slot
    /// for every two of its positions, the second table half that), they take 96 KiB, and
    /// the workload's blocks and records compress to the same size within a tenth of a byte
    /// an event (docs/performance.md, "A dictionary's tables sized to the dictionary").
    static func dictionaryTableParameters(level: Int32, dictionaryBytes: Int) -> ZSTD_compressionParameters {
        var parameters = ZSTD_getCParams(level, 0, dictionaryBytes)
        guard parameters.strategy.rawValue <= ZSTD_dfast.rawValue else { return parameters }
        // log2 of the dictionary's size, rounded up, less one: 14 for 32 KiB.
        let sizeLog = UInt32(Int.bitWidth - (max(dictionaryBytes, 2) - 1).leadingZeroBitCount)
        let hashLog = max(UInt32(ZSTD_HASHLOG_MIN), sizeLog - 1)
        parameters.hashLog = min(parameters.hashLog, hashLog)
        parameters.chainLog = min(parameters.chainLog, max(UInt32(ZSTD_CHAINLOG_MIN), hashLog - 1))
        return parameters
    }

    static func memoryBytes(ofCompressionDictionary dictionary: OpaquePointer) -> Int {
        ZSTD_sizeof_CDict(dictionary)
    }

    static func makeDecompressionDictionary(_ bytes: [UInt8]) throws(ZstdError) -> OpaquePointer {
        let dictionary = bytes.withUnsafeBytes { ZSTD_createDDict($0.baseAddress, $0.count) }
        guard let dictionary else {
            throw ZstdError(
                operation: "ZSTD_createDDict", code: ZstdError.invalidDictionary.code,
                message: "zstd could not load the \(bytes.count)-byte dictionary; it is damaged or memory ran out."
            )
        }
        return dictionary
    }

    static func freeCompressionDictionary(_ dictionary: OpaquePointer) {
        ZSTD_freeCDict(dictionary)
    }

    static func freeDecompressionDictionary(_ dictionary: OpaquePointer) {
        ZSTD_freeDDict(dictionary)
    }

    /// Trains a dictionary of at most `capacity` bytes from `samples`: with zstd's default
    /// trainer, which tries several segment sizes, or, `quick`, with one fixed segment size
    /// (`quickSegmentSize`) for a dictionary wanted at once, for `level`.
    static func trainDictionary(samples: [[UInt8]], capacity: Int, quick: Bool = false, level: Int32 = 3)
        throws(ZstdError) -> [UInt8]
    {
        let sizes = samples.map(\.count)
        // Each sample copied whole: `Array(samples.joined())` went through the flattened
        // sequence a byte at a time, some 17 million instructions for a first training.
        var joined: [UInt8] = []
        joined.reserveCapacity(sizes.reduce(0, +))
        for sample in samples { joined.append(contentsOf: sample) }
        var result = 0
        let operation = quick ? "ZDICT_trainFromBuffer_fastCover" : "ZDICT_trainFromBuffer"
        let dictionary = [UInt8](unsafeUninitializedCapacity: capacity) { buffer, count in
            result = joined.withUnsafeBytes { joined in
                sizes.withUnsafeBufferPointer { sizes in
                    if quick {
                        var parameters = ZDICT_fastCover_params_t()
                        parameters.k = quickSegmentSize
                        parameters.d = 8
                        parameters.f = 20
                        parameters.accel = 1
                        parameters.zParams.compressionLevel = level
                        return ZDICT_trainFromBuffer_fastCover(
                            buffer.baseAddress, capacity, joined.baseAddress, sizes.baseAddress,
                            UInt32(sizes.count), parameters)
                    }
                    return ZDICT_trainFromBuffer(
                        buffer.baseAddress, capacity, joined.baseAddress, sizes.baseAddress, UInt32(sizes.count)
                    )
                }
            }
            count = ZDICT_isError(result) != 0 ? 0 : result
        }
        guard ZDICT_isError(result) == 0 else {
            let name = String(cString: ZDICT_getErrorName(result))
            throw ZstdError(
                operation: operation, code: -result,
                message: "\(name): the samples do not make a useful dictionary; train with more samples "
                    + "(a few thousand, about 100 times the capacity in total) or compress without one."
            )
        }
        return dictionary
    }

    /// The segment size of a quick training: on 3,000 of the field workload's events, with
    /// a 32 KiB dictionary, 64-event blocks came out 0.9 % larger than with the default
    /// trainer (12.72 against 12.61 B per event) for a training of 6 ms instead of 23.
    static let quickSegmentSize: UInt32 = 400

    // MARK: Decompression

    static func makeDecompressionContext(windowLogMax: Int32) -> OpaquePointer {
        guard let context = ZSTD_createDCtx() else { fatalError("ZSTD_createDCtx: out of memory") }
        let result = ZSTD_DCtx_setParameter(context, ZSTD_d_windowLogMax, windowLogMax)
        precondition(ZSTD_isError(result) == 0, "windowLogMax \(windowLogMax) is outside zstd's bounds")
        return context
    }

    static func freeDecompressionContext(_ context: OpaquePointer) {
        ZSTD_freeDCtx(context)
    }

    /// The size of the first frame in `input`; throws when it is not a complete frame.
    static func frameSize(_ input: ArraySlice<UInt8>) throws(ZstdError) -> Int {
        let result = input.withUnsafeBytes { ZSTD_findFrameCompressedSize($0.baseAddress, $0.count) }
        return try check(result, "ZSTD_findFrameCompressedSize", hint: decodeHint)
    }

    /// The content size a frame declares, or nil when it does not declare one.
    static func declaredContentSize(_ frame: ArraySlice<UInt8>) throws(ZstdError) -> UInt64? {
        let size = frame.withUnsafeBytes { ZSTD_getFrameContentSize($0.baseAddress, $0.count) }
        switch size {
        case ZSTD_CONTENTSIZE_UNKNOWN:
            return nil
        case ZSTD_CONTENTSIZE_ERROR:
            throw ZstdError(
                operation: "ZSTD_getFrameContentSize", code: ZstdError.notAFrame.code,
                message: "The input is not a zstd frame; \(decodeHint)."
            )
        default:
            return size
        }
    }

    /// Decompresses a frame that declares `contentSize` bytes into exactly that many.
    static func decompress(
        _ context: OpaquePointer, _ frame: ArraySlice<UInt8>, dictionary: OpaquePointer?, contentSize: Int
    ) throws(ZstdError) -> [UInt8] {
        var result = 0
        let content = [UInt8](unsafeUninitializedCapacity: max(contentSize, 1)) { buffer, count in
            result = frame.withUnsafeBytes { frame in
                ZSTD_decompress_usingDDict(
                    context, buffer.baseAddress, contentSize, frame.baseAddress, frame.count, dictionary
                )
            }
            count = ZSTD_isError(result) != 0 ? 0 : result
        }
        try check(result, "ZSTD_decompress_usingDDict", hint: decodeHint)
        guard result == contentSize else {
            throw ZstdError(
                operation: "ZSTD_decompress_usingDDict", code: ZstdError.truncatedFrame.code,
                message: "The frame declares \(contentSize) bytes but holds \(result); \(decodeHint)."
            )
        }
        return content
    }

    /// Decompresses one frame of undeclared size, failing as soon as it exceeds `limit` bytes.
    ///
    /// Memory stays within `limit` plus one output chunk, and the context's `windowLogMax`
    /// bounds the window the frame may ask for.
    static func decompressStream(
        _ context: OpaquePointer, _ frame: ArraySlice<UInt8>, dictionary: OpaquePointer?, limit: Int
    ) throws(ZstdError) -> [UInt8] {
        var content: [UInt8] = []
        var tooLarge = false
        _ = try decompressPieces(context, frame, dictionary: dictionary) { piece in
            guard piece.count <= limit - content.count else {
                tooLarge = true
                return false
            }
            content.append(contentsOf: piece)
            return true
        }
        if tooLarge {
            throw ZstdError(
                operation: "ZSTD_decompressStream", code: ZstdError.contentTooLarge.code,
                message: "The frame (of undeclared size) decompresses to more than the \(limit) bytes allowed."
            )
        }
        return content
    }

    /// Decompresses one frame an output chunk at a time, handing each piece of content to
    /// `consume` as it is produced; `consume` returns false to stop, and nothing after that
    /// piece is decoded. Returns true when the frame was decoded to its end, false when
    /// `consume` stopped it.
    ///
    /// A frame can expand a thousandfold (2 KB of zstd makes 64 MiB of zeros): this costs the
    /// caller only the content it accepts. The frame's checksum, when it has one, is checked
    /// only when the frame is decoded to its end.
    static func decompressPieces(
        _ context: OpaquePointer, _ frame: ArraySlice<UInt8>, dictionary: OpaquePointer?,
        consume: (UnsafeRawBufferPointer) -> Bool
    ) throws(ZstdError) -> Bool {
        try check(ZSTD_DCtx_reset(context, ZSTD_reset_session_only), "ZSTD_DCtx_reset", hint: decodeHint)
        try check(ZSTD_DCtx_refDDict(context, dictionary), "ZSTD_DCtx_refDDict", hint: decodeHint)
        defer { endDecompressionSession(context) }

        enum Outcome {
            case finished
            case stopped
            case failed(Int)
            case truncated
            case trailingData
        }
        var chunk = [UInt8](repeating: 0, count: ZSTD_DStreamOutSize())
        let outcome: Outcome = frame.withUnsafeBytes { frame in
            var input = ZSTD_inBuffer(src: frame.baseAddress, size: frame.count, pos: 0)
            return chunk.withUnsafeMutableBytes { chunk in
                while true {
                    var output = ZSTD_outBuffer(dst: chunk.baseAddress, size: chunk.count, pos: 0)
                    let result = ZSTD_decompressStream(context, &output, &input)
                    if ZSTD_isError(result) != 0 { return .failed(result) }
                    if output.pos > 0, !consume(UnsafeRawBufferPointer(rebasing: chunk[..<output.pos])) {
                        return .stopped
                    }
                    if result == 0 { return input.pos == input.size ? .finished : .trailingData }
                    if input.pos == input.size && output.pos < chunk.count { return .truncated }
                }
            }
        }
        switch outcome {
        case .finished:
            return true
        case .stopped:
            return false
        case .failed(let result):
            try check(result, "ZSTD_decompressStream", hint: decodeHint)
            preconditionFailure("ZSTD_decompressStream reported an error that is not one")
        case .truncated:
            throw ZstdError(
                operation: "ZSTD_decompressStream", code: ZstdError.truncatedFrame.code,
                message: "The frame ends early; \(decodeHint)."
            )
        case .trailingData:
            throw ZstdError(
                operation: "ZSTD_decompressStream", code: ZstdError.trailingData.code,
                message: "Bytes follow the end of the frame; \(decodeHint)."
            )
        }
    }

    /// Drops the dictionary reference so the context never points at a freed dictionary.
    private static func endDecompressionSession(_ context: OpaquePointer) {
        let reset = ZSTD_DCtx_reset(context, ZSTD_reset_session_only)
        let unref = ZSTD_DCtx_refDDict(context, nil)
        precondition(ZSTD_isError(reset) == 0 && ZSTD_isError(unref) == 0, "ZSTD_DCtx_reset failed")
    }
}
