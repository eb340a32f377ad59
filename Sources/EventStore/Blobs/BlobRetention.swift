import Projections

/// Why a blob is kept, or that nothing needs it.
public enum BlobNeed: Equatable, Sendable {
    /// The current state of the entity names it: a field's value (one of a conflict's
    /// values too) or a set's element, and the entity is not deleted.
    case live(EntityKey)
    /// The event names it and the peer (its index among those asked about) does not hold
    /// the event yet: when the event reaches it, it will ask for the blob.
    case peerLacks(peer: Int, event: ULID)
    /// Named by no live value and by no event a peer still lacks (`references` events name
    /// it: overwritten, removed, or of a deleted entity).
    case unused(references: Int)

    public var isNeeded: Bool {
        if case .unused = self { return false }
        return true
    }
}

/// A blob retention found needed by nothing.
public struct UnusedBlob: Equatable, Sendable {
    public var hash: BlobHash
    /// Its size when held; nil when only listed as pending (its bytes never came).
    public var size: UInt64?
    /// When retention first found it unused (milliseconds since the Unix epoch); nil in a
    /// dry run that found it unused for the first time.
    public var since: UInt64?
}

/// What a run of retention did (or, in a dry run, would do).
public struct BlobRetentionReport: Equatable, Sendable {
    /// Blobs held or pending that something still needs.
    public var needed = 0
    /// Removed (held: their bytes; pending: their place on the pending list and what a
    /// session had received of them).
    public var removed: [UnusedBlob] = []
    /// Unused, kept until `blob_retention_s` has passed since they were first found unused.
    public var kept: [UnusedBlob] = []

    public init() {}

    /// The bytes the removed blobs held.
    public var bytesRemoved: UInt64 { removed.reduce(0) { $0 + ($1.size ?? 0) } }
}

extension EventLog {
    /// Whether anything still needs the blob `hash`: the current state of an entity that is
    /// not deleted (a field's value, each of a conflict's values, a set's element), or an
    /// event naming it that one of `peers` does not hold yet. The cost is the events that
    /// name the blob (`blob_refs`), one decode each, and one projection per entity.
    public func blobNeed(_ hash: BlobHash, peers: [PeerHoldings]) throws(EventStoreError) -> BlobNeed {
        try reading { txn in try blobNeed(hash, peers: peers, txn: txn) }
    }

    func blobNeed(_ hash: BlobHash, peers: [PeerHoldings], txn: borrowing some TransactionReading & ~Copyable)
        throws -> BlobNeed
    {
        var references: [(id: ULID, origin: ULID)] = []
        try txn.withCursor(tables.blobReferences) { cursor in
            var item = try cursor.seek(hash.digest)
            while let current = item, current.key.count == 48, current.key.starts(with: hash.digest) {
                guard let id = ULID(bytes: Array(current.key[32...])), let origin = ULID(bytes: current.value) else {
                    throw CorruptDataError("a blob_refs entry of \(hash) is not an event id and an origin")
                }
                references.append((id, origin))
                item = try cursor.next()
            }
        }
        for (id, origin) in references {
            if let peer = peers.firstIndex(where: { !$0.holds(id, origin: origin) }) {
                return .peerLacks(peer: peer, event: id)
            }
        }
        var checked = Set<EntityKey>()
        for (id, _) in references {
            guard let entity = try readEvent(id, txn: txn)?.entity else { continue }
            guard checked.insert(entity).inserted, let record = try txn.get(tables.projections, entity.bytes) else {
                continue
            }
            let (_, state, _) = try EventLog.decodeProjection(
                try expanded(record, entity: entity, txn: txn), entity: entity)
            if !state.isDeleted, EventLog.state(state, names: hash) { return .live(entity) }
        }
        return .unused(references: references.count)
    }

    /// Whether a value of `state` names `hash`: a field's head (every head of a conflict)
    /// or a set's element.
    static func state(_ state: EntityState, names hash: BlobHash) -> Bool {
        for field in state.fields {
            for head in field.heads where BlobReference.hashes(inJSON: head.value.bytes).contains(hash) { return true }
        }
        for set in state.sets {
            for element in set.elements where BlobReference.hashes(inJSON: element.element.bytes).contains(hash) {
                return true
            }
        }
        return false
    }

    /// When retention first found `hash` unused, nil when it has not (or found it needed since).
    public func blobUnusedSince(_ hash: BlobHash) throws(EventStoreError) -> UInt64? {
        try reading { txn in try txn.get(tables.blobUnused, hash.digest).map(uint64(bigEndian:)) }
    }

    /// Retention without changing anything: what a run at `now` would remove and keep.
    public func blobRetentionDryRun(
        _ candidates: [(hash: BlobHash, size: UInt64?)], peers: [PeerHoldings], now: UInt64,
        retentionMilliseconds: UInt64
    ) throws(EventStoreError) -> BlobRetentionReport {
        try reading { txn in
            var report = BlobRetentionReport()
            for (hash, size) in candidates {
                guard !(try blobNeed(hash, peers: peers, txn: txn)).isNeeded else {
                    report.needed += 1
                    continue
                }
                let since = try txn.get(tables.blobUnused, hash.digest).map(uint64(bigEndian:))
                let blob = UnusedBlob(hash: hash, size: size, since: since)
                if (since ?? now) + retentionMilliseconds <= now {
                    report.removed.append(blob)
                } else {
                    report.kept.append(blob)
                }
            }
            return report
        }
    }
}

/// One run of blob retention over `candidates` (the blobs held, and those pending), in the
/// writer, so that no append naming a blob can pass between the check and the removal (a
/// local append checks in the writer that the blobs it names are held).
///
/// A blob something needs (`EventLog.blobNeed`) loses its mark; one needed by nothing is
/// marked with `now` the first time, and removed once `retentionMilliseconds` have passed
/// since its mark: its file, what a session received of it, and its place on the pending
/// list. The removal of files comes after every table write, so a job that fails removes
/// nothing. The writer bounds a group by the weight: at most `maxCandidates` a job.
public struct BlobRetentionJob: WriteJob {
    public static let maxCandidates = 512

    public var candidates: [(hash: BlobHash, size: UInt64?)]
    public var peers: [PeerHoldings]
    public var now: UInt64
    public var retentionMilliseconds: UInt64
    public var store: BlobStore

    public init(
        _ candidates: [(hash: BlobHash, size: UInt64?)], peers: [PeerHoldings], now: UInt64,
        retentionMilliseconds: UInt64, store: BlobStore
    ) {
        self.candidates = candidates
        self.peers = peers
        self.now = now
        self.retentionMilliseconds = retentionMilliseconds
        self.store = store
    }

    public var weight: Int { candidates.count }

    public func run(in scope: inout WriteScope) throws -> BlobRetentionReport {
        let tables = scope.log.tables
        var report = BlobRetentionReport()
        for (hash, size) in candidates {
            if try scope.log.blobNeed(hash, peers: peers, txn: scope.txn).isNeeded {
                report.needed += 1
                _ = try scope.txn.delete(tables.blobUnused, hash.digest)
                continue
            }
            let since = try scope.txn.get(tables.blobUnused, hash.digest).map(uint64(bigEndian:))
            let mark = since ?? now
            guard mark + retentionMilliseconds <= now else {
                if since == nil { try scope.txn.put(tables.blobUnused, hash.digest, bigEndian(now)) }
                report.kept.append(UnusedBlob(hash: hash, size: size, since: mark))
                continue
            }
            report.removed.append(UnusedBlob(hash: hash, size: size, since: mark))
            if since != nil { _ = try scope.txn.delete(tables.blobUnused, hash.digest) }
            _ = try scope.txn.delete(tables.blobPending, hash.digest)
        }
        for blob in report.removed { try store.remove(blob.hash) }
        return report
    }
}

extension EventLog {
    /// The blobs stored events name that something still needs (`blobNeed`), that
    /// `present` says this node does not hold, and that the pending list lacks: those
    /// whose files went after their events were stored (a backup restored without its
    /// blobs directory, files removed by hand). Each with the size and id of the first
    /// event that names it. The cost is the references (`blob_refs`), not the events.
    public func unlistedMissingBlobs(present: (BlobHash) -> Bool, peers: [PeerHoldings]) throws(EventStoreError)
        -> [PendingBlob]
    {
        try reading { txn in
            var hashes: [BlobHash] = []
            try txn.withCursor(tables.blobReferences) { cursor in
                var item = try cursor.first()
                while let current = item {
                    guard current.key.count == 48 else {
                        throw CorruptDataError("a blob_refs key is not a blob's digest and an event id")
                    }
                    let digest = Array(current.key[..<32])
                    hashes.append(BlobHash(digest: digest))
                    // The next blob's first reference.
                    item = try cursor.seek(digest + [UInt8](repeating: 0xFF, count: 16))
                    if item?.key.starts(with: digest) == true { item = try cursor.next() }
                }
            }
            var found: [PendingBlob] = []
            for hash in hashes where !present(hash) {
                guard try txn.get(tables.blobPending, hash.digest) == nil,
                    try blobNeed(hash, peers: peers, txn: txn).isNeeded
                else { continue }
                // The first event that names it gives its size.
                let first = try txn.withCursor(tables.blobReferences) { try $0.seek(hash.digest) }
                guard let first, let id = ULID(bytes: Array(first.key[32...])),
                    let reference = try readEvent(id, txn: txn)?.blobReferences.first(where: { $0.hash == hash })
                else { continue }
                found.append(PendingBlob(hash: hash, size: reference.size, since: id))
            }
            return found
        }
    }
}

/// Puts blobs on the pending list (`EventLog.unlistedMissingBlobs`), unless listed already.
public struct ListPendingBlobsJob: WriteJob {
    public var blobs: [PendingBlob]
    public init(_ blobs: [PendingBlob]) { self.blobs = blobs }
    public var weight: Int { blobs.count }
    public func run(in scope: inout WriteScope) throws {
        let table = scope.log.tables.blobPending
        for blob in blobs where try scope.txn.get(table, blob.hash.digest) == nil {
            try scope.txn.put(table, blob.hash.digest, bigEndian(blob.size) + blob.since.bytes)
        }
    }
}
