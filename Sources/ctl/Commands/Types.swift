import Arguments

/// `evctl types`: the entity types the store holds, one per line, each with the rules the
/// daemon's types file gives it.
struct Types: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "types",
            abstract: "List the entity types of the store and the types file's rules, one type per line, sorted.",
            discussion: """
                A type counts while the store holds an entity of it, deleted or not; a type the \
                daemon's types file (types_file) gives rules is listed too, with its rules indented \
                below it: field types, whether other fields are refused, the status moves. With \
                --json, the daemon's reply: {"types":["job","site"],"rules":{"job":{...}}}.
                """)
    }

    var global: GlobalOptions

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
    }

    func run() throws {
        let reply = try global.connect().call("types")
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            let result = reply.result as? [String: Any] ?? [:]
            let stored = Set(result["types"] as? [String] ?? [])
            let rules = result["rules"] as? [String: Any] ?? [:]
            for type in stored.union(rules.keys).sorted() {
                output.line(stored.contains(type) ? type : "\(type) (no entities yet)")
                for line in Types.describe(rules[type] as? [String: Any] ?? [:]) { output.line("  " + line) }
            }
        }
        output.flush()
    }

    /// A type's rules in words, a line each.
    static func describe(_ rules: [String: Any]) -> [String] {
        var lines: [String] = []
        if let fields = rules["fields"] as? [String: Any], !fields.isEmpty {
            lines.append(
                "fields: "
                    + fields.keys.sorted().map { "\($0) \(fields[$0] as? String ?? "?")" }.joined(separator: ", "))
        }
        if rules["extra_fields"] as? Bool == false { lines.append("other fields: refused") }
        if let status = rules["status"] as? [String: Any] {
            if let initial = status["initial"] as? [String], !initial.isEmpty {
                lines.append("status begins at: " + initial.joined(separator: ", "))
            }
            let moves = status["transitions"] as? [String: Any] ?? [:]
            for from in moves.keys.sorted() {
                let to = moves[from] as? [String] ?? []
                lines.append("status \(from) -> " + (to.isEmpty ? "(none)" : to.joined(separator: ", ")))
            }
        }
        if let authority = rules["authority"] as? String { lines.append("authority: \(authority)") }
        if let offline = rules["offline"] as? String {
            lines.append(
                offline == "refuse"
                    ? "offline: refuse (appended only at the authority; elsewhere handed to it, or unavailable)"
                    : "offline: \(offline)")
        }
        return lines
    }
}
