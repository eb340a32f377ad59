import Arguments

/// `evctl types`: the entity types the store holds, one per line.
struct Types: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "types",
            abstract: "List the entity types present in the store, one per line, sorted.",
            discussion: """
                A type counts while the store holds an entity of it, deleted or not. With --json, \
                the daemon's reply: {"types":["job","site"]}.
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
            for type in result["types"] as? [String] ?? [] { output.line(type) }
        }
        output.flush()
    }
}
