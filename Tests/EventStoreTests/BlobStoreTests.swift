import Foundation
import Projections
import TestSupport
import Testing

@testable import EventStore

/// The blob store on real files: uploads in order, checked by size and hash, a blob whole
/// under its name or absent, every bound refusing with nothing stored.
@Suite("Blob store")
struct BlobStoreTests {
    func directory() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("blobs-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    /// What `sha256sum` says of the file at `path`.
    func sha256sum(_ path: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        process.arguments = [path]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(String(decoding: output, as: UTF8.self).prefix(64))
    }

    func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var generator = SeededGenerator(seed: seed)
        return (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    @Test(
        "blobs of 0, 1, a piece's size and one either side, in pieces, read back whole, hashed as sha256sum hashes them",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/sha256sum")))
    func roundTrips() throws {
        let root = try directory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try BlobStore(directory: root)
        let piece = 1 << 20
        for (index, size) in [0, 1, piece - 1, piece, piece + 1, 3 * piece + 17].enumerated() {
            let bytes = randomBytes(size, seed: UInt64(index))
            let upload = try store.begin(size: UInt64(size), owner: 1)
            var offset = 0
            while offset < size {
                let end = min(size, offset + 300_000)
                try store.write(upload, offset: UInt64(offset), bytes: Array(bytes[offset..<end]), owner: 1)
                offset = end
            }
            let (hash, stored, existed) = try store.commit(upload, owner: 1, expected: nil)
            #expect(stored == UInt64(size) && !existed)
            #expect(hash.hex == (try sha256sum(store.path(of: hash))), "size \(size)")
            #expect(hash == BlobHash.of(bytes))
            var read: [UInt8] = []
            while read.count < size {
                read += try store.read(hash, offset: UInt64(read.count), length: piece / 3).bytes
            }
            #expect(read == bytes, "size \(size)")
            #expect(store.size(of: hash) == UInt64(size))
        }
        #expect(store.statistics() == BlobStore.Statistics(blobs: 6, bytes: UInt64(6 * piece + 17 + 1), uploads: 0))
        // The same bytes again: held already, counted once.
        let again = try store.put(randomBytes(1, seed: 1), owner: 1)
        #expect(again.existed)
        #expect(store.statistics().blobs == 6)
        // Reopened: counted from the files.
        #expect(try BlobStore(directory: root).statistics() == store.statistics())
    }

    @Test("chunk digests are worked out once per blob, kept within their bound, and forgotten with the blob")
    func chunkDigestsAreKept() throws {
        let root = try directory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let store = try BlobStore(directory: root)
        let chunk = 1000
        let bytes = randomBytes(3 * chunk + 17, seed: 40)
        let (hash, size, _) = try store.put(bytes, owner: 1)
        #expect(store.rememberedDigests(hash) == nil)
        let digests = try store.chunkDigests(hash, chunkBytes: chunk)
        #expect(
            digests
                == stride(from: 0, to: bytes.count, by: chunk).map {
                    SHA256.digest(Array(bytes[$0..<min($0 + chunk, bytes.count)]))
                })
        #expect(store.rememberedDigests(hash) == digests)
        // Asked again, they come from memory, not from the file: the digests remembered for
        // it (here, made up) are what a peer gets.
        let madeUp = digests.map { _ in [UInt8](repeating: 7, count: SHA256.byteCount) }
        store.remember(hash, chunkBytes: chunk, size: size, digests: madeUp)
        #expect(try store.chunkDigests(hash, chunkBytes: chunk) == madeUp)
        // Another chunk size is worked out again.
        #expect(try store.chunkDigests(hash, chunkBytes: 2 * chunk).count == 2)
        // A removed blob has none, and no answer.
        try store.remove(hash)
        #expect(store.rememberedDigests(hash) == nil)
        #expect(throws: EventStoreError.self) { try store.chunkDigests(hash, chunkBytes: chunk) }
        // Bounded: past the entries it keeps, the least recently used go first.
        let fake = (0..<(BlobStore.manifestCacheEntries + 10)).map {
            BlobHash.of([UInt8($0 >> 8), UInt8($0 & 0xFF), 2])
        }
        for hash in fake { store.remember(hash, chunkBytes: chunk, size: 1, digests: [madeUp[0]]) }
        #expect(store.rememberedDigests(fake[0]) == nil && store.rememberedDigests(fake[9]) == nil)
        #expect(store.rememberedDigests(fake[10]) != nil && store.rememberedDigests(fake.last!) != nil)
        // And in bytes: one manifest over the whole budget is not kept at all.
        let huge = [[UInt8]](repeating: madeUp[0], count: BlobStore.manifestCacheBytes / SHA256.byteCount + 1)
        store.remember(fake[0], chunkBytes: chunk, size: 1, digests: huge)
        #expect(store.rememberedDigests(fake[0]) == nil)
    }

    @Test("over max_blob_bytes, over the total, or past the free space kept: refused, nothing stored")
    func boundsRefuse() throws {
        let root = try directory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var limits = BlobStore.Limits()
        limits.maxBlobBytes = 1000
        limits.maxTotalBytes = 2500
        limits.reserveBytes = 0
        let store = try BlobStore(directory: root, limits: limits)
        #expect(throws: EventStoreError.self) { try store.begin(size: 1001, owner: 1) }
        do {
            _ = try store.begin(size: 1001, owner: 1)
        } catch {
            #expect(error.reason == .tooLarge && error.message.contains("max_blob_bytes"))
        }
        _ = try store.put(randomBytes(1000, seed: 1), owner: 1)
        _ = try store.put(randomBytes(1000, seed: 2), owner: 1)
        // The uploads under way count too: 2000 held + 400 begun + 400 more is over 2500.
        let begun = try store.begin(size: 400, owner: 2)
        do {
            _ = try store.begin(size: 400, owner: 3)
            Issue.record("the total was not enforced")
        } catch {
            #expect(error.reason == .storageFull && error.message.contains("max_blob_store_bytes"), "\(error)")
        }
        store.abort(begun, owner: 2)
        _ = try store.begin(size: 400, owner: 3)
        // A file system that would be left with less than the reserve.
        var tight = BlobStore.Limits()
        tight.reserveBytes = UInt64.max / 4
        let full = try BlobStore(directory: try directory(), limits: tight)
        do {
            _ = try full.begin(size: 1, owner: 1)
            Issue.record("the reserve was not kept")
        } catch {
            #expect(error.reason == .storageFull && error.message.contains("blob_reserve_bytes"), "\(error)")
        }
        #expect(full.statistics() == BlobStore.Statistics(blobs: 0, bytes: 0, uploads: 0))
    }

    @Test("uploads: in order, to their declared size, by their owner; a short or mis-hashed commit stores nothing")
    func uploadsAreChecked() throws {
        let root = try directory()
        defer { try? FileManager.default.removeItem(atPath: root) }
        var limits = BlobStore.Limits()
        limits.reserveBytes = 0
        limits.maxUploads = 3
        let store = try BlobStore(directory: root, limits: limits)
        let upload = try store.begin(size: 10, owner: 1)
        func reason(_ body: () throws -> Void) -> EventStoreError.Reason? {
            do {
                try body()
                return nil
            } catch { return (error as? EventStoreError)?.reason }
        }
        #expect(reason { _ = try store.write(upload, offset: 0, bytes: [1, 2], owner: 2) } == .notFound)
        try store.write(upload, offset: 0, bytes: [1, 2, 3], owner: 1)
        #expect(reason { _ = try store.write(upload, offset: 0, bytes: [1], owner: 1) } == .invalidParams)
        #expect(
            reason { _ = try store.write(upload, offset: 3, bytes: Array(repeating: 0, count: 8), owner: 1) }
                == .tooLarge)
        // Short: refused, and the upload stays for the rest.
        #expect(reason { _ = try store.commit(upload, owner: 1, expected: nil) } == .invalidParams)
        try store.write(upload, offset: 3, bytes: Array(repeating: 9, count: 7), owner: 1)
        let wrong = BlobHash.of([0])
        #expect(reason { _ = try store.commit(upload, owner: 1, expected: wrong) } == .invalidParams)
        #expect(store.statistics() == BlobStore.Statistics(blobs: 0, bytes: 0, uploads: 0))
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").isEmpty)
        // Per owner and in all.
        _ = try store.begin(size: 1, owner: 5)
        _ = try store.begin(size: 1, owner: 5)
        #expect(reason { _ = try store.begin(size: 1, owner: 5) } == .unavailable)
        _ = try store.begin(size: 1, owner: 6)
        #expect(reason { _ = try store.begin(size: 1, owner: 7) } == .unavailable)
        // An owner's uploads go with it.
        store.abortAll(owner: 5)
        #expect(store.statistics().uploads == 1)
        _ = try store.begin(size: 1, owner: 7)
        // What a crash left in uploads/ is gone when the store opens again.
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").count == 2)
        #expect(try BlobStore(directory: root).statistics().uploads == 0)
        #expect(try FileManager.default.contentsOfDirectory(atPath: root + "/uploads").isEmpty)
    }

    @Test("references: the form evctl prints is one, a $blob value of another form is invalid, other values are none")
    func references() throws {
        let hash = BlobHash.of(Array("x".utf8))
        func value(_ json: String) throws -> JSONBytes { try JSONBytes(parsing: Array(json.utf8)) }
        let good = try BlobReference.parse(value(#"{"type":"image/jpeg","size":3,"$blob":"\#(hash)"}"#))
        #expect(good == BlobReference(hash: hash, size: 3, type: "image/jpeg"))
        #expect(try BlobReference.parse(value(#"{"$blob":"\#(hash)","size":0}"#))?.type == nil)
        for plain in [#"{"blob":"x"}"#, #""$blob""#, "[1]", #"{"a":{"$blob":"x"}}"#] {
            #expect(try BlobReference.parse(value(plain)) == nil, "\(plain)")
        }
        let bad = [
            #"{"$blob":"sha256:abc","size":1}"#, #"{"$blob":"\#(hash.description.uppercased())","size":1}"#,
            #"{"$blob":"md5:\#(hash.hex)","size":1}"#, #"{"$blob":"\#(hash)"}"#, #"{"$blob":"\#(hash)","size":-1}"#,
            #"{"$blob":"\#(hash)","size":1.5}"#, #"{"$blob":"\#(hash)","size":"1"}"#,
            #"{"$blob":"\#(hash)","size":1,"type":""}"#, #"{"$blob":"\#(hash)","size":1,"type":7}"#,
            #"{"$blob":"\#(hash)","size":1,"name":"a.jpg"}"#, #"{"$blob":7,"size":1}"#,
        ]
        for text in bad {
            #expect(throws: EventStoreError.self, "\(text)") { try BlobReference.parse(value(text)) }
        }
        // Refused on a local input, kept as it is in a stored event (a peer's, an import's).
        let plain = #"{"entity":"job/1","kind":"edit","fields":{"photo":{"$blob":"not a hash"}}}"#
        #expect(throws: EventStoreError.self) { try EventCodec.decodeInput(Array(plain.utf8)) }
        let stored =
            #"{"entity":"job/1","fields":{"photo":{"$blob":"not a hash"}},"id":"01JD0000000000000000000000","kind":"edit","origin":"01JD0000000000000000000001"}"#
        #expect(throws: Never.self) { try EventCodec.decodeStored(Array(stored.utf8)) }

        // In an entity's state: each hash once, in order.
        let other = BlobHash.of([1])
        let state =
            #"{"fields":{"a":{"$blob":"\#(hash)","size":1},"b":{"$blob":"\#(other)","size":1}},"sets":{"s":[{"$blob":"\#(hash)","size":1}]}}"#
        #expect(BlobReference.hashes(inJSON: Array(state.utf8)) == [hash, other])
        #expect(BlobReference.hashes(inJSON: Array(#"{"fields":{"$blob":"sha256:12"}}"#.utf8)).isEmpty)
    }

    @Test("base64 round-trips random bytes as Foundation encodes them, and refuses what is not base64")
    func base64() {
        var generator = SeededGenerator(seed: 7)
        for _ in 0..<500 {
            let bytes = (0..<Int.random(in: 0...70, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            let text = Base64.encode(bytes)
            #expect(String(decoding: text, as: UTF8.self) == Data(bytes).base64EncodedString())
            #expect(Base64.decode(text) == bytes)
        }
        for bad in ["A", "AB=C", "A===", "AB*=", "QQ==QQ==", "QR=="] {
            #expect(Base64.decode(Array(bad.utf8)) == nil, "\(bad)")
        }
        #expect(Base64.decode(Array("QUI=".utf8)) == Array("AB".utf8))
    }
}
