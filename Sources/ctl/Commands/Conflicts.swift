import Arguments

/// `evctl conflicts`: the entities with concurrent changes to settle.
struct Conflicts: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "conflicts",
            abstract: "List entities with conflicting concurrent changes, and which fields conflict.",
            discussion: """
                A field (or the status) is in conflict when two devices changed it without \
                seeing each other's change. `evctl get ENTITY` shows the competing values; \
                `evctl resolve ENTITY NAME=VALUE` settles them.
                """,
            arguments: [
                .option("type", value: "TYPE", completion: .dynamic("type"), help: "Only entities of this type."),
                .option("limit", value: "N", help: "At most N entities per page (1-10000)."),
                .option("after", value: "ENTITY", help: "Start after this entity (the `next` of a previous page)."),
                .flag("all", help: "Read every page, not only the first."),
            ])
    }

    var global: GlobalOptions
    var type: String?
    var limit: Int?
    var after: String?
    var all: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        type = arguments["type"]
        limit = try arguments.integer("limit", in: 1...10000)
        after = arguments["after"]
        all = arguments.flag("all")
    }

    func run() throws {
        let pages = Pages(connection: try global.connect(), method: "conflicts", itemsMember: "entities", all: all)
        let collected = try pages.collect(after: after, json: global.json) { cursor in
            var params = JSONObjectWriter()
            params.add("type", type)
            params.add("limit", limit ?? (all ? 1000 : nil))
            params.add("after", cursor)
            return params
        } row: { item in
            var what = item["fields"] as? [String] ?? []
            if item["status"] as? Bool == true { what.append("(status)") }
            return [item["entity"] as? String ?? "?", what.joined(separator: ", ")]
        }
        let rows = collected.rows
        var output = StandardOutput()
        if global.json {
            output.line(bytes: collected.json)
        } else if rows.isEmpty {
            output.line("no conflicts")
        } else {
            for line in Format.table([["ENTITY", "IN CONFLICT"]] + rows) { output.line(line) }
            output.line(
                "see the competing values with `evctl get ENTITY`; settle them with `evctl resolve ENTITY NAME=VALUE`")
        }
        output.flush()
        if !global.json { Pages.hintMore(collected.next) }
    }
}
