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
}

/// A `chunk` frame: 32 bytes of the blob's SHA-256, the offset (8 bytes, big-endian), then
/// at most `maxBytes` of the blob's bytes from that offset. 512 KiB: a cut loses at most
/// the chunk under way, and the 49 bytes of header and frame are 0.01 % of it.
package enum BlobChunk {
    package static let maxBytes = 512 << 10
    package static let headerBytes = 40

    package static func encode(_ hash: BlobHash, offset: UInt64, bytes: [UInt8]) -> [UInt8] {
        var out = hash.digest
        out.reserveCapacity(headerBytes + bytes.count)
        for shift in stride(from: 56, through: 0, by: -8) { out.append(UInt8(truncatingIfNeeded: offset >> UInt64(shift))) }
        out.append(contentsOf: bytes)
        return out
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

extension SyncSession {
    /// Asks the peer for the blobs this node wants of it and takes them: each whole blob is
    /// checked against its hash before it takes its name; a cut leaves what arrived in a
    /// partial file the next session (with this peer or another) goes on from.
    func fetchBlobs(_ blobs: SyncBlobs) throws(SyncError) {
        let owner = blobOwner
        // What each blob asked for holds (its size, the bytes held); its upload once its
        // first chunk came, or nil while it is skipped (another session is receiving it).
        var asked: [BlobHash: (size: UInt64, offset: UInt64)] = [:]
        var open: (hash: BlobHash, number: UInt64)?
        var skipping = Set<BlobHash>()
        var arrived: [BlobHash] = []
        defer {
            // What did not arrive whole stays for the next session.
            blobs.store.releaseAll(owner: owner)
            if !arrived.isEmpty { blobs.arrived(arrived) }
        }
        var wants: [Messages.Wants.Want] = []
        for (hash, size) in try storage({ () throws(EventStoreError) in
            try blobs.wanted(by: blobs.policy(of: configuredPeer ?? report.peerName), limit: Messages.Wants.maxWants)
        }) where asked[hash] == nil {
            if blobs.store.contains(hash) {
                arrived.append(hash)
                continue
            }
            let offset = blobs.store.partialSize(hash).flatMap { $0 <= size ? $0 : nil } ?? 0
            asked[hash] = (size, offset)
            wants.append(Messages.Wants.Want(hash: hash.description, size: size, offset: offset))
        }
        report.blobsAsked = wants.count
        try send(.want, Messages.Wants(blobs: wants))
        func finish(_ hash: BlobHash, _ number: UInt64) throws(SyncError) {
            do throws(EventStoreError) {
                _ = try blobs.store.commit(number, owner: owner, expected: hash)
            } catch {
                if error.reason == .invalidParams {
                    // Its bytes are gone; the blob is asked again, of this peer or another.
                    throw SyncError(
                        .invalidPeer,
                        "the peer's bytes of \(hash) do not hash to it: they were dropped, and the blob is asked again at the next session"
                    )
                }
                throw SyncError(
                    error.reason == .storageFull ? .storageFull : .storage, "cannot store \(hash): \(error.message)")
            }
            arrived.append(hash)
            report.blobsReceived += 1
        }
        func begin(_ hash: BlobHash) throws(SyncError) -> UInt64? {
            let (size, offset) = asked[hash]!
            do throws(EventStoreError) {
                let (number, held) = try blobs.store.resume(hash, size: size, owner: owner)
                guard held == offset else {
                    blobs.store.releaseAll(owner: owner)
                    throw EventStoreError(.unavailable, "its partial file changed during the session")
                }
                return number
            } catch {
                if error.reason == .storageFull {
                    throw SyncError(.storageFull, "this node cannot take blob \(hash): \(error.message)")
                }
                // Being received in another session, or too many uploads: its chunks are
                // passed over, and a later session asks for it again.
                skipping.insert(hash)
                report.blobsUnasked += 1
                return nil
            }
        }
        while true {
            let frame = try read()
            switch frame.kind {
            case .chunk:
                let (hash, offset, bytes) = try BlobChunk.decode(frame.payload)
                guard let (size, held) = asked[hash] else {
                    throw SyncError(.protocolError, "the peer sent a chunk of \(hash), which was not asked for")
                }
                guard offset == held, !bytes.isEmpty, UInt64(bytes.count) <= size - offset else {
                    throw SyncError(
                        .protocolError,
                        "the peer sent \(bytes.count) bytes of \(hash) at offset \(offset); \(held) of its \(size) bytes are held"
                    )
                }
                report.blobBytesReceived += bytes.count
                defer { asked[hash]!.offset += UInt64(bytes.count) }
                if skipping.contains(hash) { continue }
                if open?.hash != hash {
                    // Blobs come one after another: the previous one is released, whole or not.
                    if open != nil { blobs.store.releaseAll(owner: owner) }
                    open = nil
                    guard let number = try begin(hash) else { continue }
                    open = (hash, number)
                }
                let number = open!.number
                let received = try storage { () throws(EventStoreError) in
                    try blobs.store.write(number, offset: offset, bytes: Array(bytes), owner: owner)
                }
                if received == size {
                    open = nil
                    try finish(hash, number)
                }
            case .blobsDone:
                let done = try Messages.decode(Messages.BlobsDone.self, frame.payload, frame: "blobs_done")
                let missing = Set(done.missing.prefix(Messages.Wants.maxWants))
                report.blobsMissing += missing.count
                // A blob of no bytes takes no chunk: the peer's done says it holds it.
                for want in wants where want.size == 0 && !missing.contains(want.hash) {
                    let hash = BlobHash(want.hash)!
                    if let number = try begin(hash) { try finish(hash, number) }
                }
                return
            default:
                throw SyncError(
                    .protocolError, "the peer sent a \(frame.kind) frame where a chunk or blobs_done belongs")
            }
        }
    }

    /// Answers the peer's `want`: the chunks of each blob asked for that this node holds at
    /// the size named, from the offset the peer holds, then `blobs_done`.
    func serveBlobs(_ blobs: SyncBlobs) throws(SyncError) {
        let wants = try Messages.decode(Messages.Wants.self, try expect(.want).payload, frame: "want")
        guard wants.blobs.count <= Messages.Wants.maxWants else {
            throw SyncError(
                .protocolError,
                "the peer's want frame asks for \(wants.blobs.count) blobs; at most \(Messages.Wants.maxWants) are allowed")
        }
        var sent = 0
        var missing: [String] = []
        var held: [(hash: BlobHash, size: UInt64, offset: UInt64)] = []
        for want in wants.blobs {
            guard let hash = BlobHash(want.hash), let size = blobs.store.size(of: hash), size == want.size,
                want.offset <= size
            else {
                missing.append(String(want.hash.prefix(71)))
                continue
            }
            // Asked twice, sent once.
            if !held.contains(where: { $0.hash == hash }) { held.append((hash, size, want.offset)) }
        }
        // What the peer asked for that this side holds and has not sent whole, as it goes:
        // a cut session leaves the rest.
        report.blobsPeerWants = held.count
        for (hash, size, start) in held {
            var offset = start
            while offset < size {
                let (_, bytes) = try storage { () throws(EventStoreError) in
                    try blobs.store.read(hash, offset: offset, length: BlobChunk.maxBytes)
                }
                guard !bytes.isEmpty else { break }
                try channel.write(Frame(kind: .chunk, payload: BlobChunk.encode(hash, offset: offset, bytes: bytes)))
                offset += UInt64(bytes.count)
                report.blobBytesSent += bytes.count
            }
            sent += 1
            report.blobsPeerWants -= 1
        }
        report.blobsSent += sent
        try send(.blobsDone, Messages.BlobsDone(sent: sent, missing: missing))
    }
}
