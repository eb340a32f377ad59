import Arguments

/// `evctl log`: the events in the order this node stored them (seq order); `--follow`
/// keeps printing new ones.
struct Log: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "log",
            abstract: "Print events in the order this node stored them, one a line; --follow waits for new ones.",
            discussion: """
                Each line shows the event's seq, id, entity, kind and what it changed. With --json, \
                each line is the stored event as the daemon holds it, with its "seq" (NDJSON).

                Every event the node stores, appended here, replicated or imported, takes the \
                node's next seq, so a reader that remembers the last seq it saw and passes it to \
                --after later misses nothing, whatever order the events' ids have (a peer's \
                events made earlier can arrive later). A seq is this node's own: resume against \
                the same node.

                --follow prints the log from --after on (every page), then each event as it is \
                stored, until evctl is stopped or the daemon closes the connection. A follower \
                that falls too far behind is cut off by the daemon; evctl reconnects and resumes \
                after the last seq it printed. `evctl export` writes the events in id order instead.
                """,
            arguments: [
                .option("entity", value: "ENTITY", completion: .dynamic("entity"), help: "Only the events of ENTITY."),
                .option("origin", value: "NODE", help: "Only events made on the node with this id."),
                .option("type", value: "TYPE", help: "Only the events of entities of TYPE."),
                .option("after", value: "SEQ", help: "Start after seq SEQ (0: from the start)."),
                .option("limit", value: "N", help: "At most N events per page (1-10000; the daemon's default is 100)."),
                .flag("all", help: "Read every page, not only the first."),
                .flag("follow", help: "Keep printing events as they arrive."),
            ])
    }

    var global: GlobalOptions
    var entity: String?
    var origin: String?
    var type: String?
    var after: Int?
    var limit: Int?
    var all: Bool
    var follow: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        entity = arguments["entity"]
        origin = arguments["origin"]
        type = arguments["type"]
        after = try arguments.integer("after", in: 0...Int.max)
        limit = try arguments.integer("limit", in: 1...10000)
        all = arguments.flag("all")
        follow = arguments.flag("follow")
    }

    func run() throws {
        let connection = try global.connect()
        var output = StandardOutput()
        var cursor = after ?? 0
        var more: Int?
        while true {
            var params = JSONObjectWriter()
            params.add("after", cursor)
            params.add("limit", limit ?? (all || follow ? 1000 : nil))
            params.add("entity", entity)
            params.add("origin", origin)
            params.add("type", type)
            let reply = try connection.call("log", params)
            let result = reply.result as? [String: Any] ?? [:]
            let events = result["events"] as? [[String: Any]] ?? []
            let raw =
                global.json ? RawJSON.member("events", of: reply.resultBytes).flatMap(RawJSON.elements(of:)) ?? [] : []
            for (index, event) in events.enumerated() {
                if global.json, index < raw.count {
                    output.line(bytes: raw[index])
                } else {
                    output.line(EventText.line(event))
                }
            }
            let next = result["next"] as? Int
            guard all || follow else {
                more = next
                break
            }
            if let next, next > cursor {
                cursor = next
                continue
            }
            // The page reached the head: everything up to it was read.
            cursor = max(cursor, result["head"] as? Int ?? events.compactMap { $0["seq"] as? Int }.max() ?? cursor)
            break
        }
        output.flush()
        guard follow else {
            if !global.json, let more {
                Terminal.note("there is more: add --after \(more) for the next page, or --all for every page.")
            }
            return
        }
        try Follower(global: global, entity: entity, origin: origin, type: type).follow(connection, after: cursor)
    }
}

/// Prints events as the daemon's `watch` notifications bring them.
struct Follower {
    var global: GlobalOptions
    var entity: String?
    var origin: String?
    var type: String?

    /// Watches from seq `after`, forever; reconnects, resuming after the last seq it saw,
    /// when the daemon cut the connection for falling behind.
    func follow(_ first: Connection, after start: Int) throws {
        var connection = first
        var after = start
        var output = StandardOutput()
        while true {
            var params = JSONObjectWriter()
            params.add("after", after)
            params.add("entity", entity)
            params.add("type", type)
            let id = try connection.send("watch", params)
            var reconnect = false
            while !reconnect {
                guard let message = try connection.receiveOrEnd() else {
                    var command = "evctl log --follow"
                    if let entity { command += " --entity \(entity)" }
                    if let origin { command += " --origin \(origin)" }
                    if let type { command += " --type \(type)" }
                    throw CommandFailure(
                        exitCode: ExitStatus.unavailable,
                        "the daemon at \(connection.path) closed the connection. To continue, run: \(command) --after \(after)"
                    )
                }
                switch message {
                case .reply(let reply):
                    if let error = reply.error, reply.id == id || reply.id == nil {
                        throw CommandFailure(exitCode: error.exitStatus, error.description)
                    }
                case .notification("event", let params, let bytes):
                    guard let event = params["event"] as? [String: Any] else { continue }
                    if let seq = event["seq"] as? Int {
                        // The daemon never sends a seq twice; this keeps a resumed watch honest too.
                        guard seq > after else { continue }
                        after = seq
                    }
                    if let origin, event["origin"] as? String != origin { continue }
                    if global.json {
                        let raw = RawJSON.member("params", of: bytes).flatMap { RawJSON.member("event", of: $0) }
                        output.line(bytes: raw ?? Array(RawJSON.text(event).utf8), immediately: true)
                    } else {
                        output.line(EventText.line(event), immediately: true)
                    }
                case .notification("watch.overflow", let params, _):
                    after = max(after, params["resume_after"] as? Int ?? after)
                    Terminal.note(
                        "the daemon ended the watch: evctl fell too far behind; reconnecting and resuming after seq \(after)."
                    )
                    reconnect = true
                case .notification:
                    continue
                }
            }
            connection.close()
            connection = try global.connect()
        }
    }
}
