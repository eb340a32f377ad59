import Arguments
import Projections

/// `evctl get ENTITY`: an entity's current state.
struct Get: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "get",
            abstract: "Show an entity's current state: status, fields, sets, conflicts.",
            discussion: """
                Fields whose concurrent edits conflict are listed with every competing value; \
                `evctl resolve` settles them. With --json, the state exactly as the daemon returns it.

                With --sync, per peer whether it holds the entity as this node does: synced \
                (its last known version vector covers every event of the entity), pending (not \
                yet), or failed (the peer refused one of its events as a dead letter, or it is \
                pending while the peer is failing or terminal; see `evctl attention`).
                """,
            arguments: [
                .flag("history", help: "Also list every status the entity has had."),
                .flag("sync", help: "Also show, per peer, whether it holds the entity: synced, pending or failed."),
                .positional("ENTITY", completion: .dynamic("entity"), help: "The entity, TYPE/ID (e.g. job/42)."),
            ])
    }

    var global: GlobalOptions
    var entity: String
    var history: Bool
    var sync: Bool

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        entity = arguments["ENTITY"] ?? ""
        history = arguments.flag("history")
        sync = arguments.flag("sync")
    }

    func run() throws {
        let connection = try global.connect()
        var params = JSONObjectWriter()
        params.add("entity", entity)
        if sync { params.add("sync", true) }
        let reply = try connection.call("get", params)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            for line in EntityText.lines(reply.result as? [String: Any] ?? [:], history: history) {
                output.line(line)
            }
        }
        output.flush()
    }
}

/// An entity's state as lines for a person.
enum EntityText {
    static func lines(_ state: [String: Any], history: Bool) -> [String] {
        let entity = state["entity"] as? String ?? "?"
        var rows: [[String]] = [
            ["entity:", entity],
            ["version:", state["version"] as? String ?? "-"],
            [
                "rev:",
                (state["rev"] as? Int).map { "\($0) (append --if-match \($0) changes it only if nothing else has)" }
                    ?? "-",
            ],
            ["events:", String(state["events"] as? Int ?? 0)],
        ]
        let deleted = state["deleted"] as? Bool ?? false
        rows.append(["deleted:", deleted ? "yes (evctl append \(entity) restore brings it back)" : "no"])
        let status = state["status"] as? [String: Any]
        let current = status?["current"].map { $0 is JSONTree.Null ? "-" : RawJSON.display($0) } ?? "-"
        rows.append(["status:", current])
        // Proposals (a type with an authority): waiting for its decision, or refused by it.
        for entry in status?["proposed"] as? [[String: Any]] ?? [] {
            rows.append([
                "proposed:",
                "\(entry["status"].map(RawJSON.display) ?? "?") (\(entry["id"] as? String ?? "?"), waiting for the authority)",
            ])
        }
        for entry in status?["rejected"] as? [[String: Any]] ?? [] {
            rows.append([
                "rejected:",
                "\(entry["status"].map(RawJSON.display) ?? "?") (\(entry["id"] as? String ?? "?")): \(entry["reason"] as? String ?? "")",
            ])
        }
        var lines = Format.table(rows)

        if history, let entries = status?["history"] as? [[String: Any]], !entries.isEmpty {
            lines.append("history:")
            let table = entries.map { entry in
                [
                    "  " + (entry["id"] as? String ?? "?"), entry["status"].map(RawJSON.display) ?? "?",
                    (entry["origin"] as? String).map { "from \($0)" } ?? "",
                ]
            }
            lines += Format.table(table)
        }

        let fields = state["fields"] as? [String: Any] ?? [:]
        if fields.isEmpty {
            lines.append("fields: none")
        } else {
            lines.append("fields:")
            lines += fields.keys.sorted().map { "  \($0): \(RawJSON.display(fields[$0]!))" }
        }

        let sets = state["sets"] as? [String: Any] ?? [:]
        if !sets.isEmpty {
            lines.append("sets:")
            for name in sets.keys.sorted() {
                let elements = (sets[name] as? [Any] ?? []).map(RawJSON.display)
                lines.append("  \(name): " + (elements.isEmpty ? "(empty)" : elements.joined(separator: ", ")))
            }
        }

        let counters = state["counters"] as? [String: Any] ?? [:]
        if !counters.isEmpty {
            lines.append("counters:")
            lines += counters.keys.sorted().map { "  \($0): \(RawJSON.display(counters[$0]!))" }
        }

        let blobs = state["blobs"] as? [String: Any] ?? [:]
        if !blobs.isEmpty {
            lines.append("blobs:")
            lines += blobs.keys.sorted().map { hash in
                let held = blobs[hash] as? String ?? "?"
                return "  \(hash): \(held)" + (held == "pending" ? " (its bytes are not on this node yet)" : "")
            }
        }

        lines += conflictLines(state)
        if let sync = state["sync"] as? [String: Any] { lines += syncLines(sync) }
        return lines
    }

    /// Per peer, whether it holds the entity, with what to do about a failure.
    static func syncLines(_ sync: [String: Any]) -> [String] {
        guard !sync.isEmpty else { return ["sync: no peers; add one with `evctl peers add NAME URL`"] }
        var lines = ["sync:"]
        lines += Format.table(sync.keys.sorted().map { ["  \($0):", sync[$0] as? String ?? "?"] })
        if sync.values.contains(where: { $0 as? String == "failed" }) {
            lines.append("  `evctl attention` shows why; `evctl peers show PEER` what the peer lacks")
        }
        return lines
    }

    /// The conflicts in words, each competing value with the event that set it.
    static func conflictLines(_ state: [String: Any]) -> [String] {
        let conflicts = state["conflicts"] as? [String: Any] ?? [:]
        let fields = conflicts["fields"] as? [String: Any] ?? [:]
        let statuses = conflicts["status"] as? [[String: Any]] ?? []
        let names = fields.keys.sorted().filter { !((fields[$0] as? [Any]) ?? []).isEmpty }
        guard !names.isEmpty || !statuses.isEmpty else { return ["conflicts: none"] }

        var what = names.map { "\($0) (\(((fields[$0] as? [Any]) ?? []).count) values)" }
        if !statuses.isEmpty { what.append("status (\(statuses.count) values)") }
        var lines = ["CONFLICT: concurrent changes to " + what.joined(separator: ", ") + ":"]
        func heads(_ entries: [[String: Any]], valueKey: String) -> [String] {
            Format.table(
                entries.map { head in
                    let value = head[valueKey] ?? head["value"] ?? head["status"]
                    return [
                        "    " + (value.map(RawJSON.display) ?? "?"), head["id"] as? String ?? "",
                        (head["origin"] as? String).map { "from \($0)" } ?? "",
                    ]
                })
        }
        for name in names {
            lines.append("  \(name):")
            lines += heads(fields[name] as? [[String: Any]] ?? [], valueKey: "value")
        }
        if !statuses.isEmpty {
            lines.append("  status:")
            lines += heads(statuses, valueKey: "status")
        }
        let entity = state["entity"] as? String ?? "ENTITY"
        var command = "evctl resolve \(entity)" + names.map { " \($0)=VALUE" }.joined()
        if !statuses.isEmpty { command += " --status STATUS" }
        lines.append("  settle with: \(command)")
        return lines
    }
}
