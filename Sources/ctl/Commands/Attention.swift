import Arguments

/// `evctl attention [dismiss ID...]`: everything `evctl status` counts under "needs
/// attention", listed; divergent events dismissed once dealt with.
struct Attention: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "attention",
            abstract:
                "List what needs attention: conflicts, dead letters, divergent events, failing and terminal peers.",
            discussion: """
                The entities in conflict (settle them with `evctl resolve`), the events from \
                peers that failed validation (`evctl dead-letters` shows them whole), the \
                events a peer holds with other content under the same id (divergent: one of \
                the two nodes holds a forgery or a damaged event), and the peers whose syncs \
                keep failing or cannot succeed, with their last error and since when. These are \
                what `evctl status` counts under needs attention.

                dismiss ID... removes the records of divergent events once you have dealt with \
                them (a later sync that finds the same difference records it again).

                Exits with 0 when nothing needs attention and 1 when something does, so a \
                script or a monitoring check can act on it; --json prints the daemon's \
                answer (every page merged with --all).
                """,
            arguments: [
                .positional(
                    "ACTION", optional: true, completion: .words(["dismiss"]),
                    help: "dismiss: remove the records of the divergent events or rule violations named; none: list."),
                .positional(
                    "ID", optional: true, repeating: true,
                    help: "The event ID of a divergent event or a rule violation."),
                .option("limit", value: "N", help: "At most N conflicts and dead letters per page (1-10000)."),
                .option("after", value: "CURSOR", help: "Start after this cursor (the `next` of a previous page)."),
                .flag("all", help: "Read every page, not only the first."),
            ])
    }

    var global: GlobalOptions
    var limit: Int?
    var after: String?
    var all: Bool
    var dismiss: Bool
    var ids: [String]

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        limit = try arguments.integer("limit", in: 1...10000)
        after = arguments["after"]
        all = arguments.flag("all")
        ids = arguments.values("ID")
        dismiss = false
        if let word = arguments["ACTION"] {
            guard word == "dismiss" else {
                throw UsageError("'\(word)' is not an action: dismiss (or nothing, to list)")
            }
            dismiss = true
        }
    }

    func validate() throws {
        if dismiss {
            if ids.isEmpty { throw UsageError("dismiss takes the event ids of divergent events") }
            if limit != nil || after != nil || all {
                throw UsageError("--limit, --after and --all go with the listing")
            }
        } else if !ids.isEmpty {
            throw UsageError("ids go after dismiss")
        }
    }

    func run() throws {
        let connection = try global.connect()
        if dismiss {
            var params = JSONObjectWriter()
            params.add("ids", json: RawJSON.array(ids.map { DeadLetters.quoted($0) }))
            // An id names a divergent event or a rule violation: both records go.
            let reply = try connection.call("divergent.dismiss", params)
            let rules = try connection.call("rule_violations.dismiss", params)
            var output = StandardOutput()
            let count = (reply.result as? [String: Any])?["dismissed"] as? Int ?? 0
            let ruleCount = (rules.result as? [String: Any])?["dismissed"] as? Int ?? 0
            if global.json {
                var object = JSONObjectWriter()
                object.add("dismissed", count + ruleCount)
                output.line(bytes: object.bytes)
            } else {
                output.line(
                    "dismissed \(count) divergent-event record" + (count == 1 ? "" : "s") + " and "
                        + Format.count(ruleCount, "rule-violation record"))
            }
            output.flush()
            return
        }
        var conflicts: [[String: Any]] = []
        var letters: [[String: Any]] = []
        var divergent: [[String: Any]] = []
        var violations: [[String: Any]] = []
        var rawViolations: [UInt8] = Array("[]".utf8)
        var rejected: [[String: Any]] = []
        var rawRejected: [UInt8] = Array("[]".utf8)
        var peers: [[String: Any]] = []
        var rawConflicts: [[UInt8]] = []
        var rawLetters: [[UInt8]] = []
        var rawDivergent: [UInt8] = Array("[]".utf8)
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
            divergent = result["divergent"] as? [[String: Any]] ?? []
            violations = result["rule_violations"] as? [[String: Any]] ?? []
            rawViolations = RawJSON.member("rule_violations", of: reply.resultBytes) ?? rawViolations
            rejected = result["rejected_proposals"] as? [[String: Any]] ?? []
            rawRejected = RawJSON.member("rejected_proposals", of: reply.resultBytes) ?? rawRejected
            rawDivergent = RawJSON.member("divergent", of: reply.resultBytes) ?? rawDivergent
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
            object.add("divergent", json: rawDivergent)
            object.add("rule_violations", json: rawViolations)
            object.add("rejected_proposals", json: rawRejected)
            object.add("peers", json: rawPeers)
            if let next { object.add("next", next) } else { object.add("next", json: Array("null".utf8)) }
            output.line(bytes: object.bytes)
        } else {
            for line in Attention.lines(
                conflicts: conflicts, letters: letters, divergent: divergent, violations: violations,
                rejected: rejected, peers: peers)
            {
                output.line(line)
            }
        }
        output.flush()
        if !global.json { Pages.hintMore(next) }
        if !(conflicts.isEmpty && letters.isEmpty && divergent.isEmpty && violations.isEmpty && rejected.isEmpty
            && peers.isEmpty)
        {
            throw CommandFailure(exitCode: ExitStatus.failed, nil)
        }
    }

    static func lines(
        conflicts: [[String: Any]], letters: [[String: Any]], divergent: [[String: Any]] = [],
        violations: [[String: Any]] = [], rejected: [[String: Any]] = [], peers: [[String: Any]]
    ) -> [String] {
        guard
            !(conflicts.isEmpty && letters.isEmpty && divergent.isEmpty && violations.isEmpty && rejected.isEmpty
                && peers.isEmpty)
        else {
            return ["nothing needs attention"]
        }
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
        if !divergent.isEmpty {
            lines.append(
                "divergent events (a peer holds other content under the same id: a forgery or a damaged event; `evctl attention dismiss ID` once dealt with):"
            )
            lines += Format.table(
                divergent.map { item in
                    [
                        "  " + (item["id"] as? String ?? "?"), "origin " + (item["origin"] as? String ?? "?"),
                        "peer " + (item["peer"] as? String ?? "?"),
                        "here \((item["here"] as? String ?? "?").prefix(12)), there \((item["there"] as? String ?? "?").prefix(12))",
                    ]
                })
        }
        if !violations.isEmpty {
            lines.append(
                "rule violations (events from other nodes that break this node's types file, stored and folded; `evctl attention dismiss ID` once dealt with):"
            )
            lines += Format.table(
                violations.map { item in
                    [
                        "  " + (item["id"] as? String ?? "?"), item["entity"] as? String ?? "?",
                        "from " + (item["peer"] as? String ?? "-"), item["rule"] as? String ?? "?",
                    ]
                })
        }
        if !rejected.isEmpty {
            lines.append(
                "rejected proposals (status moves of this node the authority refused; read the entity and propose again):"
            )
            lines += Format.table(
                rejected.map { item in
                    [
                        "  " + (item["entity"] as? String ?? "?"), "-> " + (item["status"] as? String ?? "?"),
                        item["reason"] as? String ?? "?",
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
