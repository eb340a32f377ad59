import Projections

/// A blob stored events name and this node does not hold.
public struct PendingBlob: Equatable, Sendable {
    public var hash: BlobHash
    public var size: UInt64
    /// The first stored event that named it.
    public var since: ULID
}

extension Event {
    /// The blobs this event names in its values (an edit's, an added element); a value
    /// that is not a well-formed reference names none (a peer's event is stored whatever
    /// its values say).
    public var blobReferences: [BlobReference] {
        switch body {
        case .edit(let fields, _): BlobReference.wellFormed(in: fields.lazy.map(\.value))
        case .add(_, let element): BlobReference.wellFormed(in: CollectionOfOne(element))
        default: []
        }
    }
}

extension EventLog {
    /// The blobs stored events name whose bytes this node does not hold, in hash order from
    /// `after`, at most `limit` (entries whose blob arrived since are left out).
    public func pendingBlobs(after: BlobHash? = nil, limit: Int = .max) throws(EventStoreError) -> [PendingBlob] {
        let present = options.blobPresent
        return try reading { txn in
            var found: [PendingBlob] = []
            try txn.withCursor(tables.blobPending) { cursor in
                var item = try after.map { try cursor.seek($0.digest) } ?? cursor.first()
                if let after, item?.key == after.digest { item = try cursor.next() }
                while let (key, value) = item, found.count < limit {
                    if let blob = EventLog.pendingBlob(key, value), !(present?(blob.hash) ?? false) {
                        found.append(blob)
                    }
                    item = try cursor.next()
                }
            }
            return found
        }
    }

    /// Whether `hash` is pending here: named by a stored event, its bytes not held.
    public func isPendingBlob(_ hash: BlobHash) throws(EventStoreError) -> PendingBlob? {
        let present = options.blobPresent
        return try reading { txn in
            guard let value = try txn.get(tables.blobPending, hash.digest),
                let blob = EventLog.pendingBlob(hash.digest, value), !(present?(hash) ?? false)
            else { return nil }
            return blob
        }
    }

    /// Whether the pending list has an entry for `hash`, its bytes held or not.
    public func listsPendingBlob(_ hash: BlobHash) throws(EventStoreError) -> Bool {
        try reading { txn in try txn.get(tables.blobPending, hash.digest) != nil }
    }

    /// The entries of the pending list (a blob that arrived since may still have one until
    /// a session or a put takes it off).
    public func pendingBlobEntries() throws(EventStoreError) -> Int {
        try reading { txn in try txn.stat(tables.blobPending).entries }
    }

    static func pendingBlob(_ key: [UInt8], _ value: [UInt8]) -> PendingBlob? {
        guard key.count == 32, value.count == 24, let since = ULID(bytes: Array(value[8...])) else { return nil }
        return PendingBlob(hash: BlobHash(digest: key), size: uint64(bigEndian: Array(value[..<8])), since: since)
    }

    /// Indexes every stored event's references to blobs (`blob_refs`) and lists the blobs
    /// they name that the node does not hold (`blob_pending`): the upgrade to format 6.
    func indexBlobReferences(txn: inout WriteTransaction) throws {
        for entity in try allEntities(txn: txn) {
            for event in try events(of: entity, txn: txn) {
                try EventLog.recordReferences(event, options: options, tables: tables, txn: &txn)
            }
        }
    }

    /// The `blob_refs` key of `event`'s reference to `hash`.
    static func referenceKey(_ hash: BlobHash, _ event: ULID) -> [UInt8] { hash.digest + event.bytes }

    /// Indexes the references `event` makes and lists the blobs it names that the node does
    /// not hold and are not listed yet.
    static func recordReferences(
        _ event: Event, options: StoreOptions, tables: Tables, txn: inout WriteTransaction
    ) throws {
        switch event.body {
        case .edit, .add: break
        default: return
        }
        let references = event.blobReferences
        guard !references.isEmpty else { return }
        for reference in references {
            try txn.put(tables.blobReferences, referenceKey(reference.hash, event.id), event.origin.bytes)
        }
        guard let present = options.blobPresent else { return }
        for reference in references where !present(reference.hash) {
            if try txn.get(tables.blobPending, reference.hash.digest) == nil {
                try txn.put(tables.blobPending, reference.hash.digest, bigEndian(reference.size) + event.id.bytes)
            }
        }
    }
}

extension WriteBatch {
    /// Indexes the references a stored event makes to blobs, and lists those the node does
    /// not hold (a peer's event whose blob has not come yet), in the event's transaction.
    func recordBlobReferences(of event: Event, txn: inout WriteTransaction) throws {
        try EventLog.recordReferences(event, options: log.options, tables: log.tables, txn: &txn)
    }
}

/// Blobs that arrived whole (sync received them, a client put them): no longer pending.
public struct BlobsArrivedJob: WriteJob {
    public var hashes: [BlobHash]
    public init(_ hashes: [BlobHash]) { self.hashes = hashes }
    public var weight: Int { hashes.count }
    public func run(in scope: inout WriteScope) throws {
        for hash in hashes { _ = try scope.txn.delete(scope.log.tables.blobPending, hash.digest) }
    }
}
