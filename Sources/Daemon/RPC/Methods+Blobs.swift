import EventStore
import Projections
import UnixSocket
import Wire

/// The blob methods: bytes travel in base64 in pieces a request line can carry
/// (`blob.write` takes and `blob.get` gives at most `maxPieceBytes` at a time).
extension Methods {
    /// The most bytes one `blob.write` or `blob.get` moves (4 MiB, 5.3 MiB in base64, well
    /// inside the 16 MiB line).
    static let maxPieceBytes = 4 << 20
    /// What `blob.get` gives when `length` is not said.
    static let defaultPieceBytes = 1 << 20

    private func blobStore() throws(RPCError) -> BlobStore {
        guard let blobs else { throw RPCError.application(.unavailable, "this daemon keeps no blobs") }
        return blobs
    }

    private static func hash(_ params: Params, _ name: String) throws(RPCError) -> BlobHash? {
        guard let text = try params.string(name) else { return nil }
        guard let hash = BlobHash(text) else {
            throw RPCError.invalidParams(
                "\"\(name)\" is a blob's hash, \"sha256:\" and 64 lowercase hex digits, not \"\(text.prefix(80))\"")
        }
        return hash
    }

    private static func bytes(_ params: Params) throws(RPCError) -> [UInt8] {
        guard let text = try params.stringBytes("data") else {
            throw RPCError.invalidParams("\"data\" is required: the bytes, in base64")
        }
        guard let bytes = Base64.decode(text) else {
            throw RPCError.invalidParams("\"data\" is not base64 (RFC 4648, with padding)")
        }
        return bytes
    }

    /// A blob now held leaves the pending list (its events came before it).
    private func arrived(_ hash: BlobHash) throws {
        if try log.listsPendingBlob(hash) { try writer.perform(BlobsArrivedJob([hash]), from: -3) }
    }

    private static func committed(_ hash: BlobHash, size: UInt64, existed: Bool) -> [UInt8] {
        var out = JSONWriter()
        out.beginObject()
        out.member("hash", hash.description)
        out.member("size", Int(size))
        out.member("existed", existed)
        out.endObject()
        return out.bytes
    }

    /// The descriptor the client passed for a request with `"fd": true`, nil without it.
    private static func passedDescriptor(_ params: Params, _ caller: Caller, _ method: String) throws(RPCError)
        -> Int32?
    {
        guard try params.bool("fd") == true else { return nil }
        guard let descriptor = caller.takeDescriptor() else {
            throw RPCError.invalidParams(
                "\(method) with \"fd\": true takes a file descriptor passed with the request (SCM_RIGHTS on the socket); none came"
            )
        }
        return descriptor
    }

    /// `blob.put`: a whole blob in one request, its bytes in `data` or read from the regular
    /// file whose descriptor the client passed (`"fd": true`).
    func blobPut(_ request: Request, caller: Caller) throws -> [UInt8] {
        let params = try Params(request)
        let expected = try Self.hash(params, "hash")
        let blobs = try blobStore()
        if let descriptor = try Self.passedDescriptor(params, caller, "blob.put") {
            defer { FileDescriptor.close(descriptor) }
            if try params.stringBytes("data") != nil {
                throw RPCError.invalidParams("blob.put takes \"data\" or \"fd\", not both")
            }
            let (hash, size, existed) = try blobs.put(from: descriptor, owner: caller.connection, expected: expected)
            try arrived(hash)
            return Self.committed(hash, size: size, existed: existed)
        }
        let bytes = try Self.bytes(params)
        let (hash, size, existed) = try blobs.put(bytes, owner: caller.connection, expected: expected)
        try arrived(hash)
        return Self.committed(hash, size: size, existed: existed)
    }

    /// `blob.upload`: begins an upload of `size` bytes.
    func blobUpload(_ request: Request, connection: Int) throws -> [UInt8] {
        let params = try Params(request)
        guard let size = try params.int("size", in: 0...Int.max) else {
            throw RPCError.invalidParams("\"size\" is required: the blob's size in bytes")
        }
        let upload = try blobStore().begin(size: UInt64(size), owner: connection)
        var out = JSONWriter()
        out.beginObject()
        out.member("upload", Int(upload))
        out.endObject()
        return out.bytes
    }

    private static func upload(_ params: Params) throws(RPCError) -> UInt64 {
        guard let upload = try params.int("upload", in: 1...Int.max) else {
            throw RPCError.invalidParams("\"upload\" is required: the number blob.upload answered")
        }
        return UInt64(upload)
    }

    /// `blob.write`: the next bytes of an upload, at `offset` (what it has received).
    func blobWrite(_ request: Request, connection: Int) throws -> [UInt8] {
        let params = try Params(request)
        let upload = try Self.upload(params)
        guard let offset = try params.int("offset", in: 0...Int.max) else {
            throw RPCError.invalidParams("\"offset\" is required: where these bytes go, what the upload has received")
        }
        let bytes = try Self.bytes(params)
        guard bytes.count <= Self.maxPieceBytes else {
            throw RPCError.application(
                .tooLarge, "one blob.write carries at most \(Self.maxPieceBytes) bytes; this one has \(bytes.count)")
        }
        let received = try blobStore().write(upload, offset: UInt64(offset), bytes: bytes, owner: connection)
        var out = JSONWriter()
        out.beginObject()
        out.member("received", Int(received))
        out.endObject()
        return out.bytes
    }

    /// `blob.commit`: ends an upload; the blob is on the disk, under its hash, when it answers.
    func blobCommit(_ request: Request, connection: Int) throws -> [UInt8] {
        let params = try Params(request)
        let upload = try Self.upload(params)
        let (hash, size, existed) = try blobStore().commit(
            upload, owner: connection, expected: Self.hash(params, "hash"))
        try arrived(hash)
        return Self.committed(hash, size: size, existed: existed)
    }

    /// `blob.abort`: drops an upload and what it received.
    func blobAbort(_ request: Request, connection: Int) throws -> [UInt8] {
        let params = try Params(request)
        let upload = try Self.upload(params)
        guard try blobStore().abort(upload, owner: connection) else {
            throw RPCError.application(
                .notFound,
                "no blob upload \(upload) is under way on this connection (an upload ends with its connection)")
        }
        return Array(#"{"aborted":true}"#.utf8)
    }

    /// `blob.get`: up to `length` bytes of a blob from `offset`, with its size; or, with
    /// `"fd": true`, the whole blob written to the regular file whose descriptor the client
    /// passed (open for writing), in the kernel.
    func blobGet(_ request: Request, caller: Caller) throws -> [UInt8] {
        let params = try Params(request)
        guard let hash = try Self.hash(params, "hash") else {
            throw RPCError.invalidParams("\"hash\" is required: the blob's hash")
        }
        let descriptor = try Self.passedDescriptor(params, caller, "blob.get")
        defer { if let descriptor { FileDescriptor.close(descriptor) } }
        try fetchIfPending(hash, params)
        if let descriptor {
            let size = try blobStore().copy(hash, to: descriptor)
            var out = JSONWriter()
            out.beginObject()
            out.member("hash", hash.description)
            out.member("size", Int(size))
            out.endObject()
            return out.bytes
        }
        let offset = try params.int("offset", in: 0...Int.max) ?? 0
        let length = try params.int("length", in: 0...Self.maxPieceBytes) ?? Self.defaultPieceBytes
        let (size, bytes) = try blobStore().read(hash, offset: UInt64(offset), length: length)
        var out = JSONWriter()
        out.beginObject()
        out.member("hash", hash.description)
        out.member("size", Int(size))
        out.member("offset", offset)
        out.key("data")
        out.raw(Array("\"".utf8) + Base64.encode(bytes) + Array("\"".utf8))
        out.endObject()
        return out.bytes
    }

    /// A blob the events here name and whose bytes are not here yet is fetched from the
    /// peers before `blob.get` answers (unless `"fetch": false`): asked of every peer but
    /// those of policy `none`, first, in a sync with each (as `sync` runs it, on this
    /// request's thread, within its bound). Still not here after that: `not_found`, saying so.
    private func fetchIfPending(_ hash: BlobHash, _ params: Params) throws {
        let store = try blobStore()
        guard !store.contains(hash), let pending = try log.isPendingBlob(hash) else { return }
        guard try params.bool("fetch") != false, let wanted = sync.node.blobs, !sync.peers().isEmpty else {
            throw Self.stillPending(hash, asked: false)
        }
        wanted.demand(hash, size: pending.size)
        defer { wanted.withdraw(hash) }
        _ = try sync.syncNow(nil)
        guard store.contains(hash) else { throw Self.stillPending(hash, asked: true) }
    }

    private static func stillPending(_ hash: BlobHash, asked: Bool) -> RPCError {
        RPCError.application(
            .notFound,
            "blob \(hash) is pending: an event here names it, and its bytes have not come yet"
                + (asked ? "; no peer reached now holds it" : "; it comes with the next sync from a peer that holds it")
        )
    }

    /// `blob.stat`: whether this node holds a blob (`present`), knows it only from an event
    /// whose blob has not come yet (`pending`, with the bytes received so far), or neither.
    func blobStat(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let hash = try Self.hash(params, "hash") else {
            throw RPCError.invalidParams("\"hash\" is required: the blob's hash")
        }
        let store = try blobStore()
        let size = store.size(of: hash)
        let pending = size == nil ? try log.isPendingBlob(hash) : nil
        var out = JSONWriter()
        out.beginObject()
        out.member("hash", hash.description)
        out.member("state", size != nil ? "present" : pending != nil ? "pending" : "unknown")
        if let size = size ?? pending?.size { out.member("size", Int(clamping: size)) }
        if pending != nil { out.member("received", Int(clamping: store.partialSize(hash) ?? 0)) }
        out.endObject()
        return out.bytes
    }

    /// An entity's state with `blobs` added when it names any: each blob's hash and whether
    /// its bytes are here (`present`) or not yet (`pending`). Node-local, as `rev` is, so the
    /// state itself stays the same on every node.
    func withBlobStates(_ state: [UInt8]) -> [UInt8] {
        guard let blobs, state.last == UInt8(ascii: "}") else { return state }
        let hashes = BlobReference.hashes(inJSON: state)
        guard !hashes.isEmpty else { return state }
        var out = JSONWriter()
        out.beginObject()
        for hash in hashes {
            out.key(hash.description)
            out.string(blobs.contains(hash) ? "present" : "pending")
        }
        out.endObject()
        var json = state
        json.removeLast()
        json.append(contentsOf: Array(#","blobs":"#.utf8))
        json.append(contentsOf: out.bytes)
        json.append(UInt8(ascii: "}"))
        return json
    }
}

extension Methods {
    /// `blob.gc`: blob retention now (`evctl blob gc`): the blobs nothing needs that have
    /// been unused for `blob_retention_s` are removed, and those unused for less are marked
    /// or listed with when they go. With `"dry_run": true`, what it would do, changing nothing.
    func blobGC(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let dryRun = try params.bool("dry_run") ?? false
        guard let retention else { throw RPCError.application(.unavailable, "this daemon keeps no blobs") }
        let report = try retention.run(dryRun: dryRun)
        let retentionMilliseconds = UInt64(max(0, retention.retentionSeconds.load(ordering: .relaxed))) * 1000
        func write(_ blobs: [UnusedBlob], removable: Bool, to out: inout JSONWriter) {
            out.beginArray()
            for blob in blobs {
                out.beginObject()
                out.member("hash", blob.hash.description)
                if let size = blob.size { out.member("size", Int(clamping: size)) }
                out.member("held", blob.size != nil)
                out.member("unused_since", blob.since.map { EventLog.timestamp(milliseconds: $0) })
                if !removable {
                    out.member(
                        "removed_after",
                        EventLog.timestamp(
                            milliseconds: (blob.since ?? StoreOptions.systemMilliseconds()) + retentionMilliseconds))
                }
                out.endObject()
            }
            out.endArray()
        }
        var out = JSONWriter()
        out.beginObject()
        out.member("dry_run", dryRun)
        out.member("retention_s", retention.retentionSeconds.load(ordering: .relaxed))
        out.member("needed", report.needed)
        out.key(dryRun ? "would_remove" : "removed")
        write(report.removed, removable: true, to: &out)
        out.member("bytes", Int(clamping: report.bytesRemoved))
        out.key("kept")
        write(report.kept, removable: false, to: &out)
        out.endObject()
        return out.bytes
    }
}
