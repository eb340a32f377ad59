import Arguments
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `evctl export [FILE]`: every stored event as NDJSON, ids and origins kept.
struct Export: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "export",
            abstract: "Write every stored event, ids and origins kept, as NDJSON to FILE or standard output.",
            discussion: """
                Each line is one stored event exactly as `evctl log --json` prints it (id, origin, \
                causal context, by, at, ...), in id order. `evctl import` reads it back, into this \
                node or another: a backup people can read, a way to move a store to a new \
                machine, or a feed for another system. Two nodes holding the same events export \
                the same bytes.

                A FILE is written to a temporary file beside it, flushed to disk and renamed into \
                place, so a failed export never leaves a partial FILE (mode 0600: it holds the \
                whole store). On a terminal, a summary goes to standard error.

                The export pages through the log while the daemon keeps serving. Events appended \
                meanwhile may or may not be in it; if a sync brought in, meanwhile, events older \
                than the ones already exported, the export fails (nothing is left under FILE) and \
                says to run it again.

                  evctl export backup.ndjson
                  evctl export | gzip > backup.ndjson.gz
                """,
            usage: ["[<options>] [FILE|-]"],
            arguments: [
                .positional("FILE", optional: true, help: "Where to write the events; - or none: standard output.")
            ])
    }

    var global: GlobalOptions
    var file: String?

    /// Events per `log` page: the method's maximum.
    static let pageSize = 10_000

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        file = arguments["FILE"].flatMap { $0 == "-" ? nil : $0 }
    }

    func run() throws {
        let started = ContinuousClock.now
        let connection = try global.connect()
        let output = try ExportOutput(path: file)
        let exported: Int
        do {
            exported = try Export.write(from: connection, to: output)
            try output.commit()
        } catch {
            output.discard()
            throw error
        }
        if Terminal.standardErrorIsTerminal {
            let seconds =
                Double((ContinuousClock.now - started).components.attoseconds) / 1e18
                + Double((ContinuousClock.now - started).components.seconds)
            let place = file.map { " to \($0)" } ?? ""
            Terminal.writeError(
                "exported \(Format.count(exported, "event"))\(place) in \(String(format: "%.2f", seconds)) s\n")
        }
    }

    /// Pages through the whole log into `output`; returns how many events were written.
    ///
    /// Pages are separate snapshots. Local appends made meanwhile get ids above the cursor,
    /// and a sync adds each origin's events above what is held of it, so whatever the export
    /// misses is, per origin, after what it has: it stays a prefix of each origin's events,
    /// as an import needs. Only a sync that fills a gap (reconciliation) or a replicated
    /// event older than the cursor could break that, and the check at the end finds it.
    static func write(from connection: Connection, to output: ExportOutput) throws -> Int {
        var exported = 0
        /// Per origin, the events written and the greatest id among them.
        var origins: [String: (count: Int, last: String)] = [:]
        let pages = Pages(connection: connection, method: "log", itemsMember: "events", all: true)
        _ = try pages.read(after: nil) { cursor in
            var params = JSONObjectWriter()
            params.add("after", cursor)
            params.add("limit", pageSize)
            return params
        } page: { reply in
            let raw = pages.rawItems(reply)
            let items = pages.items(reply)
            guard raw.count == items.count else {
                throw CommandFailure(exitCode: ExitStatus.failed, "the daemon's log page could not be read.")
            }
            for (event, bytes) in zip(items, raw) {
                guard let id = event["id"] as? String, let origin = event["origin"] as? String else {
                    throw CommandFailure(exitCode: ExitStatus.failed, "the daemon sent an event without id or origin.")
                }
                origins[origin, default: (0, id)].count += 1
                origins[origin]?.last = id
                try output.line(bytes)
            }
            exported += raw.count
        }
        try verify(origins, exported: exported, connection: connection)
        return exported
    }

    /// Checks that what was exported is, for each origin, every event of it the node holds up
    /// to the last one exported. When the node holds just as many events as were exported,
    /// they are the same events (none is ever removed), and nothing more is read.
    static func verify(_ origins: [String: (count: Int, last: String)], exported: Int, connection: Connection) throws {
        let status = try connection.call("status")
        if (status.result as? [String: Any])?["events"] as? Int == exported { return }
        for (origin, written) in origins.sorted(by: { $0.key < $1.key }) {
            var held = 0
            let pages = Pages(connection: connection, method: "log", itemsMember: "events", all: true)
            var cursor: String?
            var done = false
            while !done {
                var params = JSONObjectWriter()
                params.add("after", cursor)
                params.add("limit", pageSize)
                params.add("origin", origin)
                let reply = try connection.call("log", params)
                for event in pages.items(reply) {
                    guard let id = event["id"] as? String, id <= written.last else {
                        done = true
                        break
                    }
                    held += 1
                }
                cursor = (reply.result as? [String: Any])?["next"] as? String
                if cursor == nil { done = true }
            }
            if held != written.count {
                throw CommandFailure(
                    exitCode: ExitStatus.failed,
                    "while the export ran, a sync brought in \(Format.count(held - written.count, "event")) of origin "
                        + "\(origin) older than events of it already exported, so the export would leave a gap in that "
                        + "origin's events. Nothing was kept; run the export again (or while no sync runs).")
            }
        }
    }
}

/// Where an export goes: standard output, or a temporary file beside FILE that `commit()`
/// flushes to disk and renames into place.
final class ExportOutput {
    let path: String?
    let temporary: String?
    private let handle: FileHandle
    private var buffer: [UInt8] = []

    init(path: String?) throws(CommandFailure) {
        self.path = path
        guard let path else {
            temporary = nil
            handle = FileHandle.standardOutput
            return
        }
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent().path
        let name = ".\(url.lastPathComponent).export-\(getpid())"
        let temporary = (directory as NSString).appendingPathComponent(name)
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno)).lowercased()
            throw CommandFailure(exitCode: ExitStatus.failed, "cannot write to \(directory): \(reason).")
        }
        self.temporary = temporary
        handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    func line(_ bytes: [UInt8]) throws(CommandFailure) {
        buffer += bytes
        buffer.append(0x0A)
        if buffer.count >= 1 << 20 { try flush() }
    }

    private func flush() throws(CommandFailure) {
        guard !buffer.isEmpty else { return }
        if temporary == nil {
            StandardOutput.write(buffer)
        } else {
            do {
                try handle.write(contentsOf: buffer)
            } catch {
                throw CommandFailure(
                    exitCode: ExitStatus.failed, "writing \(path ?? "") failed: \(error.localizedDescription)")
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Writes what is buffered; for a file, makes it durable and gives it its name.
    func commit() throws(CommandFailure) {
        try flush()
        guard let temporary, let path else { return }
        do {
            try handle.synchronize()
            try handle.close()
        } catch {
            throw CommandFailure(
                exitCode: ExitStatus.failed, "writing \(path) failed: \(error.localizedDescription)")
        }
        guard rename(temporary, path) == 0 else {
            let reason = String(cString: strerror(errno)).lowercased()
            throw CommandFailure(exitCode: ExitStatus.failed, "cannot rename the export to \(path): \(reason).")
        }
        // The rename itself is durable once the directory is.
        let directory = open(URL(fileURLWithPath: path).deletingLastPathComponent().path, O_RDONLY | O_CLOEXEC)
        if directory >= 0 {
            _ = fsync(directory)
            close(directory)
        }
    }

    /// Removes the temporary file of a failed export.
    func discard() {
        guard let temporary else { return }
        try? handle.close()
        unlink(temporary)
    }
}
