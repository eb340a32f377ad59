import Arguments

/// `evctl consumers list | add NAME | ack NAME SEQ | remove NAME`: the durable consumers,
/// named cursors the daemon keeps over its log for readers that must resume where they
/// stopped.
struct Consumers: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "consumers",
            abstract: "List, add, acknowledge or remove durable consumers: named cursors over this node's log.",
            discussion: """
                A durable consumer is a reader's place in this node's log, kept in the store: \
                the seq of the last event it has processed. `evctl log --consumer NAME` (with \
                --follow too) and the API's log and watch with "consumer" start after it, and \
                `evctl log --consumer` acknowledges what it has written, so a reader that stops \
                (a crash, a reboot) resumes without a gap. The lag is the events stored since. \
                Like seqs, consumers are this node's own: they are not replicated.

                  evctl consumers add search-index
                  evctl log --follow --consumer search-index --json | indexer
                  evctl consumers list
                  evctl consumers remove search-index
                """,
            subcommands: [ConsumersList.self, ConsumersAdd.self, ConsumersAck.self, ConsumersRemove.self])
    }

    init(_ arguments: ParsedArguments) {}

    static let nameHelp = "1 to 64 letters, digits, '.', '_' or '-'."

    /// One consumer as a table row: name, seq, lag, last acknowledgement.
    static func row(_ consumer: [String: Any]) -> [String] {
        [
            consumer["name"] as? String ?? "?", "\(consumer["seq"] as? Int ?? 0)", "\(consumer["lag"] as? Int ?? 0)",
            consumer["acked_at"] as? String ?? "?",
        ]
    }

    /// The line for the consumer `name` of a `consumers.*` answer.
    static func acknowledged(_ name: String) -> ([String: Any]) -> [String] {
        { result in
            let consumers = result["consumers"] as? [[String: Any]] ?? []
            guard let consumer = consumers.first(where: { $0["name"] as? String == name }) else { return [] }
            let seq = consumer["seq"] as? Int ?? 0
            let lag = consumer["lag"] as? Int ?? 0
            return ["consumer \(name) at seq \(seq), \(Format.count(lag, "event")) behind the head"]
        }
    }
}

struct ConsumersList: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "list",
            abstract: "List the consumers: name, acknowledged seq, lag behind the head, last acknowledgement.")
    }

    var global: GlobalOptions

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
    }

    func run() throws {
        try global.printResult(of: "consumers.list") { result in
            let consumers = result["consumers"] as? [[String: Any]] ?? []
            guard !consumers.isEmpty else { return ["no consumers; add one with `evctl consumers add NAME`"] }
            return Format.table([["NAME", "SEQ", "LAG", "ACKED"]] + consumers.map(Consumers.row))
        }
    }
}

struct ConsumersAdd: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "add",
            abstract: "Add a consumer that reads from the start of the log, or from --seq or the head on.",
            discussion: """
                Adding a consumer that exists at the same seq changes nothing; one that has \
                acknowledged more is a conflict (exit 3): acknowledgements only move forward.
                """,
            arguments: [
                .positional("NAME", help: Consumers.nameHelp),
                .option("seq", value: "SEQ", help: "Start after seq SEQ (default 0: the whole log)."),
                .flag("head", help: "Start at the head: only events stored from now on."),
            ])
    }

    var global: GlobalOptions
    var name: String
    var seq: Int?
    var head: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        name = arguments["NAME"] ?? ""
        seq = try arguments.integer("seq", in: 0...Int.max)
        head = arguments.flag("head")
    }

    func validate() throws {
        if head && seq != nil { throw UsageError("give --seq or --head, not both") }
    }

    func run() throws {
        var start = seq ?? 0
        if head {
            let reply = try global.call("consumers.list")
            start = (reply.result as? [String: Any])?["head"] as? Int ?? 0
        }
        var params = JSONObjectWriter()
        params.add("name", name)
        params.add("seq", start)
        try global.printResult(of: "consumers.ack", params, text: Consumers.acknowledged(name))
    }
}

struct ConsumersAck: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "ack",
            abstract: "Acknowledge every event up to SEQ for a consumer (creating it when new).",
            discussion: """
                A seq below what the consumer acknowledged is a conflict (exit 3), and one \
                beyond the head is refused (exit 64): acknowledge only what was read.
                """,
            arguments: [
                .positional("NAME", completion: .dynamic("consumer"), help: Consumers.nameHelp),
                .positional("SEQ", help: "The seq of the last event processed."),
            ])
    }

    var global: GlobalOptions
    var name: String
    var seq: Int

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        name = arguments["NAME"] ?? ""
        guard let seq = Int(arguments["SEQ"] ?? ""), seq >= 0 else {
            throw UsageError("SEQ must be a seq: an integer from 0 up")
        }
        self.seq = seq
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("name", name)
        params.add("seq", seq)
        try global.printResult(of: "consumers.ack", params, text: Consumers.acknowledged(name))
    }
}

struct ConsumersRemove: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "remove",
            abstract: "Forget a consumer (exit 2 when there is none); the log is unchanged.",
            arguments: [.positional("NAME", completion: .dynamic("consumer"), help: "The consumer's name.")])
    }

    var global: GlobalOptions
    var name: String

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        name = arguments["NAME"] ?? ""
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("name", name)
        try global.printResult(of: "consumers.remove", params) { _ in ["removed consumer \(name)"] }
    }
}
