import EventStore
import FoundationEssentials
import Synchronization

/// What a node fetches from one peer: the blobs its events reference as they arrive
/// (`eager`, the default), only those a client asks for (`lazy`, `evctl blob get` on a
/// gateway), or none.
package enum BlobPolicy: String, Sendable, CaseIterable {
    case eager, lazy, none
}

/// A node's blobs as sync sees them: the store that holds them, and what it wants of a peer.
package final class SyncBlobs: Sendable {
    package let store: BlobStore
    /// The blobs (with their sizes) the node's events name and it lacks, at most `limit`.
    private let pending: @Sendable (_ limit: Int) throws(EventStoreError) -> [(BlobHash, UInt64)]
    /// Called with the blobs a session received whole.
    package let arrived: @Sendable ([BlobHash]) -> Void
    /// Per configured peer, its policy (the service keeps it as the configuration says);
    /// any other peer's is `eager`.
    package let policies = Mutex<[String: BlobPolicy]>([:])
    /// The blobs clients wait for (`blob.get` of a pending blob), with their sizes and how
    /// many wait: asked of every peer but those of policy `none`, before the rest.
    private let demanded = Mutex<[BlobHash: (size: UInt64, waiting: Int)]>([:])

    package init(
        store: BlobStore,
        pending: @escaping @Sendable (_ limit: Int) throws(EventStoreError) -> [(BlobHash, UInt64)],
        arrived: @escaping @Sendable ([BlobHash]) -> Void = { _ in }
    ) {
        self.store = store
        self.pending = pending
        self.arrived = arrived
    }

    package func policy(of peer: String?) -> BlobPolicy {
        peer.flatMap { name in policies.withLock { $0[name] } } ?? .eager
    }

    /// A client waits for `hash` (`withdraw` when it stops).
    package func demand(_ hash: BlobHash, size: UInt64) {
        demanded.withLock { $0[hash, default: (size, 0)].waiting += 1 }
    }

    package func withdraw(_ hash: BlobHash) {
        demanded.withLock { demanded in
            guard let entry = demanded[hash] else { return }
            demanded[hash] = entry.waiting > 1 ? (entry.size, entry.waiting - 1) : nil
        }
    }

    /// What to ask a peer of `policy` for: the blobs clients wait for, then (`eager`) the
    /// others pending, at most `limit`.
    func wanted(by policy: BlobPolicy, limit: Int) throws(EventStoreError) -> [(BlobHash, UInt64)] {
        guard policy != .none else { return [] }
        var wanted = demanded.withLock { $0.map { ($0.key, $0.value.size) } }.sorted { $0.0.hex < $1.0.hex }
        wanted = Array(wanted.prefix(limit))
        if policy == .eager, wanted.count < limit {
            let asked = Set(wanted.map(\.0))
            wanted += try pending(limit).filter { !asked.contains($0.0) }.prefix(limit - wanted.count)
        }
        return wanted
    }
}

extension Messages {
    /// A `want` frame: the blobs the sender lacks, each from the offset it holds already
    /// (the bytes a cut session left), at most `maxWants`.
    package struct Wants: Codable, Equatable {
        package var blobs: [Want]

        package struct Want: Codable, Equatable {
            package var hash: String
            package var size: UInt64
            package var offset: UInt64
        }

        package static let maxWants = 256
    }

    /// A `blobs_done` frame: the blobs of the `want` the sender served, and those it holds
    /// not (or holds at another size).
    package struct BlobsDone: Codable, Equatable {
        package var sent: Int
        package var missing: [String]
    }

    /// A `blobs_kept` frame: how many of the blobs asked for the sender now holds whole,
    /// synced to its disk, and the hashes of those it still lacks.
    package struct BlobsKept: Codable, Equatable {
        package var kept: Int
        package var lacking: [String]
    }
}

/// A `chunk` frame: 32 bytes of the blob's SHA-256, the offset (8 bytes, big-endian), then
/// at most `maxBytes` of the blob's bytes from that offset. 512 KiB: a cut loses at most
/// the chunk under way, and the 49 bytes of header and frame are 0.01 % of it. Chunks
/// start at multiples of `maxBytes`, and each but a blob's last is `maxBytes` long.
package enum BlobChunk {
    package static let maxBytes = 512 << 10
    package static let headerBytes = 40

    package static func encode(_ hash: BlobHash, offset: UInt64, bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(headerBytes + bytes.count)
        appendHeader(hash, offset: offset, to: &out)
        out.append(contentsOf: bytes)
        return out
    }

    package static func appendHeader(_ hash: BlobHash, offset: UInt64, to out: inout [UInt8]) {
        out.append(contentsOf: hash.digest)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: offset >> UInt64(shift)))
        }
    }

    package static func decode(_ payload: [UInt8]) throws(SyncError) -> (BlobHash, UInt64, ArraySlice<UInt8>) {
        guard payload.count >= headerBytes else {
            throw SyncError(.protocolError, "the peer's chunk frame is \(payload.count) bytes, shorter than its header")
        }
        var offset: UInt64 = 0
        for byte in payload[32..<40] { offset = offset << 8 | UInt64(byte) }
        return (BlobHash(digest: Array(payload[0..<32])), offset, payload[40...])
    }
}

/// A `manifest` frame, sent before a blob's first chunk: 32 bytes of the blob's SHA-256,
/// its size (8 bytes, big-endian), the chunk size (4 bytes, big-endian: `BlobChunk.maxBytes`),
/// then the SHA-256 of each chunk in order. The receiver checks every chunk against it
/// before it keeps a byte of it, and what earlier sessions kept; the whole blob is checked
/// against its own hash at the end, which also tells a manifest that lied.
package enum BlobManifest {
    package static let headerBytes = 44
    /// Chunk hashes of a blob of up to 16 GiB (`max_blob_bytes` is 256 MiB by default).
    package static let maxChunks = 32_768
    package static let maxPayloadBytes = headerBytes + 32 * maxChunks

    package static func encode(_ hash: BlobHash, size: UInt64, chunks: [[UInt8]]) -> [UInt8] {
        var out = hash.digest
        out.reserveCapacity(headerBytes + 32 * chunks.count)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: size >> UInt64(shift)))
        }
        let chunkBytes = UInt32(BlobChunk.maxBytes)
        for shift in stride(from: 24, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: chunkBytes >> UInt32(shift)))
        }
        for chunk in chunks { out.append(contentsOf: chunk) }
        return out
    }

    /// The hash, size and chunk hashes; a manifest whose chunk size is not this node's, or
    /// whose count of hashes does not fit the size, is a protocol error.
    package static func decode(_ payload: [UInt8]) throws(SyncError) -> (BlobHash, UInt64, [[UInt8]]) {
        guard payload.count >= headerBytes, (payload.count - headerBytes) % 32 == 0 else {
            throw SyncError(
                .protocolError, "the peer's manifest frame is \(payload.count) bytes, not a header and whole hashes")
        }
        var size: UInt64 = 0
        for byte in payload[32..<40] { size = size << 8 | UInt64(byte) }
        var chunkBytes: UInt32 = 0
        for byte in payload[40..<44] { chunkBytes = chunkBytes << 8 | UInt32(byte) }
        guard chunkBytes == UInt32(BlobChunk.maxBytes) else {
            throw SyncError(
                .protocolError,
                "the peer's manifest has chunks of \(chunkBytes) bytes; this node's are \(BlobChunk.maxBytes)")
        }
        let count = (payload.count - headerBytes) / 32
        guard UInt64(count) == (size + UInt64(chunkBytes) - 1) / UInt64(chunkBytes) else {
            throw SyncError(
                .protocolError, "the peer's manifest lists \(count) chunk hashes for a blob of \(size) bytes")
        }
        let chunks = (0..<count).map { Array(payload[(headerBytes + 32 * $0)..<(headerBytes + 32 * $0 + 32)]) }
        return (BlobHash(digest: Array(payload[0..<32])), size, chunks)
    }
}

extension SyncSession {
    /// Asks the peer for the blobs this node wants of it and takes them: each chunk is
    /// checked against the peer's manifest before it is kept, and each whole blob against
    /// its hash before it takes its name; a cut leaves what arrived in a partial file that
    /// the next session (with this peer or another) goes on from. Ends with `blobs_kept`,
    /// once every blob received is on the disk.
    func fetchBlobs(_ blobs: SyncBlobs) throws(SyncError) {
        let owner = blobOwner
        let chunkBytes = UInt64(BlobChunk.maxBytes)
        /// A blob asked for: its size and the offset asked from; once its manifest came, the
        /// chunk hashes and the upload it is received into (nil while it is passed over).
        struct Asked {
            var size: UInt64
            var offset: UInt64
            var chunks: [[UInt8]]? = nil
            var upload: UInt64? = nil
            var passed = false
        }
        var asked: [BlobHash: Asked] = [:]
        var arrived: [BlobHash] = []
        var announced = false
        defer {
            // What did not arrive whole stays for the next session.
            blobs.store.releaseAll(owner: owner)
            if !announced, !arrived.isEmpty { blobs.arrived(arrived) }
        }
        var wants: [Messages.Wants.Want] = []
        // Wanted and not asked for this time: still lacking, as blobs_kept tells the peer.
        var unasked: [String] = []
        for (hash, size) in try storage({ () throws(EventStoreError) in
            try blobs.wanted(by: blobs.policy(of: configuredPeer ?? report.peerName), limit: Messages.Wants.maxWants)
        }) where asked[hash] == nil {
            if blobs.store.contains(hash) {
                arrived.append(hash)
                continue
            }
            // Not asked for when it could not be kept: too large for this node, or being
            // received by another session now (asked again later).
            if size > blobs.store.limits.maxBlobBytes || blobs.store.isReceiving(hash) {
                report.blobsUnasked += 1
                unasked.append(hash.description)
                continue
            }
            // What earlier sessions kept, in whole chunks: the rest is asked for.
            let kept = blobs.store.partialSize(hash).flatMap { $0 <= size ? $0 : nil } ?? 0
            let offset = kept - kept % chunkBytes
            asked[hash] = Asked(size: size, offset: offset)
            wants.append(Messages.Wants.Want(hash: hash.description, size: size, offset: offset))
        }
        report.blobsAsked = wants.count
        try send(.want, Messages.Wants(blobs: wants))

        func finish(_ hash: BlobHash, _ number: UInt64, chunks: [[UInt8]]?) throws(SyncError) {
            let committed = Result { () throws(EventStoreError) in
                try blobs.store.commit(number, owner: owner, expected: hash)
            }
            if case .failure(let error) = committed {
                if error.reason == .invalidParams {
                    // Every chunk matched the peer's manifest, and the whole does not match
                    // the blob's hash: the manifest lied. Its bytes are gone.
                    throw SyncError(
                        .invalidPeer,
                        "the peer's bytes of \(hash) do not hash to it: they were dropped, and the blob is asked again at the next session"
                    )
                }
                throw SyncError(
                    error.reason == .storageFull ? .storageFull : .storage, "cannot store \(hash): \(error.message)")
            }
            // Stored and whole: the manifest it was checked against holds, for the peers this
            // node passes it on to.
            if case .success(let stored) = committed, let chunks {
                blobs.store.remember(hash, chunkBytes: BlobChunk.maxBytes, size: stored.size, digests: chunks)
            }
            arrived.append(hash)
            report.blobsReceived += 1
        }

        /// Begins receiving `hash` under its manifest: what earlier sessions kept is held
        /// against the manifest's hashes, and a blob whose kept chunks disagree with them,
        /// or that another session receives now, is passed over this time.
        func begin(_ hash: BlobHash, chunks: [[UInt8]]) throws(SyncError) {
            let entry = asked[hash]!
            asked[hash]!.chunks = chunks
            let resumed: (number: UInt64, offset: UInt64, chunks: [[UInt8]])
            do throws(EventStoreError) {
                resumed = try blobs.store.resume(hash, size: entry.size, owner: owner, chunkBytes: BlobChunk.maxBytes)
            } catch {
                if error.reason == .storageFull {
                    throw SyncError(.storageFull, "this node cannot take blob \(hash): \(error.message)")
                }
                // Being received in another session, or too many uploads: its chunks are
                // passed over, and a later session asks for it again.
                asked[hash]!.passed = true
                report.blobsUnasked += 1
                return
            }
            let agreeing = zip(resumed.chunks, chunks).prefix { $0 == $1 }.count
            guard agreeing == resumed.chunks.count, resumed.offset == entry.offset else {
                // The kept bytes are not what this peer's manifest says (or not what was
                // asked from): kept only as far as they agree, and asked for again.
                blobs.store.releaseAll(owner: owner)
                try storage { () throws(EventStoreError) in
                    try blobs.store.truncatePartial(hash, to: UInt64(agreeing) * chunkBytes)
                }
                asked[hash]!.passed = true
                report.blobsUnasked += 1
                return
            }
            asked[hash]!.upload = resumed.number
        }

        while true {
            let frame = try read()
            switch frame.kind {
            case .manifest:
                let (hash, size, chunks) = try BlobManifest.decode(frame.payload)
                guard let entry = asked[hash], entry.size == size, entry.chunks == nil else {
                    throw SyncError(
                        .protocolError, "the peer sent a manifest of \(hash), which was not asked for (or twice)")
                }
                // One blob at a time: the one before is released, whole or not.
                blobs.store.releaseAll(owner: owner)
                for other in asked.keys where asked[other]!.upload != nil { asked[other]!.upload = nil }
                try begin(hash, chunks: chunks)
            case .chunk:
                let (hash, offset, bytes) = try BlobChunk.decode(frame.payload)
                guard let entry = asked[hash], let chunks = entry.chunks else {
                    throw SyncError(.protocolError, "the peer sent a chunk of \(hash) before its manifest, or unasked")
                }
                let index = Int(offset / chunkBytes)
                let expectedLength = min(chunkBytes, entry.size - min(entry.size, offset))
                guard offset == entry.offset, offset % chunkBytes == 0, index < chunks.count,
                    UInt64(bytes.count) == expectedLength
                else {
                    throw SyncError(
                        .protocolError,
                        "the peer sent \(bytes.count) bytes of \(hash) at offset \(offset); the next chunk of its \(entry.size) bytes is at \(entry.offset)"
                    )
                }
                report.blobBytesReceived += bytes.count
                asked[hash]!.offset += UInt64(bytes.count)
                guard !entry.passed, let number = entry.upload else { continue }
                guard SHA256.digest(bytes) == chunks[index] else {
                    throw SyncError(
                        .invalidPeer,
                        "chunk \(index) of \(hash) from the peer does not match the hash its manifest gives: it was refused and nothing of it kept; the blob is asked again, of this peer or another, at the next session"
                    )
                }
                let received = try storage { () throws(EventStoreError) in
                    try blobs.store.write(number, offset: offset, bytes: bytes, owner: owner)
                }
                if received == entry.size {
                    asked[hash]!.upload = nil
                    try finish(hash, number, chunks: chunks)
                }
            case .blobsDone:
                let done = try Messages.decode(Messages.BlobsDone.self, frame.payload, frame: "blobs_done")
                let missing = Set(done.missing.prefix(Messages.Wants.maxWants))
                report.blobsMissing += missing.count
                // A blob of no bytes takes no chunk: the peer's done says it holds it.
                for want in wants where want.size == 0 && !missing.contains(want.hash) {
                    let hash = BlobHash(want.hash)!
                    try begin(hash, chunks: [])
                    if let number = asked[hash]!.upload { try finish(hash, number, chunks: nil) }
                }
                if !arrived.isEmpty { blobs.arrived(arrived) }
                announced = true
                let whole = Set(arrived.map(\.description))
                try send(
                    .blobsKept,
                    Messages.BlobsKept(
                        kept: report.blobsReceived,
                        lacking: Array(
                            (wants.map(\.hash).filter { !whole.contains($0) } + unasked).prefix(Messages.Wants.maxWants)
                        )))
                return
            default:
                throw SyncError(
                    .protocolError,
                    "the peer sent a \(frame.kind) frame where a manifest, a chunk or blobs_done belongs")
            }
        }
    }

    /// Answers the peer's `want`: for each blob asked for that this node holds at the size
    /// named, its manifest and its chunks from the offset the peer holds, then `blobs_done`;
    /// then waits for the peer's `blobs_kept`.
    func serveBlobs(_ blobs: SyncBlobs) throws(SyncError) {
        let wants = try Messages.decode(Messages.Wants.self, try expect(.want).payload, frame: "want")
        guard wants.blobs.count <= Messages.Wants.maxWants else {
            throw SyncError(
                .protocolError,
                "the peer's want frame asks for \(wants.blobs.count) blobs; at most \(Messages.Wants.maxWants) are allowed"
            )
        }
        let chunkBytes = UInt64(BlobChunk.maxBytes)
        var sent = 0
        var missing: [String] = []
        var held: [(hash: BlobHash, size: UInt64, offset: UInt64)] = []
        for want in wants.blobs {
            guard let hash = BlobHash(want.hash), let size = blobs.store.size(of: hash), size == want.size,
                want.offset <= size, want.offset % chunkBytes == 0,
                size <= UInt64(BlobManifest.maxChunks) * chunkBytes
            else {
                missing.append(String(want.hash.prefix(71)))
                continue
            }
            // Asked twice, sent once.
            if !held.contains(where: { $0.hash == hash }) { held.append((hash, size, want.offset)) }
        }
        // What the peer asked for that this side holds and has not sent whole, as it goes:
        // a cut session leaves the rest, all pending for the peer until its blobs_kept.
        report.blobsPeerWants = held.count
        report.peerLacksBlobs = held.map(\.hash)
        for (hash, size, start) in held {
            // An empty blob takes neither manifest nor chunk: blobs_done says it is held.
            if size > 0 {
                let chunks = try storage { () throws(EventStoreError) in
                    try blobs.store.chunkDigests(hash, chunkBytes: BlobChunk.maxBytes)
                }
                try channel.write(
                    Frame(kind: .manifest, payload: BlobManifest.encode(hash, size: size, chunks: chunks)))
            }
            var offset = start
            while offset < size {
                // The bytes are read into the frame that carries them.
                var frame = Frame.beginEncoding(.chunk, capacity: BlobChunk.headerBytes + BlobChunk.maxBytes)
                BlobChunk.appendHeader(hash, offset: offset, to: &frame)
                let count = try storage { () throws(EventStoreError) in
                    try blobs.store.read(hash, offset: offset, length: BlobChunk.maxBytes, appendingTo: &frame)
                }
                guard count > 0 else { break }
                Frame.endEncoding(&frame)
                try channel.write(encoded: frame)
                offset += UInt64(count)
                report.blobBytesSent += count
            }
            sent += 1
            report.blobsPeerWants -= 1
        }
        report.blobsSent += sent
        try send(.blobsDone, Messages.BlobsDone(sent: sent, missing: missing))
        let kept = try Messages.decode(Messages.BlobsKept.self, try expect(.blobsKept).payload, frame: "blobs_kept")
        // What it wants and still lacks that this node holds: pending for that peer.
        let lacking = Set(kept.lacking.prefix(Messages.Wants.maxWants).compactMap { BlobHash($0) })
        report.peerLacksBlobs = lacking.filter { blobs.store.contains($0) }.sorted { $0.hex < $1.hex }
        report.blobsPeerWants = report.peerLacksBlobs.count
    }
}
