import Arguments
import Projections

/// `evctl import [FILE]`: stored events from NDJSON (as `evctl export` writes them), ids
/// and origins kept.
struct Import: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "import",
            abstract: "Store the events of an NDJSON export (from FILE or standard input), ids and origins kept.",
            discussion: """
                Each non-blank line is one stored event, as `evctl export` and `evctl log --json` \
                print them. The daemon takes them as it takes events from a peer: checked in full, \
                folded into the entities, and skipped when held already, so importing a file again \
                changes nothing. A file can be imported into any node: a new one (to move a store), \
                the one it came from, or one that holds part of its events.

                The whole input is checked first (a dry run on the daemon, which writes nothing), \
                then imported: a bad file changes nothing, and evctl names the first bad line and \
                why (exit 65). Each origin's events must come in id order, and an event the node \
                lacks whose origin has newer events held here is refused: every node holds a \
                prefix of each origin's events, and replication relies on it. So import whole \
                exports, not filtered ones (`evctl --json log --entity ...`).

                Events are sent in requests of --batch events (at most 1 MiB each), each stored \
                in one transaction. It prints "imported N events (M already held)"; with --json, \
                {"imported":N,"skipped":M}.

                  evctl import backup.ndjson
                  gunzip -c backup.ndjson.gz | evctl import
                """,
            usage: ["[<options>] [FILE|-] [--batch N] [--dry-run]"],
            arguments: [
                .option("batch", value: "N", default: "1000", help: "Events per request (1-10000)."),
                .flag("dry-run", help: "Only check the input; store nothing."),
                .positional(
                    "FILE", optional: true, completion: .files, help: "The NDJSON events; - or none: standard input."),
            ])
    }

    var global: GlobalOptions
    var path: String
    var batch: Int
    var dryRun: Bool

    static let maxRequestBytes = 1 << 20

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        path = arguments["FILE"] ?? "-"
        batch = try arguments.integer("batch", in: 1...10_000) ?? 1000
        dryRun = arguments.flag("dry-run")
    }

    func run() throws {
        let input = try NDJSONInput(bytes: NDJSONInput.read(path), skip: 0, done: "imported")
        try Import.checkOrder(input)
        let connection = try global.connect()
        var batches: [Range<Int>] = []
        var start = 0
        while start < input.lines.count {
            let end = FileImport.batchEnd(
                input, from: start, batchSize: batch, maxRequestBytes: Import.maxRequestBytes)
            batches.append(start..<end)
            start = end
        }
        let progress = Terminal.standardErrorIsTerminal && !input.lines.isEmpty
        let checked = try pass(batches, of: input, dryRun: true, connection: connection, progress: progress)
        let done =
            dryRun ? checked : try pass(batches, of: input, dryRun: false, connection: connection, progress: progress)
        if progress { Terminal.writeError("\r\u{1B}[K") }
        var output = StandardOutput()
        if global.json {
            var object = JSONObjectWriter()
            object.add("imported", done.imported)
            object.add("skipped", done.skipped)
            if dryRun { object.add("dry_run", true) }
            output.line(bytes: object.bytes)
        } else if dryRun {
            output.line(
                "checked \(Format.count(input.lines.count, "event")): \(done.imported) to import, "
                    + "\(done.skipped) already held; nothing was imported (--dry-run)")
        } else {
            output.line("imported \(Format.count(done.imported, "event")) (\(done.skipped) already held)")
        }
        output.flush()
    }

    /// Dry-run requests in flight at once: the daemon checks one while evctl writes the next.
    /// The real pass sends one at a time: were a request to fail, one sent after it could
    /// store an origin's later events without the failed ones, a gap.
    static let inFlight = 4

    /// Sends every batch (dry runs `inFlight` requests at a time on the one connection;
    /// replies come back in order); returns the events imported and skipped. The first
    /// error names its line; in the real pass, what was imported before it is said too.
    func pass(
        _ batches: [Range<Int>], of input: NDJSONInput, dryRun: Bool, connection: Connection, progress: Bool
    ) throws -> (imported: Int, skipped: Int) {
        var done = (imported: 0, skipped: 0)
        var pending: [Range<Int>] = []
        var next = 0
        var failure: (range: Range<Int>, error: RPCError, before: (imported: Int, skipped: Int))?
        while pending.count > 0 || (next < batches.count && failure == nil) {
            if failure == nil, next < batches.count, pending.count < (dryRun ? Import.inFlight : 1) {
                let lines = input.lines[batches[next]]
                var events: [[UInt8]] = []
                events.reserveCapacity(lines.count)
                for line in lines { events.append(Array(input.bytes[line.range])) }
                var params = JSONObjectWriter()
                params.add("events", json: RawJSON.array(events))
                if dryRun { params.add("dry_run", true) }
                try connection.send("import", params)
                pending.append(batches[next])
                next += 1
                continue
            }
            let range = pending.removeFirst()
            let reply = try Import.reply(connection)
            if let error = reply.error {
                if failure == nil { failure = (range, error, done) }
                continue
            }
            let result = reply.result as? [String: Any] ?? [:]
            done.imported += result["imported"] as? Int ?? 0
            done.skipped += result["skipped"] as? Int ?? 0
            if progress {
                let verb = dryRun ? "checked" : "imported"
                Terminal.writeError("\r\(verb) \(range.upperBound) of \(input.lines.count) events\u{1B}[K")
            }
        }
        guard let failure else { return done }
        if progress { Terminal.writeError("\r\u{1B}[K") }
        let lines = input.lines[failure.range]
        let first = lines.first?.number ?? 0
        let last = lines.last?.number ?? 0
        var text: String
        if let index = failure.error.index, lines.indices.contains(failure.range.lowerBound + index) {
            text = "line \(input.lines[failure.range.lowerBound + index].number): \(failure.error.description)"
        } else {
            text = "lines \(first)-\(last): \(failure.error.description)"
        }
        if dryRun {
            text += "\nevctl: nothing was imported."
        } else {
            text += "\nevctl: nothing of lines \(first)-\(last) was imported (a request is all or nothing)"
            if failure.before.imported + failure.before.skipped > 0 {
                text += "; the events before line \(first) were (\(failure.before.imported) imported, "
                text += "\(failure.before.skipped) already held)"
            }
            text += ". Importing the file again skips what was imported."
        }
        throw CommandFailure(exitCode: failure.error.exitStatus, text)
    }

    /// The next reply (notifications are skipped).
    static func reply(_ connection: Connection) throws(CommandFailure) -> Reply {
        while true {
            if case .reply(let reply) = try connection.receive() { return reply }
        }
    }

    /// Checks, before anything is sent, that each origin's events come in id order: the
    /// daemon checks each request against what it holds, but only evctl sees the whole file.
    static func checkOrder(_ input: NDJSONInput) throws(CommandFailure) {
        /// Per origin, the greatest id so far and its line.
        var newest: [[UInt8]: (id: ULID, line: Int)] = [:]
        for line in input.lines {
            // A line without a readable id and origin is the daemon's to reject, with why.
            guard let (id, origin) = identity(Array(input.bytes[line.range])) else { continue }
            if let previous = newest[origin], id <= previous.id {
                let originText = String(decoding: origin, as: UTF8.self)
                let what =
                    id == previous.id
                    ? "repeats the event \(id) of line \(previous.line)"
                    : "holds event \(id) of origin \(originText), older than event \(previous.id) of the same origin "
                        + "on line \(previous.line)"
                throw CommandFailure(
                    exitCode: ExitStatus.invalidInput,
                    "line \(line.number): \(what): each origin's events must come in id order, as `evctl export` "
                        + "writes them.\nevctl: nothing was imported.")
            }
            newest[origin] = (id, line.number)
        }
    }

    /// The event id and the origin's bytes of a line, when both are there and the id is one.
    static func identity(_ line: [UInt8]) -> (ULID, [UInt8])? {
        var scanner = JSONScanner(line)
        var id: ULID?
        var origin: [UInt8]?
        do {
            try scanner.readObject { (key, scanner) throws(JSONError) in
                if key.elementsEqual("id".utf8), scanner.peek() == UInt8(ascii: "\"") {
                    id = ULID(utf8: try scanner.readStringBytes())
                } else if key.elementsEqual("origin".utf8), scanner.peek() == UInt8(ascii: "\"") {
                    origin = try scanner.readStringBytes()
                } else {
                    try scanner.skipValue()
                }
            }
        } catch {
            return nil
        }
        guard let id, let origin else { return nil }
        return (id, origin)
    }
}
