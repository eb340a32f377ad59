import Arguments

/// `evctl dead-letters`: replicated events that failed validation and were set aside.
struct DeadLetters: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "dead-letters",
            abstract: "List events from peers that failed validation and were set aside.",
            discussion: """
                Such events never block the rest of a sync; they wait here with the reason. \
                --json shows each one whole, with its raw bytes.
                """,
            arguments: [
                .option("limit", value: "N", help: "At most N per page (1-10000)."),
                .option("after", value: "KEY", help: "Start after this key (the `next` of a previous page)."),
                .flag("all", help: "Read every page, not only the first."),
            ])
    }

    var global: GlobalOptions
    var limit: Int?
    var after: String?
    var all: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        limit = try arguments.integer("limit", in: 1...10000)
        after = arguments["after"]
        all = arguments.flag("all")
    }

    func run() throws {
        let pages = Pages(
            connection: try global.connect(), method: "dead_letters", itemsMember: "dead_letters", all: all)
        let collected = try pages.collect(after: after, json: global.json) { cursor in
            var params = JSONObjectWriter()
            params.add("limit", limit ?? (all ? 1000 : nil))
            params.add("after", cursor)
            return params
        } row: { item in
            [
                item["received_at"].map(RawJSON.display) ?? "-", item["peer"].map(RawJSON.display) ?? "-",
                item["id"].map(RawJSON.display) ?? "-", item["origin"].map(RawJSON.display) ?? "-",
                item["reason"].map(RawJSON.display) ?? "-",
            ]
        }
        let rows = collected.rows
        var output = StandardOutput()
        if global.json {
            output.line(bytes: collected.json)
        } else if rows.isEmpty {
            output.line("no dead letters")
        } else {
            for line in Format.table([["RECEIVED", "PEER", "ID", "ORIGIN", "REASON"]] + rows) { output.line(line) }
        }
        output.flush()
        if !global.json { Pages.hintMore(collected.next) }
    }
}
