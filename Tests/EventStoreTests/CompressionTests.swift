import CZstd
import Dispatch
import EventStore
import TestSupport
import Testing

// MARK: - Inputs

private func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var generator = SeededGenerator(seed: seed)
    return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
}

/// A small JSON event like the ones the store keeps.
private func record(_ index: Int, using generator: inout SeededGenerator) -> [UInt8] {
    let types = ["OrderPlaced", "OrderShipped", "PaymentCaptured", "CustomerRenamed", "ItemAdded"]
    let type = types[Int.random(in: 0..<types.count, using: &generator)]
    let amount = Int.random(in: 1..<100_000, using: &generator)
    let customer = Int.random(in: 1..<5_000, using: &generator)
    let json = """
        {"type":"\(type)","id":"01HZX\(index)K3Q","stream":"order-\(index % 997)","version":\(index % 50),\
        "data":{"customerId":"cus_\(customer)","amount":{"value":\(amount),"currency":"EUR"},\
        "status":"pending","tags":["web","eu-west"]},"meta":{"source":"api","schema":2}}
        """
    return Array(json.utf8)
}

private func records(_ count: Int, seed: UInt64) -> [[UInt8]] {
    var generator = SeededGenerator(seed: seed)
    return (0..<count).map { record($0, using: &generator) }
}

/// A frame written with the streaming API, so its header does not declare the content size.
private func streamedFrame(_ input: [UInt8], windowLog: Int32) throws -> [UInt8] {
    let context = try #require(ZSTD_createCCtx())
    defer { ZSTD_freeCCtx(context) }
    #expect(ZSTD_isError(ZSTD_CCtx_setParameter(context, ZSTD_c_windowLog, windowLog)) == 0)
    var frame = [UInt8](repeating: 0, count: ZSTD_compressBound(input.count) + 64)
    let written = input.withUnsafeBytes { input in
        frame.withUnsafeMutableBytes { frame in
            var source = ZSTD_inBuffer(src: input.baseAddress, size: input.count, pos: 0)
            var destination = ZSTD_outBuffer(dst: frame.baseAddress, size: frame.count, pos: 0)
            // Starting with ZSTD_e_continue keeps zstd from learning the size up front.
            var remaining = ZSTD_compressStream2(context, &destination, &source, ZSTD_e_continue)
            while ZSTD_isError(remaining) == 0 {
                remaining = ZSTD_compressStream2(context, &destination, &source, ZSTD_e_end)
                if remaining == 0 { return destination.pos }
            }
            return -1
        }
    }
    try #require(written > 0)
    return Array(frame[..<written])
}

/// A hand-made frame of RLE blocks that declares no size: `blocks` × 128 KiB from a few bytes.
private func rleBomb(blocks: Int) -> [UInt8] {
    var frame: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]  // magic number
    frame.append(0x00)  // no content size, no checksum, no dictionary ID, not single-segment
    frame.append(7 << 3)  // window 2^(10+7) = 128 KiB
    for block in 0..<blocks {
        let isLast = block == blocks - 1 ? 1 : 0
        let header = isLast | 1 << 1 | (128 << 10) << 3  // RLE block of 128 KiB
        frame += [UInt8(header & 0xFF), UInt8(header >> 8 & 0xFF), UInt8(header >> 16 & 0xFF), 0x61]
    }
    return frame
}

private func isZstdError(_ error: any Error) -> Bool { error is ZstdError }

// MARK: - Round trips

@Suite("zstd compression")
struct CompressionTests {
    static let inputs: [[UInt8]] = [
        [],
        [42],
        Array("hello, hello, hello, hello".utf8),
        randomBytes(100_000, seed: 1),
        Array(String(repeating: "the quick brown fox jumps over the lazy dog ", count: 30_000).utf8),
    ]

    @Test("round trip without a dictionary", arguments: inputs)
    func roundTrip(input: [UInt8]) throws {
        let frame = try Compressor().compress(input, dictionary: nil)
        #expect(try Decompressor().decompress(frame, dictionary: nil, maxSize: input.count) == input)
    }

    @Test("frames declare their size and carry neither checksum nor dictionary ID", arguments: inputs)
    func frameHeader(input: [UInt8]) throws {
        let dictionary = try CompressionDictionary(bytes: Array("hello, quick brown fox".utf8))
        let frame = try Compressor(level: 5).compress(input, dictionary: dictionary)
        let descriptor = frame[4]
        #expect(frame.prefix(4) == [0x28, 0xB5, 0x2F, 0xFD])
        #expect(descriptor & 0b11 == 0, "dictionary ID flag")
        #expect(descriptor & 0b100 == 0, "checksum flag")
        #expect(descriptor >> 6 != 0 || descriptor & 0b10_0000 != 0, "content size present")
        #expect(try Decompressor().decompress(frame, dictionary: dictionary, maxSize: input.count) == input)
    }

    @Test("round trip with a dictionary, interleaved with frames without one")
    func roundTripWithDictionary() throws {
        let samples = records(2_000, seed: 7)
        let dictionary = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: samples, capacity: 8_192))
        let compressor = Compressor()
        let decompressor = Decompressor()
        for (index, input) in records(50, seed: 8).enumerated() {
            let used = index.isMultiple(of: 2) ? dictionary : nil
            let frame = try compressor.compress(input, dictionary: used)
            #expect(try decompressor.decompress(frame, dictionary: used, maxSize: 4_096) == input)
        }
    }

    /// The quick training (one segment size, for the first dictionary, which the writer
    /// waits for) gives a dictionary that round-trips and compresses within a few percent
    /// of the default trainer's.
    @Test("a quick training compresses about as well as the default one")
    func quickTraining() throws {
        let samples = records(3_000, seed: 31)
        let quick = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: samples, capacity: 16_384, quick: true))
        let thorough = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: samples, capacity: 16_384))
        let compressor = Compressor()
        let decompressor = Decompressor()
        var sizes: (quick: Int, thorough: Int, none: Int) = (0, 0, 0)
        for input in records(200, seed: 32) {
            let frame = try compressor.compress(input, dictionary: quick)
            #expect(try decompressor.decompress(frame, dictionary: quick, maxSize: 4_096) == input)
            sizes.quick += frame.count
            sizes.thorough += try compressor.compress(input, dictionary: thorough).count
            sizes.none += try compressor.compress(input, dictionary: nil).count
        }
        #expect(sizes.quick * 2 < sizes.none, "\(sizes)")
        #expect(Double(sizes.quick) <= Double(sizes.thorough) * 1.1, "\(sizes)")
    }

    @Test("a level for frames without a dictionary, with dictionaries switched between frames")
    func levelWithoutDictionary() throws {
        let first = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: records(2_000, seed: 21), capacity: 8_192))
        let second = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: records(2_000, seed: 22), capacity: 8_192))
        let compressor = Compressor(level: 3, levelWithoutDictionary: -1)
        let decompressor = Decompressor()
        for (index, input) in records(60, seed: 23).enumerated() {
            let used = [nil, first, second, first, nil][index % 5]
            var value: [UInt8] = [0xAB]
            try compressor.compress(input, dictionary: used, appendingTo: &value)
            #expect(value.first == 0xAB)
            #expect(try decompressor.decompress(Array(value.dropFirst()), dictionary: used, maxSize: 4_096) == input)
        }
    }

    /// zstd would size a 32 KiB dictionary's tables for an input of 128 KiB; they are sized
    /// to the dictionary instead at the fast levels, and compress as well as zstd's own.
    @Test("a dictionary's tables are sized to it and compress as well as zstd's default ones")
    func dictionaryTables() throws {
        let trained = try DictionaryTrainer.train(samples: records(4_000, seed: 41), capacity: 32_768)
        #expect(trained.count > 16_384)
        let fresh = records(600, seed: 42)
        // Single records, as projection records are, and runs of 64, as blocks are.
        let inputs =
            fresh
            + stride(from: 0, to: fresh.count, by: 64).map { fresh[$0..<min($0 + 64, fresh.count)].flatMap { $0 } }

        func zstdDefault(level: Int32) throws -> (memory: Int, sizes: [Int]) {
            let dictionary = try #require(trained.withUnsafeBytes { ZSTD_createCDict($0.baseAddress, $0.count, level) })
            defer { ZSTD_freeCDict(dictionary) }
            let context = try #require(ZSTD_createCCtx())
            defer { ZSTD_freeCCtx(context) }
            let sizes = inputs.map { input in
                var frame = [UInt8](repeating: 0, count: ZSTD_compressBound(input.count))
                let written = input.withUnsafeBytes { input in
                    frame.withUnsafeMutableBytes { frame in
                        ZSTD_compress_usingCDict(
                            context, frame.baseAddress, frame.count, input.baseAddress, input.count, dictionary)
                    }
                }
                return ZSTD_isError(written) == 0 ? written : -1
            }
            return (ZSTD_sizeof_CDict(dictionary), sizes)
        }

        let compressor = Compressor()
        let decompressor = Decompressor()
        let dictionary = try CompressionDictionary(bytes: trained, level: 3)
        var ours = 0
        for input in inputs {
            let frame = try compressor.compress(input, dictionary: dictionary)
            #expect(try decompressor.decompress(frame, dictionary: dictionary, maxSize: 1 << 20) == input)
            ours += frame.count
        }
        let standard = try zstdDefault(level: 3)
        #expect(!standard.sizes.contains(-1))
        let theirs = standard.sizes.reduce(0, +)
        // 96 KiB of tables and the dictionary's copy, against zstd's 384 KiB and the copy.
        #expect(
            dictionary.compressionMemoryBytes < standard.memory / 2,
            "\(dictionary.compressionMemoryBytes) \(standard.memory)")
        #expect(dictionary.compressionMemoryBytes > trained.count)
        #expect(Double(ours) <= Double(theirs) * 1.01, "\(ours) bytes against \(theirs)")

        // The slower levels' tables are left as zstd makes them.
        let slow = try CompressionDictionary(bytes: trained, level: 19)
        #expect(slow.compressionMemoryBytes == (try zstdDefault(level: 19)).memory)
    }

    @Test("a trained dictionary compresses small records better")
    func trainedDictionaryHelps() throws {
        let trained = try DictionaryTrainer.train(samples: records(2_000, seed: 11), capacity: 8_192)
        #expect(trained.count <= 8_192)
        #expect(trained.count > 256)
        let dictionary = try CompressionDictionary(bytes: trained, level: 3)
        #expect(dictionary.bytes == trained)

        let compressor = Compressor()
        let fresh = records(500, seed: 12)
        let raw = fresh.reduce(0) { $0 + $1.count }
        let plain = try fresh.reduce(0) { $0 + (try compressor.compress($1, dictionary: nil)).count }
        let withDictionary = try fresh.reduce(0) { $0 + (try compressor.compress($1, dictionary: dictionary)).count }
        #expect(withDictionary * 2 < plain, "raw \(raw), plain \(plain), with dictionary \(withDictionary)")
    }

    @Test("training refuses too few samples with a clear error")
    func tooFewSamples() {
        #expect {
            _ = try DictionaryTrainer.train(samples: records(3, seed: 1), capacity: 4_096)
        } throws: { error in
            guard let error = error as? ZstdError, ZstdError.notEnoughSamples ~= error else { return false }
            return error.message.contains("at least") && error.message.contains("got 3")
        }
        // Enough samples, but no bytes in them: zstd's own error, passed on.
        #expect {
            _ = try DictionaryTrainer.train(samples: Array(repeating: [], count: 100), capacity: 4_096)
        } throws: { error in
            (error as? ZstdError)?.operation == "ZDICT_trainFromBuffer"
        }
        #expect(throws: ZstdError.self) {
            _ = try DictionaryTrainer.train(samples: records(100, seed: 1), capacity: 100)
        }
    }

    @Test("a broken dictionary is refused")
    func brokenDictionary() {
        // The zstd dictionary magic number followed by junk.
        let broken: [UInt8] = [0x37, 0xA4, 0x30, 0xEC] + randomBytes(200, seed: 3)
        #expect {
            _ = try CompressionDictionary(bytes: broken)
        } throws: { ZstdError.invalidDictionary ~= $0 }
    }
}

// MARK: - Untrusted frames

@Suite("zstd untrusted frames")
struct DecompressionSafetyTests {
    static let input = Array(String(repeating: "event payload 0123456789 ", count: 2_000).utf8)

    @Test("a declared size above maxSize is refused")
    func declaredSizeTooLarge() throws {
        let frame = try Compressor().compress(Self.input, dictionary: nil)
        #expect {
            _ = try Decompressor().decompress(frame, dictionary: nil, maxSize: Self.input.count - 1)
        } throws: { error in
            ZstdError.contentTooLarge ~= error && "\(error)".contains("\(Self.input.count)")
        }
        #expect(try Decompressor().decompress(frame, dictionary: nil, maxSize: Self.input.count) == Self.input)
    }

    @Test("a truncated frame is an error", arguments: [0, 1, 3, 4, 5, 6, 9, 20, -1])
    func truncated(cut: Int) throws {
        let frame = try Compressor().compress(Self.input, dictionary: nil)
        let length = cut < 0 ? frame.count + cut : cut
        #expect(throws: ZstdError.self) {
            _ = try Decompressor().decompress(Array(frame.prefix(length)), dictionary: nil, maxSize: 1 << 20)
        }
    }

    @Test("random bytes are an error", arguments: [1, 4, 16, 100, 10_000])
    func randomInput(count: Int) {
        let decompressor = Decompressor()
        for seed in UInt64(0)..<20 {
            let noise = randomBytes(count, seed: seed)
            #expect(throws: ZstdError.self) {
                _ = try decompressor.decompress(noise, dictionary: nil, maxSize: 1 << 20)
            }
            let withMagic = [0x28, 0xB5, 0x2F, 0xFD] + noise
            #expect(throws: ZstdError.self) {
                _ = try decompressor.decompress(withMagic, dictionary: nil, maxSize: 1 << 20)
            }
        }
    }

    @Test("flipped bytes inside a frame give an error or output of the declared size, never a crash")
    func corruptedFrame() throws {
        let frame = try Compressor().compress(Self.input, dictionary: nil)
        let decompressor = Decompressor()
        for position in stride(from: 4, to: frame.count, by: 3) {
            var damaged = frame
            damaged[position] ^= 0x5A
            do {
                let output = try decompressor.decompress(damaged, dictionary: nil, maxSize: Self.input.count)
                #expect(output.count == Self.input.count)
            } catch {
                #expect(isZstdError(error))
            }
        }
    }

    @Test(
        "bytes after the frame are an error",
        arguments: [[0], [0x28, 0xB5, 0x2F, 0xFD], Array(repeating: 7, count: 100)])
    func trailingBytes(garbage: [UInt8]) throws {
        let frame = try Compressor().compress(Self.input, dictionary: nil)
        #expect {
            _ = try Decompressor().decompress(frame + garbage, dictionary: nil, maxSize: 1 << 20)
        } throws: { ZstdError.trailingData ~= $0 }
        // Two valid frames back to back are not one frame either.
        #expect(throws: ZstdError.self) {
            _ = try Decompressor().decompress(frame + frame, dictionary: nil, maxSize: 1 << 20)
        }
    }

    @Test("a frame made with a dictionary does not decode without it")
    func missingDictionary() throws {
        let samples = records(2_000, seed: 21)
        let dictionary = try CompressionDictionary(
            bytes: try DictionaryTrainer.train(samples: samples, capacity: 8_192))
        let compressor = Compressor()
        let decompressor = Decompressor()
        for input in records(20, seed: 22) {
            let frame = try compressor.compress(input, dictionary: dictionary)
            #expect(throws: ZstdError.self) { _ = try decompressor.decompress(frame, dictionary: nil, maxSize: 4_096) }
            // The context recovers: the next frame decodes.
            #expect(try decompressor.decompress(frame, dictionary: dictionary, maxSize: 4_096) == input)
        }
    }

    @Test("a frame of undeclared size decodes only within maxSize")
    func undeclaredSize() throws {
        let frame = try streamedFrame(Self.input, windowLog: 17)
        // Frame_Header_Descriptor: no Frame_Content_Size field, not single-segment.
        #expect(frame[4] >> 6 == 0 && frame[4] & 0b10_0000 == 0)
        let decompressor = Decompressor()
        #expect(try decompressor.decompress(frame, dictionary: nil, maxSize: Self.input.count) == Self.input)
        #expect {
            _ = try decompressor.decompress(frame, dictionary: nil, maxSize: Self.input.count - 1)
        } throws: { ZstdError.contentTooLarge ~= $0 }
        #expect(throws: ZstdError.self) {
            _ = try decompressor.decompress(Array(frame.dropLast(2)), dictionary: nil, maxSize: 1 << 20)
        }
        #expect(try decompressor.decompress(frame, dictionary: nil, maxSize: 1 << 20) == Self.input)
    }

    @Test("a decompression bomb stops at maxSize")
    func bomb() throws {
        let bomb = rleBomb(blocks: 1_000)  // 128 MiB from 4 KiB
        #expect(bomb.count < 5_000)
        let decompressor = Decompressor()
        #expect(try decompressor.decompress(rleBomb(blocks: 2), dictionary: nil, maxSize: 256 << 10).count == 256 << 10)
        #expect {
            _ = try decompressor.decompress(bomb, dictionary: nil, maxSize: 1 << 20)
        } throws: { ZstdError.contentTooLarge ~= $0 }
    }

    @Test("a frame asking for a window above windowLogMax is refused")
    func windowTooLarge() throws {
        let frame = try streamedFrame(Self.input, windowLog: 24)
        #expect(throws: ZstdError.self) { _ = try Decompressor().decompress(frame, dictionary: nil, maxSize: 1 << 20) }
        #expect(try Decompressor(windowLogMax: 24).decompress(frame, dictionary: nil, maxSize: 1 << 20) == Self.input)
    }

    @Test("the pool lends decompressors to concurrent readers")
    func pool() throws {
        let pool = DecompressorPool(maximumIdle: 2)
        let inputs = records(64, seed: 31)
        let compressor = Compressor()
        let frames = try inputs.map { try compressor.compress($0, dictionary: nil) }
        DispatchQueue.concurrentPerform(iterations: 64) { index in
            let output = try? pool.withDecompressor {
                try $0.decompress(frames[index], dictionary: nil, maxSize: 4_096)
            }
            #expect(output == inputs[index])
        }
    }
}
