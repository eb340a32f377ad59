import FoundationEssentials
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The blobs of one data directory: photos, signatures, documents, each a file named by
/// the SHA-256 of its bytes under `blobs/sha256/`, written whole and durably before its
/// name is given out, never changed after.
///
/// Blob bytes never pass through the writer or LMDB: LMDB has one write transaction at a
/// time, so a 100 MiB blob written there would hold up every append for as long as it
/// takes. A blob arrives as an upload (`begin`, `write` in order, `commit`) into a file of
/// its own under `blobs/uploads/`, hashed as it arrives; `commit` checks the size and the
/// hash, syncs the file and renames it into place, so a blob is either whole under its name
/// or absent. Uploads left by a crash are removed when the store opens.
///
/// Bounded: each blob by `maxBlobBytes`; all blobs, and the uploads under way, by
/// `maxTotalBytes`; and none is taken that would leave the file system less than
/// `reserveBytes` free, so the event log runs out of room long after blobs do. Uploads are
/// bounded in number, in all and per owner (a connection).
public final class BlobStore: Sendable {
    public struct Limits: Sendable, Equatable {
        /// `max_blob_bytes`: the largest blob.
        public var maxBlobBytes: UInt64 = 256 << 20
        /// `max_blob_store_bytes`: all blobs, with the uploads under way.
        public var maxTotalBytes: UInt64 = 16 << 30
        /// `blob_reserve_bytes`: what a blob may not take of the file system's free space.
        public var reserveBytes: UInt64 = 1 << 30
        /// `max_blob_uploads`: uploads under way at once, in all.
        public var maxUploads = 16
        /// Uploads one owner (a client's connection) may have under way at once.
        public var maxUploadsPerOwner = 2
        /// An upload with no write for this long may be taken back to make room for another.
        public var idleUploadSeconds: Double = 120

        public init() {}
    }

    /// What the store holds.
    public struct Statistics: Sendable, Equatable {
        public var blobs: Int
        public var bytes: UInt64
        public var uploads: Int
        /// Blobs sessions are receiving now, and the bytes kept of those partly received.
        public var receiving: Int = 0
        public var partialBytes: UInt64 = 0
    }

    public let directory: String
    public let limits: Limits
    private var blobDirectory: String { directory + "/sha256" }
    private var uploadDirectory: String { directory + "/uploads" }
    private var partialDirectory: String { directory + "/partial" }

    private struct State {
        var uploads: [UInt64: Upload] = [:]
        var nextUpload: UInt64 = 1
        var blobs = 0
        var bytes: UInt64 = 0
        /// The declared sizes of the uploads under way.
        var reserved: UInt64 = 0
        /// The bytes of the partial files no session is adding to.
        var partialBytes: UInt64 = 0
        /// The blobs a session is receiving into their partial files.
        var receiving = Set<BlobHash>()
    }

    private let state: Mutex<State>

    /// The SHA-256 of each chunk of the blobs sent or received lately: a blob never changes
    /// under its name, so a node that serves one blob to many peers (a gateway and its
    /// devices) reads and hashes it once, not once per session. Bounded in entries and in
    /// digest bytes (`manifestCacheBytes`: 1 MiB holds the manifests of 16 GiB of blobs at
    /// 512 KiB a chunk); the least recently used go first.
    private let manifests = Mutex(
        LeastRecentlyUsed<BlobHash, Manifest>(
            maxEntries: BlobStore.manifestCacheEntries, maxCost: BlobStore.manifestCacheBytes))
    static let manifestCacheEntries = 256
    static let manifestCacheBytes = 1 << 20

    /// A blob's chunk digests, for chunks of `chunkBytes` of its `size` bytes.
    struct Manifest {
        let chunkBytes: Int
        let size: UInt64
        let digests: [[UInt8]]
    }

    /// Opens (creating) the blob store in `directory`, removing what a crash left of uploads,
    /// and counts what it holds.
    public init(directory: String, limits: Limits = Limits()) throws(EventStoreError) {
        self.directory = directory
        self.limits = limits
        for path in [directory, directory + "/sha256", directory + "/uploads", directory + "/partial"] {
            if mkdir(path, 0o700) != 0, errno != EEXIST {
                throw Self.failure("cannot create \(path)", errno)
            }
        }
        var initial = State()
        for name in BlobFile.names(in: directory + "/uploads") {
            unlink(directory + "/uploads/" + name)
        }
        // What sessions received of blobs not yet whole stays, for the next session.
        for name in BlobFile.names(in: directory + "/partial") {
            var info = stat()
            if BlobHash(BlobHash.prefix + name) != nil, stat(directory + "/partial/" + name, &info) == 0 {
                initial.partialBytes += UInt64(info.st_size)
            } else {
                unlink(directory + "/partial/" + name)
            }
        }
        for prefix in BlobFile.names(in: directory + "/sha256") {
            let folder = directory + "/sha256/" + prefix
            for name in BlobFile.names(in: folder) {
                var info = stat()
                guard stat(folder + "/" + name, &info) == 0, BlobHash(BlobHash.prefix + name) != nil else { continue }
                initial.blobs += 1
                initial.bytes += UInt64(info.st_size)
            }
        }
        state = Mutex(initial)
    }

    // MARK: - Reading

    /// The size of the blob `hash`, nil when this store does not hold it.
    public func size(of hash: BlobHash) -> UInt64? {
        var info = stat()
        guard stat(path(of: hash), &info) == 0 else { return nil }
        return UInt64(info.st_size)
    }

    public func contains(_ hash: BlobHash) -> Bool { size(of: hash) != nil }

    /// Appends to `out` up to `length` bytes of the blob `hash` from `offset` (fewer at its
    /// end): how many it appended.
    public func read(_ hash: BlobHash, offset: UInt64, length: Int, appendingTo out: inout [UInt8])
        throws(EventStoreError) -> Int
    {
        let descriptor = open(path(of: hash), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { throw EventStoreError(.notFound, "this node holds no blob \(hash)") }
            throw Self.failure("cannot open blob \(hash)", errno)
        }
        defer { close(descriptor) }
        return try BlobFile.read(descriptor, count: length, at: offset, appendingTo: &out)
    }

    /// Up to `length` bytes of the blob `hash` from `offset`, with the blob's size.
    public func read(_ hash: BlobHash, offset: UInt64, length: Int) throws(EventStoreError) -> (
        size: UInt64, bytes: [UInt8]
    ) {
        let descriptor = open(path(of: hash), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { throw EventStoreError(.notFound, "this node holds no blob \(hash)") }
            throw Self.failure("cannot open blob \(hash)", errno)
        }
        defer { close(descriptor) }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw Self.failure("cannot read blob \(hash)", errno) }
        let size = UInt64(info.st_size)
        guard offset <= size else {
            throw EventStoreError(.invalidParams, "offset \(offset) is past the end of blob \(hash), \(size) bytes")
        }
        let bytes = try BlobFile.read(descriptor, count: Int(min(UInt64(length), size - offset)), at: offset)
        return (size, bytes)
    }

    /// Every blob held, with its size, in no particular order.
    public func list() -> [(hash: BlobHash, size: UInt64)] {
        var found: [(hash: BlobHash, size: UInt64)] = []
        for prefix in BlobFile.names(in: blobDirectory) {
            let folder = blobDirectory + "/" + prefix
            for name in BlobFile.names(in: folder) {
                var info = stat()
                guard let hash = BlobHash(BlobHash.prefix + name), stat(folder + "/" + name, &info) == 0 else {
                    continue
                }
                found.append((hash, UInt64(info.st_size)))
            }
        }
        return found
    }

    /// Removes the blob `hash` (retention found nothing needs it) and what sessions received
    /// of it, unless a session is receiving it now.
    public func remove(_ hash: BlobHash) throws(EventStoreError) {
        manifests.withLock { $0.remove(hash) }
        let path = path(of: hash)
        var info = stat()
        if stat(path, &info) == 0 {
            guard unlink(path) == 0 || errno == ENOENT else { throw Self.failure("cannot remove blob \(hash)", errno) }
            state.withLock {
                $0.blobs -= min($0.blobs, 1)
                $0.bytes -= min($0.bytes, UInt64(info.st_size))
            }
        }
        let partial = partialDirectory + "/" + hash.hex
        let receiving = state.withLock { $0.receiving.contains(hash) }
        if !receiving, stat(partial, &info) == 0, unlink(partial) == 0 {
            state.withLock { $0.partialBytes -= min($0.partialBytes, UInt64(info.st_size)) }
        }
    }

    public func statistics() -> Statistics {
        state.withLock {
            Statistics(
                blobs: $0.blobs, bytes: $0.bytes, uploads: $0.uploads.count - $0.receiving.count,
                receiving: $0.receiving.count, partialBytes: $0.partialBytes)
        }
    }

    // MARK: - Uploads

    /// Starts an upload of a blob of `size` bytes for `owner`: its number, for `write` and
    /// `commit`. Its size is counted against the total from now on.
    public func begin(size: UInt64, owner: Int) throws(EventStoreError) -> UInt64 {
        guard size <= limits.maxBlobBytes else {
            throw EventStoreError(
                .tooLarge, "a blob of \(size) bytes is over max_blob_bytes, \(limits.maxBlobBytes): nothing was stored")
        }
        let free = freeBytes()
        let now = Self.now()
        let number: UInt64 = try state.withLock { state throws(EventStoreError) in
            try makeRoom(&state, now: now)
            guard state.uploads.values.count(where: { $0.owner == owner }) < limits.maxUploadsPerOwner else {
                throw EventStoreError(
                    .unavailable,
                    "this connection has \(limits.maxUploadsPerOwner) blob uploads under way already: commit or abort one first"
                )
            }
            try checkRoom(state, for: size, free: free)
            let number = state.nextUpload
            state.nextUpload += 1
            let path = uploadDirectory + "/\(number)"
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard descriptor >= 0 else { throw Self.failure("cannot create \(path)", errno) }
            state.uploads[number] = Upload(
                path: path, descriptor: descriptor, size: size, owner: owner, lastActivity: now)
            state.reserved += size
            return number
        }
        return number
    }

    /// Takes back, when every upload is under way, those nobody wrote to for a while; then
    /// refuses a new one if none could be.
    private func makeRoom(_ state: inout State, now: Double) throws(EventStoreError) {
        if state.uploads.count >= limits.maxUploads {
            for (number, upload) in state.uploads where now - upload.lastActivity > limits.idleUploadSeconds {
                state.uploads[number] = nil
                state.reserved -= upload.size
                if let hash = upload.partial {
                    state.receiving.remove(hash)
                    upload.closeFile()
                } else {
                    upload.discard()
                }
            }
        }
        guard state.uploads.count < limits.maxUploads else {
            throw EventStoreError(
                .unavailable,
                "\(limits.maxUploads) blob uploads are under way (max_blob_uploads): try again when one has ended")
        }
    }

    /// Refuses `size` more bytes past the total or the disk's reserve.
    private func checkRoom(_ state: State, for size: UInt64, free: UInt64?) throws(EventStoreError) {
        guard state.bytes + state.reserved + state.partialBytes + size <= limits.maxTotalBytes else {
            throw EventStoreError(
                .storageFull,
                "the blobs would take more than max_blob_store_bytes, \(limits.maxTotalBytes) (held \(state.bytes), being uploaded \(state.reserved), partly received \(state.partialBytes)): nothing was stored"
            )
        }
        if let free, free < state.reserved + size + limits.reserveBytes {
            throw EventStoreError(
                .storageFull,
                "the disk has \(free) bytes free, and a blob may not leave less than blob_reserve_bytes, \(limits.reserveBytes), for the event log: nothing was stored"
            )
        }
    }

    // MARK: - Receiving from peers

    /// Whether a session is receiving the blob `hash` now.
    public func isReceiving(_ hash: BlobHash) -> Bool { state.withLock { $0.receiving.contains(hash) } }

    /// The bytes a session received of the blob `hash` and kept (its partial file), nil
    /// when none.
    public func partialSize(_ hash: BlobHash) -> UInt64? {
        var info = stat()
        guard stat(partialDirectory + "/" + hash.hex, &info) == 0 else { return nil }
        return UInt64(info.st_size)
    }

    /// Goes on receiving the blob `hash` of `size` bytes for `owner` (a sync session), from
    /// what earlier sessions kept of it: the upload's number, the offset the rest starts at
    /// (what is kept, cut to whole chunks of `chunkBytes`), and the SHA-256 of each chunk
    /// kept, for the caller to hold against the peer's. The kept bytes are hashed again
    /// first; the whole blob is checked against `hash` when it is committed. Refused
    /// (`unavailable`) while another session receives it.
    public func resume(_ hash: BlobHash, size: UInt64, owner: Int, chunkBytes: Int) throws(EventStoreError) -> (
        number: UInt64, offset: UInt64, chunks: [[UInt8]]
    ) {
        guard size <= limits.maxBlobBytes else {
            throw EventStoreError(
                .tooLarge, "a blob of \(size) bytes is over max_blob_bytes, \(limits.maxBlobBytes): it is not fetched")
        }
        let path = partialDirectory + "/" + hash.hex
        let claimed = state.withLock { $0.receiving.insert(hash).inserted }
        guard claimed else { throw EventStoreError(.unavailable, "another session is receiving \(hash)") }
        var registered = false
        defer { if !registered { state.withLock { _ = $0.receiving.remove(hash) } } }
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Self.failure("cannot open \(path)", errno) }
        let found = BlobFile.regularFileSize(descriptor) ?? 0
        var held = found > size ? 0 : found - found % UInt64(chunkBytes)
        let hasher = SHA256.Hasher()
        var chunks: [[UInt8]] = []
        do throws(EventStoreError) {
            if held != found {
                // Longer than the blob, or a chunk cut short (a kill mid-write): kept only
                // up to the last whole chunk.
                guard ftruncate(descriptor, off_t(held)) == 0 else {
                    throw Self.failure("cannot truncate \(path)", errno)
                }
                state.withLock { $0.partialBytes -= min($0.partialBytes, found - held) }
            }
            var offset: UInt64 = 0
            while offset < held {
                let piece = try BlobFile.read(
                    descriptor, count: Int(min(held - offset, UInt64(chunkBytes))), at: offset)
                guard !piece.isEmpty else { break }
                hasher.update(piece)
                chunks.append(SHA256.digest(piece))
                offset += UInt64(piece.count)
            }
            held = offset
        } catch {
            close(descriptor)
            throw error
        }
        let free = freeBytes()
        let number: UInt64
        do throws(EventStoreError) {
            number = try state.withLock { state throws(EventStoreError) in
                try makeRoom(&state, now: Self.now())
                var others = state
                others.partialBytes -= min(others.partialBytes, held)
                try checkRoom(others, for: size, free: free.map { $0 + held })
                let number = state.nextUpload
                state.nextUpload += 1
                state.uploads[number] = Upload(
                    path: path, descriptor: descriptor, size: size, owner: owner, lastActivity: Self.now(),
                    received: held, hasher: hasher, partial: hash)
                state.reserved += size
                state.partialBytes = others.partialBytes
                return number
            }
        } catch {
            close(descriptor)
            throw error
        }
        registered = true
        return (number, held, chunks)
    }

    /// Cuts what sessions kept of the blob `hash` to its first `length` bytes (the chunks a
    /// peer's hashes agree with), unless a session is receiving it now.
    public func truncatePartial(_ hash: BlobHash, to length: UInt64) throws(EventStoreError) {
        let path = partialDirectory + "/" + hash.hex
        try state.withLock { state throws(EventStoreError) in
            guard !state.receiving.contains(hash) else { return }
            var info = stat()
            guard stat(path, &info) == 0, UInt64(info.st_size) > length else { return }
            guard truncate(path, off_t(length)) == 0 else { throw Self.failure("cannot truncate \(path)", errno) }
            state.partialBytes -= min(state.partialBytes, UInt64(info.st_size) - length)
        }
    }

    /// The SHA-256 of each `chunkBytes` of the blob `hash`, in order (none for an empty
    /// blob): what a peer checks each chunk against before it keeps it.
    public func chunkDigests(_ hash: BlobHash, chunkBytes: Int) throws(EventStoreError) -> [[UInt8]] {
        let descriptor = open(path(of: hash), O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { throw EventStoreError(.notFound, "this node holds no blob \(hash)") }
            throw Self.failure("cannot open blob \(hash)", errno)
        }
        defer { close(descriptor) }
        guard let size = BlobFile.regularFileSize(descriptor) else {
            throw Self.failure("cannot read blob \(hash)", EIO)
        }
        if let known = manifests.withLock({
            $0.value(for: hash) { $0.chunkBytes == chunkBytes && $0.size == size }
        }) {
            return known.digests
        }
        var digests: [[UInt8]] = []
        digests.reserveCapacity(Int((size + UInt64(chunkBytes) - 1) / UInt64(chunkBytes)))
        var offset: UInt64 = 0
        while offset < size {
            let piece = try BlobFile.read(descriptor, count: Int(min(size - offset, UInt64(chunkBytes))), at: offset)
            guard !piece.isEmpty else { throw Self.failure("blob \(hash) ended at \(offset) of \(size) bytes", EIO) }
            digests.append(SHA256.digest(piece))
            offset += UInt64(piece.count)
        }
        remember(hash, chunkBytes: chunkBytes, size: size, digests: digests)
        return digests
    }

    /// Keeps the chunk digests of the blob `hash` for `chunkDigests`: a receiver's, once the
    /// blob they describe is stored and checked whole against its name.
    public func remember(_ hash: BlobHash, chunkBytes: Int, size: UInt64, digests: [[UInt8]]) {
        manifests.withLock {
            $0.set(
                Manifest(chunkBytes: chunkBytes, size: size, digests: digests), for: hash,
                cost: digests.count * SHA256.byteCount)
        }
    }

    /// The chunk digests kept for `hash`, if any (for tests).
    func rememberedDigests(_ hash: BlobHash) -> [[UInt8]]? {
        manifests.withLock { $0.peek(hash)?.digests }
    }

    /// Ends the receipts of `owner` (its session ended) that are not whole: what they
    /// received is synced and kept for the next session.
    public func releaseAll(owner: Int) {
        let released = state.withLock { state -> [Upload] in
            let mine = state.uploads.filter { $0.value.owner == owner && $0.value.partial != nil }
            for (number, upload) in mine {
                state.uploads[number] = nil
                state.reserved -= upload.size
                state.receiving.remove(upload.partial!)
            }
            return Array(mine.values)
        }
        for upload in released {
            let kept = upload.closeKeeping()
            state.withLock { $0.partialBytes += kept }
        }
    }

    /// Adds `bytes` at `offset` to the upload `number` of `owner`: uploads are written in
    /// order, so `offset` is what it has received. Returns what it has received then.
    @discardableResult
    public func write(_ number: UInt64, offset: UInt64, bytes: [UInt8], owner: Int) throws(EventStoreError) -> UInt64 {
        try write(number, offset: offset, bytes: bytes[...], owner: owner)
    }

    /// As `write(_:offset:bytes:owner:)`, from a part of a buffer (a chunk frame's payload).
    @discardableResult
    public func write(_ number: UInt64, offset: UInt64, bytes: ArraySlice<UInt8>, owner: Int) throws(EventStoreError)
        -> UInt64
    {
        let upload = try self.upload(number, owner: owner)
        do {
            return try upload.write(bytes, at: offset)
        } catch {
            if error.reason == .storageFull || error.reason == .unavailable { take(number) }
            throw error
        }
    }

    /// Ends the upload `number` of `owner`: its bytes, checked to be its declared size and
    /// (when given) to hash to `expected`, are synced to the disk and take their name.
    /// Returns the blob's hash and whether this store held it already.
    public func commit(_ number: UInt64, owner: Int, expected: BlobHash?) throws(EventStoreError) -> (
        hash: BlobHash, size: UInt64, existed: Bool
    ) {
        let upload = try self.upload(number, owner: owner)
        let digest: [UInt8]
        do {
            digest = try upload.finish()
        } catch {
            // Short: the upload stays for the rest.
            if error.reason == .invalidParams { throw error }
            take(number)
            throw error
        }
        take(number, keepFile: true)
        let hash = BlobHash(digest: digest)
        defer { unlink(upload.path) }
        if let expected, expected != hash {
            throw EventStoreError(
                .invalidParams, "the bytes uploaded hash to \(hash), not \(expected): nothing was stored")
        }
        let folder = blobDirectory + "/" + String(hash.hex.prefix(2))
        if contains(hash) { return (hash, upload.size, true) }
        if mkdir(folder, 0o700) == 0 {
            try Self.syncDirectory(blobDirectory)
        } else if errno != EEXIST {
            throw Self.failure("cannot create \(folder)", errno)
        }
        guard rename(upload.path, path(of: hash)) == 0 else { throw Self.failure("cannot store blob \(hash)", errno) }
        try Self.syncDirectory(folder)
        state.withLock {
            $0.blobs += 1
            $0.bytes += upload.size
        }
        return (hash, upload.size, false)
    }

    /// Stores `bytes` as a blob in one call (an upload begun, written and committed).
    public func put(_ bytes: [UInt8], owner: Int, expected: BlobHash? = nil) throws(EventStoreError) -> (
        hash: BlobHash, size: UInt64, existed: Bool
    ) {
        let number = try begin(size: UInt64(bytes.count), owner: owner)
        do {
            try write(number, offset: 0, bytes: bytes, owner: owner)
            return try commit(number, owner: owner, expected: expected)
        } catch {
            abort(number, owner: owner)
            throw error
        }
    }

    /// Stores the regular file open on `descriptor` as a blob (a client passed it), read
    /// from its start in pieces.
    public func put(from descriptor: Int32, owner: Int, expected: BlobHash? = nil) throws(EventStoreError) -> (
        hash: BlobHash, size: UInt64, existed: Bool
    ) {
        guard let size = BlobFile.regularFileSize(descriptor) else {
            throw EventStoreError(.invalidParams, "the descriptor passed is not of a regular file")
        }
        let number = try begin(size: size, owner: owner)
        do throws(EventStoreError) {
            var offset: UInt64 = 0
            while offset < size {
                let piece = try BlobFile.read(descriptor, count: Int(min(size - offset, 1 << 20)), at: offset)
                guard !piece.isEmpty else {
                    throw EventStoreError(
                        .invalidParams,
                        "the file passed ended at \(offset) of the \(size) bytes it had: nothing was stored")
                }
                try write(number, offset: offset, bytes: piece, owner: owner)
                offset += UInt64(piece.count)
            }
            return try commit(number, owner: owner, expected: expected)
        } catch {
            abort(number, owner: owner)
            throw error
        }
    }

    /// Writes the blob `hash` to the regular file open for writing on `descriptor` (a client
    /// passed it), at its offset, in the kernel; its size.
    public func copy(_ hash: BlobHash, to target: Int32) throws(EventStoreError) -> UInt64 {
        guard BlobFile.regularFileSize(target) != nil, BlobFile.isWritable(target) else {
            throw EventStoreError(.invalidParams, "the descriptor passed is not of a regular file open for writing")
        }
        let source = open(path(of: hash), O_RDONLY | O_CLOEXEC)
        guard source >= 0 else {
            if errno == ENOENT { throw EventStoreError(.notFound, "this node holds no blob \(hash)") }
            throw Self.failure("cannot open blob \(hash)", errno)
        }
        defer { close(source) }
        guard let size = BlobFile.regularFileSize(source) else { throw Self.failure("cannot read blob \(hash)", EIO) }
        try BlobFile.copy(source, to: target, count: size)
        return size
    }

    /// Drops the upload `number` of `owner` and what it received; whether it was under way.
    @discardableResult
    public func abort(_ number: UInt64, owner: Int) -> Bool {
        guard held(number, owner: owner) != nil else { return false }
        take(number)
        return true
    }

    /// Drops every upload of `owner` (its connection ended).
    public func abortAll(owner: Int) {
        let numbers = state.withLock { $0.uploads.filter { $0.value.owner == owner }.map(\.key) }
        for number in numbers { take(number) }
    }

    /// The upload `number` when `owner` has it under way.
    private func held(_ number: UInt64, owner: Int) -> Upload? {
        guard let upload = state.withLock({ $0.uploads[number] }), upload.owner == owner else { return nil }
        return upload
    }

    private func upload(_ number: UInt64, owner: Int) throws(EventStoreError) -> Upload {
        guard let upload = held(number, owner: owner) else {
            throw EventStoreError(
                .notFound,
                "no blob upload \(number) is under way on this connection (an upload ends with its connection)")
        }
        return upload
    }

    /// Removes the upload `number` from those under way (and its file, unless kept).
    private func take(_ number: UInt64, keepFile: Bool = false) {
        guard
            let upload = state.withLock({ state -> Upload? in
                guard let upload = state.uploads.removeValue(forKey: number) else { return nil }
                state.reserved -= upload.size
                if let hash = upload.partial { state.receiving.remove(hash) }
                return upload
            })
        else { return }
        if keepFile { upload.closeFile() } else { upload.discard() }
    }

    // MARK: - Files

    public func path(of hash: BlobHash) -> String {
        let hex = hash.hex
        return blobDirectory + "/" + String(hex.prefix(2)) + "/" + hex
    }

    private func freeBytes() -> UInt64? {
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { return nil }
        return UInt64(info.f_bavail) * UInt64(info.f_frsize)
    }

    static func syncDirectory(_ path: String) throws(EventStoreError) {
        let descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else { throw failure("cannot open \(path)", errno) }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw failure("cannot sync \(path)", errno) }
    }

    static func failure(_ what: String, _ code: Int32) -> EventStoreError {
        if code == ENOSPC || code == EDQUOT {
            return EventStoreError(.storageFull, "\(what): the disk is full (nothing was stored)")
        }
        return EventStoreError(.unavailable, "\(what): \(String(cString: strerror(code)))")
    }

    static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }
}

/// One blob upload under way: its file, hashed as it is written, in order.
private final class Upload: Sendable {
    let path: String
    let size: UInt64
    let owner: Int
    /// The blob a sync session receives into its partial file, kept when the session ends.
    let partial: BlobHash?

    private struct Progress {
        var descriptor: Int32
        var received: UInt64
        var lastActivity: Double
        let hasher: SHA256.Hasher
    }

    private let progress: Mutex<Progress>

    init(
        path: String, descriptor: Int32, size: UInt64, owner: Int, lastActivity: Double, received: UInt64 = 0,
        hasher: SHA256.Hasher = SHA256.Hasher(), partial: BlobHash? = nil
    ) {
        self.path = path
        self.size = size
        self.owner = owner
        self.partial = partial
        progress = Mutex(
            Progress(descriptor: descriptor, received: received, lastActivity: lastActivity, hasher: hasher))
    }

    /// Syncs and closes the file, keeping it: the bytes it holds.
    func closeKeeping() -> UInt64 {
        progress.withLock { progress in
            if progress.descriptor >= 0 {
                fsync(progress.descriptor)
                close(progress.descriptor)
            }
            progress.descriptor = -1
            return progress.received
        }
    }

    var lastActivity: Double { progress.withLock { $0.lastActivity } }

    func write(_ bytes: ArraySlice<UInt8>, at offset: UInt64) throws(EventStoreError) -> UInt64 {
        try progress.withLock { progress throws(EventStoreError) in
            guard progress.descriptor >= 0 else { throw EventStoreError(.notFound, "the upload has ended") }
            guard offset == progress.received else {
                throw EventStoreError(
                    .invalidParams,
                    "the upload has received \(progress.received) bytes, so the next write is at offset \(progress.received), not \(offset)"
                )
            }
            guard UInt64(bytes.count) <= size - progress.received else {
                throw EventStoreError(
                    .tooLarge,
                    "the upload was begun for \(size) bytes and has received \(progress.received): \(bytes.count) more are too many"
                )
            }
            try BlobFile.write(progress.descriptor, bytes, at: offset)
            BlobFile.startWriteback(progress.descriptor, at: offset, count: bytes.count)
            progress.hasher.update(bytes)
            progress.received += UInt64(bytes.count)
            progress.lastActivity = BlobStore.now()
            return progress.received
        }
    }

    /// The digest of the whole upload, once its file is on the disk.
    func finish() throws(EventStoreError) -> [UInt8] {
        try progress.withLock { progress throws(EventStoreError) in
            guard progress.received == size else {
                throw EventStoreError(
                    .invalidParams,
                    "the upload has received \(progress.received) of its \(size) bytes: write the rest before you commit it"
                )
            }
            guard fsync(progress.descriptor) == 0 else { throw BlobStore.failure("cannot sync the upload", errno) }
            return progress.hasher.finish()
        }
    }

    func closeFile() {
        progress.withLock { progress in
            if progress.descriptor >= 0 { close(progress.descriptor) }
            progress.descriptor = -1
        }
    }

    func discard() {
        closeFile()
        unlink(path)
    }
}
