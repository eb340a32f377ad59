import Arguments

/// `evctl resolve ENTITY NAME=VALUE...`: settles conflicts by appending the chosen values.
struct Resolve: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "resolve",
            abstract: "Settle an entity's conflicts by appending the values to keep.",
            discussion: """
                Appends an edit of the given fields (and a status event with --status), marked \
                as a resolution. The daemon records that the new event saw every competing \
                value, so it supersedes them all and the conflict is gone, on this device and, \
                once synced, everywhere. A plain edit (evctl append) of a field in conflict \
                does not settle it: it joins the conflict as one more value.

                  evctl resolve job/42 address="12 Main St"
                  evctl resolve job/42 floor:=3 --status on_site
                """,
            usage: ["[<options>] ENTITY NAME=TEXT|NAME:=JSON... [--status STATUS]"],
            arguments: [
                .option("status", value: "STATUS", help: "Also settle the status on STATUS."),
                .option("by", value: "ACTOR", help: "Who settled it (default: $USER)."),
                .option("key", value: "KEY", help: "Idempotency key (of the edit; the status event gets KEY.status)."),
                .positional("ENTITY", completion: .dynamic("entity"), help: "The entity, TYPE/ID."),
                .positional("FIELD", optional: true, repeating: true, help: "NAME=TEXT (a string) or NAME:=JSON."),
            ])
    }

    var global: GlobalOptions
    var entity: String
    var fields: [String]
    var status: String?
    var by: String?
    var key: String?

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        entity = arguments["ENTITY"] ?? ""
        fields = arguments.values("FIELD")
        status = arguments["status"]
        by = arguments["by"] ?? System.environment("USER")
        key = arguments["key"]
    }

    func validate() throws {
        guard !fields.isEmpty || status != nil else {
            throw UsageError("give the values to keep: NAME=TEXT or NAME:=JSON, and/or --status STATUS")
        }
        _ = try EventArguments.fields(fields)
    }

    func run() throws {
        let (object, names) = try EventArguments.fields(fields)
        let connection = try global.connect()

        var params = JSONObjectWriter()
        params.add("entity", entity)
        let state = try connection.call("get", params).result as? [String: Any] ?? [:]
        let conflicts = state["conflicts"] as? [String: Any] ?? [:]
        let conflicting = Set(
            (conflicts["fields"] as? [String: Any] ?? [:]).filter { !(($0.value as? [Any]) ?? []).isEmpty }.keys)
        let statusConflict = !((conflicts["status"] as? [Any]) ?? []).isEmpty

        var events: [[UInt8]] = []
        if !names.isEmpty {
            var edit = JSONObjectWriter()
            edit.add("entity", entity)
            edit.add("kind", "edit")
            edit.add("fields", json: object.bytes)
            // Without it, the edit of a field in conflict would only join the conflict.
            edit.add("resolve", true)
            edit.add("key", key)
            edit.add("by", by)
            events.append(edit.bytes)
        }
        if let status {
            var event = JSONObjectWriter()
            event.add("entity", entity)
            event.add("kind", "status")
            event.add("status", status)
            event.add("key", key.map { names.isEmpty ? $0 : $0 + ".status" })
            event.add("by", by)
            events.append(event.bytes)
        }
        var append = JSONObjectWriter()
        append.add("events", json: RawJSON.array(events))
        let reply = try connection.call("append", append)

        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
            output.flush()
            return
        }
        let ids = (reply.result as? [String: Any])?["ids"] as? [String] ?? []
        var settled = names.filter { conflicting.contains($0) }
        if status != nil, statusConflict { settled.append("status") }
        var unconflicted = names.filter { !conflicting.contains($0) }
        if status != nil, !statusConflict { unconflicted.append("status") }
        var remaining = conflicting.subtracting(names).sorted()
        if statusConflict, status == nil { remaining.append("status") }

        if !settled.isEmpty {
            output.line("resolved \(settled.joined(separator: ", ")) of \(entity): \(ids.joined(separator: ", "))")
        } else {
            output.line("appended \(ids.joined(separator: ", ")) to \(entity)")
        }
        output.flush()
        if !unconflicted.isEmpty {
            Terminal.note(
                "\(entity) had no conflict on \(unconflicted.joined(separator: ", ")); the values were appended anyway."
            )
        }
        if !remaining.isEmpty {
            Terminal.note(
                "\(entity) still has conflicts on \(remaining.joined(separator: ", ")); see `evctl get \(entity)`.")
        }
    }
}
