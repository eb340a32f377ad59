import Arguments

/// `evctl append`: one event from words, or many from an NDJSON file.
struct Append: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "append",
            abstract: "Append an event to an entity, or the events of an NDJSON file.",
            discussion: """
                An event is saved on this device when append returns; it prints the event's id \
                (with --json, the daemon's reply).

                  evctl append job/42 status en_route
                  evctl append job/42 set address="12 Main St" floor:=3 phone=+15550100
                  evctl append job/42 set phone:=null            # clears the field
                  evctl append job/42 add parts valve-3          # the string "valve-3"
                  evctl append job/42 add sizes :=3              # the number 3
                  evctl append job/42 remove parts valve-3
                  evctl append job/42 incr parts_used 2          # -1 subtracts; counters add up
                  evctl append --file events.ndjson              # or - for standard input

                With --file, each non-blank line is one event in the input form, e.g. \
                {"entity":"job/42","kind":"status","status":"en_route"}. The whole input is checked \
                before anything is sent: a line that is not one JSON object is reported with its \
                number and nothing is appended. Events are sent in batches (each all-or-nothing), \
                several in flight at once. If the daemon rejects an event, the line is named and the \
                batches before it stay appended. If the daemon goes away, evctl says how many lines \
                were acknowledged; --skip that many continues. With --json, each acknowledged batch \
                is printed as it is acknowledged: \
                {"batch":i,"first_line":a,"last_line":b,"ids":[...]}, then a summary object.
                """,
            usage: [
                "[<options>] ENTITY status STATUS",
                "[<options>] ENTITY set NAME=TEXT|NAME:=JSON...",
                "[<options>] ENTITY add|remove SET ELEMENT|:=JSON",
                "[<options>] ENTITY incr COUNTER AMOUNT",
                "[<options>] ENTITY delete|restore",
                "--file PATH|- [--batch N] [--skip N]",
            ],
            arguments: [
                .option(
                    "key", value: "KEY", help: "Idempotency key: an event whose key was seen is not appended again."),
                .option("by", value: "ACTOR", help: "Who made the change (default: $USER)."),
                .option(
                    "if-match", value: "REV",
                    help: "Append only if the entity's rev is still REV (from `evctl get`, list or append --json)."),
                .option(
                    "file", short: "f", value: "PATH", completion: .files,
                    help: "Append the events of an NDJSON file; - reads standard input."),
                .option("batch", value: "N", default: "1000", help: "With --file: events per request (at most 4 MiB)."),
                .option(
                    "skip", value: "N", help: "With --file: skip the first N non-blank lines (acknowledged before)."),
                .positional(
                    "ENTITY", optional: true, completion: .dynamic("entity"), help: "The entity, TYPE/ID (e.g. job/42)."
                ),
                .positional(
                    "OPERATION", optional: true,
                    completion: .words(["status", "set", "add", "remove", "incr", "delete", "restore"]),
                    help: "status, set, add, remove, incr, delete or restore."),
                .positional("ARGUMENT", optional: true, repeating: true, help: "What the operation needs (see usage)."),
            ])
    }

    var global: GlobalOptions
    var key: String?
    var by: String?
    var ifMatch: Int?
    var file: String?
    var batch: Int
    var skip: Int
    var entity: String?
    var operation: String?
    var words: [String]
    var givenBy: Bool
    var givenFileOptions: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        key = arguments["key"]
        givenBy = arguments.contains("by")
        by = arguments["by"] ?? System.environment("USER")
        ifMatch = try arguments.integer("if-match", in: 1...Int.max)
        file = arguments["file"]
        batch = try arguments.integer("batch", in: 1...100_000) ?? 1000
        skip = try arguments.integer("skip", in: 0...Int.max) ?? 0
        entity = arguments["ENTITY"]
        operation = arguments["OPERATION"]
        words = arguments.values("ARGUMENT")
        givenFileOptions = arguments.contains("batch") || arguments.contains("skip")
    }

    func validate() throws {
        if file != nil {
            guard entity == nil else {
                throw UsageError("give either --file or ENTITY OPERATION, not both")
            }
            if key != nil || ifMatch != nil || givenBy {
                throw UsageError("with --file, put key, by and if_match in each line's event")
            }
            return
        }
        guard entity != nil else { throw UsageError("missing ENTITY (or --file PATH)") }
        guard let operation else {
            throw UsageError("missing OPERATION: status, set, add, remove, incr, delete or restore")
        }
        switch operation {
        case "status":
            guard words.count == 1 else { throw UsageError("status takes one STATUS, e.g. `status en_route`") }
        case "set":
            guard !words.isEmpty else { throw UsageError("set needs at least one NAME=TEXT or NAME:=JSON") }
        case "add", "remove":
            guard words.count == 2 else {
                throw UsageError("\(operation) takes SET ELEMENT, e.g. `\(operation) parts valve-3`")
            }
        case "incr":
            guard words.count == 2, Int64(words[1]) != nil else {
                throw UsageError(
                    "incr takes COUNTER AMOUNT, an integer, e.g. `incr parts_used 2` or `incr parts_used -1`")
            }
        case "delete", "restore":
            guard words.isEmpty else { throw UsageError("\(operation) takes no arguments") }
        default:
            throw UsageError("unknown operation '\(operation)': use status, set, add, remove, incr, delete or restore")
        }
        if givenFileOptions { throw UsageError("--batch and --skip go with --file") }
    }

    func run() throws {
        if let file {
            let status = try FileImport(path: file, batchSize: batch, skip: skip, json: global.json).run(global)
            if status != ExitStatus.ok { throw CommandFailure(exitCode: status, nil) }
            return
        }
        let event = try makeEvent()
        let connection = try global.connect()
        var params = JSONObjectWriter()
        params.add("events", json: RawJSON.array([event.bytes]))
        let reply = try connection.call("append", params)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else if let ids = (reply.result as? [String: Any])?["ids"] as? [String], let id = ids.first {
            output.line(id)
        }
        output.flush()
    }

    /// The input event the words describe.
    func makeEvent() throws(UsageError) -> JSONObjectWriter {
        var event = JSONObjectWriter()
        event.add("entity", entity)
        let kind = operation == "set" ? "edit" : operation ?? ""
        event.add("kind", kind)
        switch kind {
        case "status":
            event.add("status", words[0])
        case "edit":
            event.add("fields", json: try EventArguments.fields(words).object.bytes)
        case "add", "remove":
            event.add("set", words[0])
            event.add("element", json: try EventArguments.element(words[1]))
        case "incr":
            event.add("counter", words[0])
            event.add("amount", json: Array(String(Int64(words[1]) ?? 0).utf8))
        default:
            break
        }
        event.add("key", key)
        event.add("by", by)
        event.add("if_match", ifMatch)
        return event
    }
}
