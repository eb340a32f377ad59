import Arguments

/// `evctl attention`: everything `evctl status` counts under "needs attention", listed.
struct Attention: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "attention",
            abstract: "List what needs attention: conflicts, dead letters, failing and terminal peers.",
            discussion: """
                The entities in conflict (settle them with `evctl resolve`), the events from \
                peers that failed validation (`evctl dead-letters` shows them whole), and the \
                peers whose syncs keep failing or cannot succeed, with their last error and \
                since when. These are what `evctl status` counts under needs attention.

                Exits with 0 when nothing needs attention and 1 when something does, so a \
                script or a monitoring check can act on it; --json prints the daemon's \
                answer (every page merged with --all).
                """,
            arguments: [
                .option("limit", value: "N", help: "At most N conflicts and dead letters per page (1-10000)."),
                .option("after", value: "CURSOR", help: "Start after this cursor (the `next` of a previous page)."),
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
        let connection = try global.connect()
        var conflicts: [[String: Any]] = []
        var letters: [[String: Any]] = []
        var peers: [[String: Any]] = []
        var rawConflicts: [[UInt8]] = []
        var rawLetters: [[UInt8]] = []
        var rawPeers: [UInt8] = Array("[]".utf8)
        var cursor = after
        var next: String?
        while true {
            var params = JSONObjectWriter()
            params.add("limit", limit ?? (all ? 1000 : nil))
            params.add("after", cursor)
            let reply = try connection.call("attention", params)
            let result = reply.result as? [String: Any] ?? [:]
            conflicts += result["conflicts"] as? [[String: Any]] ?? []
            letters += result["dead_letters"] as? [[String: Any]] ?? []
            peers = result["peers"] as? [[String: Any]] ?? []
            rawConflicts += RawJSON.member("conflicts", of: reply.resultBytes).flatMap(RawJSON.elements(of:)) ?? []
            rawLetters += RawJSON.member("dead_letters", of: reply.resultBytes).flatMap(RawJSON.elements(of:)) ?? []
            rawPeers = RawJSON.member("peers", of: reply.resultBytes) ?? rawPeers
            next = result["next"] as? String
            guard all, let following = next, following != cursor else { break }
            cursor = following
        }
        var output = StandardOutput()
        if global.json {
            var object = JSONObjectWriter()
            object.add("conflicts", json: RawJSON.array(rawConflicts))
            object.add("dead_letters", json: RawJSON.array(rawLetters))
            object.add("peers", json: rawPeers)
            if let next { object.add("next", next) } else { object.add("next", json: Array("null".utf8)) }
            output.line(bytes: object.bytes)
        } else {
            for line in Attention.lines(conflicts: conflicts, letters: letters, peers: peers) { output.line(line) }
        }
        output.flush()
        if !global.json { Pages.hintMore(next) }
        if !(conflicts.isEmpty && letters.isEmpty && peers.isEmpty) {
            throw CommandFailure(exitCode: ExitStatus.failed, nil)
        }
    }

    static func lines(conflicts: [[String: Any]], letters: [[String: Any]], peers: [[String: Any]]) -> [String] {
        guard !(conflicts.isEmpty && letters.isEmpty && peers.isEmpty) else { return ["nothing needs attention"] }
        var lines: [String] = []
        if !conflicts.isEmpty {
            lines.append("conflicts (settle with `evctl resolve ENTITY NAME=VALUE`; `evctl get ENTITY` shows them):")
            lines += Format.table(
                conflicts.map { item in
                    var what = item["fields"] as? [String] ?? []
                    if item["status"] as? Bool == true { what.append("(status)") }
                    return ["  " + (item["entity"] as? String ?? "?"), what.joined(separator: ", ")]
                })
        }
        if !letters.isEmpty {
            lines.append("dead letters (events from peers that failed validation; `evctl dead-letters` shows them):")
            lines += Format.table(
                letters.map { item in
                    [
                        "  " + (item["id"].map(RawJSON.display) ?? "-"),
                        "from " + (item["peer"].map(RawJSON.display) ?? "-"),
                        item["reason"].map(RawJSON.display) ?? "-",
                    ]
                })
        }
        if !peers.isEmpty {
            lines.append("peers (failing: 8 or more failed syncs in a row; terminal: retrying cannot fix it):")
            lines += Format.table(
                peers.map { peer in
                    var error = "-"
                    if let last = peer["last_error"] as? [String: Any] {
                        error = "\(last["reason"] as? String ?? "error"): \(last["message"] as? String ?? "no message")"
                    }
                    return [
                        "  " + (peer["name"] as? String ?? "?"),
                        "\(peer["state"] as? String ?? "?") (\(Format.count(peer["failures"] as? Int ?? 0, "failure")))",
                        "since " + (peer["since"] as? String ?? "?"), error,
                    ]
                })
        }
        return lines
    }
}
