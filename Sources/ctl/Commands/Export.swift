import Arguments
import UnixSocket

/// `evctl export [FILE]`: every stored event as NDJSON, ids and origins kept.
struct Export: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "export",
            abstract: "Write every stored event, ids and origins kept, as NDJSON to FILE or standard output.",
            discussion: """
                Each line is one stored event as `evctl log --json` prints it (id, origin, causal \
                context, by, at, ...) but without this node's `seq`, and in id order rather than \
                seq order: an import needs each origin's events in id order, and two nodes holding \
                the same events then export the same bytes. `evctl import` reads it back, into this \
                node or another: a backup people can read, a way to move a store to a new \
                machine, or a feed for another system. (To follow what a node stores as it \
                stores it, use `evctl log --follow`, which goes by seq.)

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
                .positional(
                    "FILE", optional: true, completion: .files,
                    help: "Where to write the events; - or none: standard output.")
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
        var exported = 0
        if let file {
            // Written beside FILE and renamed into place once synced: a failed export leaves
            // no partial FILE.
            try TextFile.replace(file, mode: 0o600) { (handle: Int32) throws(CommandFailure) in
                let output = ExportOutput(file: handle, path: file)
                do {
                    exported = try Export.write(from: connection, to: output)
                } catch let failure as CommandFailure {
                    throw failure
                } catch {
                    throw CommandFailure(exitCode: ExitStatus.failed, "the export failed: \(error)")
                }
                try output.flush()
            }
        } else {
            let output = ExportOutput(file: nil, path: nil)
            exported = try Export.write(from: connection, to: output)
            try output.flush()
        }
        if Terminal.standardErrorIsTerminal {
            let seconds = (ContinuousClock.now - started).seconds
            let place = file.map { " to \($0)" } ?? ""
            Terminal.writeError(
                "exported \(Format.count(exported, "event"))\(place) in \(Format.fixed(seconds, decimals: 2)) s\n")
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
            params.add("order", "id")
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
            _ = try pages.read(after: nil) { cursor in
                var params = JSONObjectWriter()
                params.add("after", cursor)
                params.add("limit", pageSize)
                params.add("origin", origin)
                params.add("order", "id")
                return params
            } page: { reply in
                held += pages.items(reply).count { ($0["id"] as? String).map { $0 <= written.last } ?? false }
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

/// Where an export goes, buffered: standard output, or the file `TextFile.replace` made.
final class ExportOutput {
    /// The descriptor of the file; nil for standard output.
    let file: Int32?
    let path: String?
    private var buffer: [UInt8] = []

    init(file: Int32?, path: String?) {
        self.file = file
        self.path = path
    }

    func line(_ bytes: [UInt8]) throws(CommandFailure) {
        buffer += bytes
        buffer.append(0x0A)
        if buffer.count >= 1 << 20 { try flush() }
    }

    func flush() throws(CommandFailure) {
        guard !buffer.isEmpty else { return }
        if let file {
            do {
                try FileDescriptor.write(buffer, to: file)
            } catch {
                throw CommandFailure(
                    exitCode: ExitStatus.failed, "writing \(path ?? "the export") failed: \(error.message)")
            }
        } else {
            StandardOutput.write(buffer)
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
