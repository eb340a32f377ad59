import Arguments

/// `evctl list`: entities, by type and status.
struct List: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "list",
            abstract: "List entities: their status, version, rev and whether they are deleted.",
            arguments: [
                .option("status", value: "STATUS", help: "Only entities whose current status is STATUS."),
                .flag("include-deleted", help: "Also list deleted entities."),
                .option(
                    "pending-for", value: "PEER", completion: .dynamic("peer"),
                    help: "Only entities PEER lacks an event of, by what it last held (not yet synced there)."),
                .option(
                    "limit", value: "N", help: "At most N entities per page (1-10000; the daemon's default is 100)."),
                .option("after", value: "ENTITY", help: "Start after this entity (the `next` of a previous page)."),
                .flag("all", help: "Read every page, not only the first."),
                .positional(
                    "TYPE", optional: true, completion: .dynamic("type"), help: "Only entities of this type (e.g. job)."
                ),
            ])
    }

    var global: GlobalOptions
    var type: String?
    var status: String?
    var includeDeleted: Bool
    var pendingFor: String?
    var limit: Int?
    var after: String?
    var all: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        type = arguments["TYPE"]
        status = arguments["status"]
        includeDeleted = arguments.flag("include-deleted")
        pendingFor = arguments["pending-for"]
        limit = try arguments.integer("limit", in: 1...10000)
        after = arguments["after"]
        all = arguments.flag("all")
    }

    func run() throws {
        let pages = Pages(connection: try global.connect(), method: "list", itemsMember: "entities", all: all)
        let collected = try pages.collect(after: after, json: global.json) { cursor in
            var params = JSONObjectWriter()
            params.add("type", type)
            params.add("status", status)
            if includeDeleted { params.add("include_deleted", true) }
            params.add("pending_for", pendingFor)
            params.add("limit", limit ?? (all ? 1000 : nil))
            params.add("after", cursor)
            return params
        } row: { item in
            [
                item["entity"] as? String ?? "?",
                (item["status"] as? String).map { RawJSON.display($0) } ?? "-",
                item["version"] as? String ?? "-",
                (item["rev"] as? Int).map(String.init) ?? "-",
                (item["deleted"] as? Bool ?? false) ? "yes" : "no",
            ]
        }
        let rows = collected.rows
        var output = StandardOutput()
        if global.json {
            output.line(bytes: collected.json)
        } else if rows.isEmpty {
            // A page of `pending_for` may hold none while more follow: it checked a bounded
            // number of entities.
            let more = collected.next != nil
            output.line(
                pendingFor.map { more ? "none pending for \($0) on this page" : "nothing pending for \($0)" }
                    ?? "no entities")
        } else {
            for line in Format.table([["ENTITY", "STATUS", "VERSION", "REV", "DELETED"]] + rows) { output.line(line) }
        }
        output.flush()
        if !global.json { Pages.hintMore(collected.next) }
    }
}
