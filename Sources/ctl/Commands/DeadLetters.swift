import Arguments
import Projections

/// `evctl dead-letters [retry|drop ID...|--all]`: replicated events that failed validation
/// and were set aside; listed, retried under the settings now in force, or dropped.
struct DeadLetters: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "dead-letters",
            abstract: "List, retry or drop events from peers that failed validation and were set aside.",
            discussion: """
                Such events never block the rest of a sync; they wait here with the reason. \
                --json shows each one whole, with its raw bytes.

                retry ID... validates each named dead letter again with the settings now in \
                force (after an upgrade, or a reload that changed a limit) and stores those that \
                pass as a sync would; the others stay, with the reason. drop ID... removes \
                them for good: a peer that offers a dropped event again has it skipped. An ID is \
                a dead letter's KEY or its event ID; --all acts on every dead letter. Exit 0 when \
                every one was stored (or dropped), 2 when some name no dead letter, 1 when some \
                still fail.

                  evctl dead-letters
                  evctl dead-letters retry 01JD3Q8R5N8X6ZK2W7Y4V9B3TQ
                  evctl dead-letters drop --all
                """,
            arguments: [
                .positional(
                    "ACTION", optional: true, completion: .words(["retry", "drop"]), help: "retry or drop; none: list them."),
                .positional("ID", optional: true, repeating: true, help: "The KEY or event ID of a dead letter."),
                .option("limit", value: "N", help: "At most N per page (1-10000)."),
                .option("after", value: "KEY", help: "Start after this key (the `next` of a previous page)."),
                .flag("all", help: "Read every page, not only the first; with retry or drop, act on every dead letter."),
            ])
    }

    enum Action: String {
        case retry, drop
    }

    var global: GlobalOptions
    var action: Action?
    var ids: [String]
    var limit: Int?
    var after: String?
    var all: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        limit = try arguments.integer("limit", in: 1...10000)
        after = arguments["after"]
        all = arguments.flag("all")
        ids = arguments.values("ID")
        if let word = arguments["ACTION"] {
            guard let action = Action(rawValue: word) else {
                throw UsageError("'\(word)' is not an action: retry or drop (or nothing, to list)")
            }
            self.action = action
        }
    }

    func validate() throws {
        guard action != nil else {
            if !ids.isEmpty { throw UsageError("ids go after retry or drop") }
            return
        }
        if all == !ids.isEmpty { throw UsageError("\(action!.rawValue) takes the ids of dead letters, or --all") }
        if limit != nil || after != nil { throw UsageError("--limit and --after go with the listing") }
    }

    func run() throws {
        if let action { return try act(action) }
        let pages = Pages(
            connection: try global.connect(), method: "dead_letters", itemsMember: "dead_letters", all: all)
        let collected = try pages.collect(after: after, json: global.json) { cursor in
            var params = JSONObjectWriter()
            params.add("limit", limit ?? (all ? 1000 : nil))
            params.add("after", cursor)
            return params
        } row: { item in
            [
                item["key"].map(RawJSON.display) ?? "-",
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
            for line in Format.table([["KEY", "RECEIVED", "PEER", "ID", "ORIGIN", "REASON"]] + rows) { output.line(line) }
        }
        output.flush()
        if !global.json { Pages.hintMore(collected.next) }
    }

    static func quoted(_ text: String) -> [UInt8] {
        var out: [UInt8] = []
        CanonicalWriter.appendString(text, to: &out)
        return out
    }

    /// The most ids one call names: the daemon's bound (`dead_letters.retry` / `.drop`).
    static let idsPerCall = 1000

    /// Retries or drops the ids given, or with --all every dead letter, in calls of at most
    /// `idsPerCall` ids.
    private func act(_ action: Action) throws {
        let connection = try global.connect()
        var batches: [[String]] = []
        if all {
            // The whole list first: a retry or drop changes the pages as they are read.
            var keys: [String] = []
            _ = try Pages(connection: connection, method: "dead_letters", itemsMember: "dead_letters", all: true).read(
                after: nil,
                params: { cursor in
                    var params = JSONObjectWriter()
                    params.add("limit", DeadLetters.idsPerCall)
                    params.add("after", cursor)
                    return params
                },
                page: { reply in
                    let items = (reply.result as? [String: Any])?["dead_letters"] as? [[String: Any]] ?? []
                    keys += items.compactMap { $0["key"] as? String }
                })
            batches = stride(from: 0, to: keys.count, by: DeadLetters.idsPerCall).map {
                Array(keys[$0..<min($0 + DeadLetters.idsPerCall, keys.count)])
            }
        } else {
            batches = stride(from: 0, to: ids.count, by: DeadLetters.idsPerCall).map {
                Array(ids[$0..<min($0 + DeadLetters.idsPerCall, ids.count)])
            }
        }
        var stored: [String] = []
        var stillInvalid: [[String: Any]] = []
        var dropped = 0
        var asked = 0
        for batch in batches {
            var params = JSONObjectWriter()
            params.add("ids", json: RawJSON.array(batch.map(DeadLetters.quoted)))
            let reply = try connection.exchange("dead_letters.\(action.rawValue)", params)
            if let error = reply.error {
                if let usage = error.usageError { throw usage }
                throw CommandFailure(exitCode: error.exitStatus, error.description)
            }
            let result = reply.result as? [String: Any] ?? [:]
            stored += result["stored"] as? [String] ?? []
            stillInvalid += result["still_invalid"] as? [[String: Any]] ?? []
            dropped += result["dropped"] as? Int ?? 0
            asked += batch.count
        }
        var output = StandardOutput()
        switch action {
        case .retry:
            if global.json {
                var object = JSONObjectWriter()
                object.add("stored", json: RawJSON.array(stored.map(DeadLetters.quoted)))
                object.add("still_invalid", json: RawJSON.array(stillInvalid.map { Array(RawJSON.text($0).utf8) }))
                output.line(bytes: object.bytes)
            } else {
                output.line("stored \(Format.count(stored.count, "event")); \(stillInvalid.count) still failing")
                for item in stillInvalid {
                    let id = item["id"] as? String ?? "-"
                    let reason = item["reason"] as? String ?? "-"
                    output.line("  \(id): \(reason): \(item["message"] as? String ?? "")")
                }
            }
        case .drop:
            if global.json {
                var object = JSONObjectWriter()
                object.add("dropped", dropped)
                output.line(bytes: object.bytes)
            } else {
                output.line("dropped \(Format.count(dropped, "dead letter"))")
            }
        }
        output.flush()
        let notFound =
            action == .drop ? asked - dropped : stillInvalid.filter { $0["reason"] as? String == "not_found" }.count
        if stillInvalid.count > notFound {
            throw CommandFailure(exitCode: ExitStatus.failed, "some dead letters still fail validation; they stay")
        }
        if notFound > 0 {
            throw CommandFailure(exitCode: ExitStatus.notFound, "\(notFound) of the ids name no dead letter")
        }
    }
}
