import Arguments
import Projections
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// `evctl blob put FILE | get HASH [FILE] | stat HASH`: attachments — photos, signatures,
/// documents — kept by the daemon under the SHA-256 of their bytes, named from events.
struct Blob: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "blob",
            abstract: "Put, get or look up blobs: files kept under their SHA-256, that events name.",
            discussion: """
                Put stores a file and prints the reference an event names it by; an append \
                that names a blob this node does not hold is refused, so put it first:

                  evctl blob put meter.jpg --type image/jpeg
                  {"$blob":"sha256:9f86d0...","size":48213,"type":"image/jpeg"}
                  evctl append job/42 set photo:='{"$blob":"sha256:9f86d0...","size":48213,"type":"image/jpeg"}'

                Get writes a blob to FILE (replaced whole once every byte is here) or to \
                standard output; a blob an event here names whose bytes have not come yet \
                is fetched from the peers first (from a peer of policy lazy only so). Stat \
                says whether this node holds it, or knows it as pending. `evctl get` lists \
                the blobs an entity names as present or pending (its bytes not here yet).

                Gc removes the blobs nothing needs (no entity names them in its current \
                state, and every peer holds the events that named them) once they have been \
                unused for blob_retention_s (30 days); the daemon runs it every hour.
                """,
            subcommands: [BlobPut.self, BlobGet.self, BlobStat.self, BlobGC.self])
    }

    init(_ arguments: ParsedArguments) {}

    static let hashHelp = "The blob's hash: sha256: and 64 hex digits, as put prints it."
    /// Bytes per blob.write and blob.get: 3 MiB, 4 MiB in base64.
    static let pieceBytes = 3 << 20

    static func failure(_ what: String, _ code: Int32) -> CommandFailure {
        CommandFailure(exitCode: ExitStatus.noInput, "\(what): \(String(cString: strerror(code))).")
    }
}

struct BlobPut: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "put",
            abstract: "Store FILE as a blob and print the reference events name it by.",
            discussion: """
                The file goes to the daemon in pieces over one connection; the blob exists \
                once all of it is on the daemon's disk under its hash, and not before (an \
                interrupted put leaves nothing). Putting a blob the node holds changes nothing.
                """,
            arguments: [
                .positional("FILE", completion: .files, help: "The file to store."),
                .option(
                    "type", value: "TYPE", help: "Its media type, kept in the reference (image/jpeg, application/pdf)."),
                .flag(
                    "base64",
                    help:
                        "Send the bytes in base64 pieces instead of passing the open file to the daemon (for a daemon on another kernel's socket)."
                ),
            ])
    }

    var global: GlobalOptions
    var path: String
    var type: String?
    var base64: Bool

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        path = arguments["FILE"] ?? ""
        type = arguments["type"]
        base64 = arguments.flag("base64")
    }

    /// Sends the file in base64 pieces: `blob.upload`, `blob.write`s, `blob.commit`.
    private func upload(_ file: Int32, size: Int, on connection: Connection) throws -> Reply {
        var begin = JSONObjectWriter()
        begin.add("size", size)
        let upload = (try connection.call("blob.upload", begin).result as? [String: Any])?["upload"] as? Int ?? 0
        var offset = 0
        var piece = [UInt8](repeating: 0, count: Blob.pieceBytes)
        while offset < size {
            let count = piece.withUnsafeMutableBytes { read(file, $0.baseAddress, min(Blob.pieceBytes, size - offset)) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else {
                throw CommandFailure(exitCode: ExitStatus.noInput, "\(path) ended at \(offset) of its \(size) bytes.")
            }
            var params = JSONObjectWriter()
            params.add("upload", upload)
            params.add("offset", offset)
            params.add("data", json: [UInt8(ascii: "\"")] + Base64.encode(piece[..<count]) + [UInt8(ascii: "\"")])
            _ = try connection.call("blob.write", params)
            offset += count
        }
        var end = JSONObjectWriter()
        end.add("upload", upload)
        return try connection.call("blob.commit", end)
    }

    func run() throws {
        let file = open(path, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { throw Blob.failure("cannot open \(path)", errno) }
        defer { close(file) }
        var info = stat()
        guard fstat(file, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw CommandFailure(exitCode: ExitStatus.noInput, "\(path) is not a regular file.")
        }
        let connection = try global.connect()
        let reply: Reply
        if base64 {
            reply = try upload(file, size: Int(info.st_size), on: connection)
        } else {
            // The daemon reads the open file itself: no copy through this process.
            var params = JSONObjectWriter()
            params.add("fd", true)
            reply = try connection.call("blob.put", params, passing: file)
        }
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            let result = reply.result as? [String: Any] ?? [:]
            var reference = JSONObjectWriter()
            reference.add("$blob", result["hash"] as? String)
            reference.add("size", result["size"] as? Int)
            reference.add("type", type)
            output.line(bytes: reference.bytes)
        }
        output.flush()
    }
}

struct BlobGet: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "get",
            abstract: "Write the blob HASH to FILE, or to standard output.",
            discussion: """
                FILE is replaced whole once every byte has arrived; an interrupted get leaves \
                it as it was. A blob this node does not hold is not found (exit 2).
                """,
            arguments: [
                .positional("HASH", help: Blob.hashHelp),
                .positional(
                    "FILE", optional: true, completion: .files, help: "Where to write it (default: standard output)."),
            ])
    }

    var global: GlobalOptions
    var hash: String
    var path: String?

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        hash = arguments["HASH"] ?? ""
        path = arguments["FILE"]
    }

    /// Has the daemon write the whole blob to the regular file open on `descriptor`.
    private func pass(_ connection: Connection, _ descriptor: Int32) throws(CommandFailure) {
        var params = JSONObjectWriter()
        params.add("hash", hash)
        params.add("fd", true)
        _ = try connection.call("blob.get", params, passing: descriptor)
    }

    /// Writes each piece of the blob to `descriptor`, in order (a pipe or a terminal, which
    /// the daemon does not write to for a client).
    private func copy(_ connection: Connection, to descriptor: Int32) throws(CommandFailure) {
        var offset = 0
        while true {
            var params = JSONObjectWriter()
            params.add("hash", hash)
            params.add("offset", offset)
            params.add("length", Blob.pieceBytes)
            let reply = try connection.call("blob.get", params)
            let result = reply.result as? [String: Any] ?? [:]
            let size = result["size"] as? Int ?? 0
            guard let text = result["data"] as? String, let bytes = Base64.decode(Array(text.utf8)) else {
                throw CommandFailure(exitCode: ExitStatus.failed, "the daemon's answer to blob.get carries no bytes.")
            }
            do {
                try FileDescriptor.write(bytes, to: descriptor)
            } catch {
                throw CommandFailure(exitCode: ExitStatus.failed, "cannot write the blob: \(error)")
            }
            offset += bytes.count
            if offset >= size || bytes.isEmpty { return }
        }
    }

    func run() throws {
        let connection = try global.connect()
        if let path {
            try TextFile.replace(path, mode: 0o644) { (descriptor: Int32) throws(CommandFailure) in
                try pass(connection, descriptor)
            }
        } else if let info = System.status(descriptor: FileDescriptor.standardOutput), info.st_mode & S_IFMT == S_IFREG,
            fcntl(FileDescriptor.standardOutput, F_GETFL) & O_APPEND == 0
        {
            try pass(connection, FileDescriptor.standardOutput)
        } else {
            try copy(connection, to: FileDescriptor.standardOutput)
        }
    }
}

struct BlobStat: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "stat",
            abstract: "Say whether this node holds the blob HASH, and its size.",
            arguments: [.positional("HASH", help: Blob.hashHelp)])
    }

    var global: GlobalOptions
    var hash: String

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        hash = arguments["HASH"] ?? ""
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("hash", hash)
        try global.printResult(of: "blob.stat", params) { result in
            let size = Format.count(result["size"] as? Int ?? 0, "byte")
            switch result["state"] as? String {
            case "present": return ["\(hash): present, \(size)"]
            case "pending":
                let received = result["received"] as? Int ?? 0
                return [
                    "\(hash): pending, \(size): an event here names it and its bytes have not come yet"
                        + (received > 0 ? " (\(Format.count(received, "byte")) received)" : "")
                ]
            default: return ["\(hash): unknown on this node"]
            }
        }
    }
}

struct BlobGC: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "gc",
            abstract: "Remove the blobs nothing has needed for blob_retention_s; --dry-run lists what would go.",
            discussion: """
                A blob is needed while an entity that is not deleted names it (a field's \
                value, one of a conflict's values, a set's element), or while a peer lacks an \
                event that names it. One needed by nothing is marked the first time it is \
                found so, and removed once blob_retention_s has passed since; until then it \
                is listed as kept, with when it goes.
                """,
            arguments: [.flag("dry-run", help: "List what would be removed and kept, and change nothing.")])
    }

    var global: GlobalOptions
    var dryRun: Bool

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        dryRun = arguments.flag("dry-run")
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("dry_run", dryRun)
        try global.printResult(of: "blob.gc", params) { result in
            let removed = result[dryRun ? "would_remove" : "removed"] as? [[String: Any]] ?? []
            let kept = result["kept"] as? [[String: Any]] ?? []
            let bytes = Format.bytes(result["bytes"] as? Int ?? 0)
            var lines = [
                (dryRun ? "would remove " : "removed ") + Format.count(removed.count, "blob") + " (\(bytes)); "
                    + "kept \(kept.count) unused, \(result["needed"] as? Int ?? 0) needed"
            ]
            for blob in removed {
                let size = blob["held"] as? Bool == true ? Format.bytes(blob["size"] as? Int ?? 0) : "pending, not held"
                lines.append("  \(dryRun ? "would remove" : "removed") \(blob["hash"] as? String ?? "?") (\(size))")
            }
            for blob in kept {
                lines.append(
                    "  kept \(blob["hash"] as? String ?? "?") until \(blob["removed_after"] as? String ?? "?")")
            }
            return lines
        }
    }
}
