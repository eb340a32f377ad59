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

                --consumer NAME starts after the seq the durable consumer NAME acknowledged \
                (`evctl consumers add NAME` makes one) and acknowledges each page, and with \
                --follow each run of events, once it is written to standard output: run again \
                after a crash, it goes on where the acknowledged events end. An event written \
                just before a crash may be written again, never skipped.
                """,
            arguments: [
                .option("entity", value: "ENTITY", completion: .dynamic("entity"), help: "Only the events of ENTITY."),
                .option("origin", value: "NODE", help: "Only events made on the node with this id."),
                .option("type", value: "TYPE", help: "Only the events of entities of TYPE."),
                .option("after", value: "SEQ", help: "Start after seq SEQ (0: from the start)."),
                .option(
                    "consumer", value: "NAME", completion: .dynamic("consumer"),
                    help: "Start after what the durable consumer NAME acknowledged, and acknowledge what is written."),
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
    var consumer: String?
    var limit: Int?
    var all: Bool
    var follow: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        entity = arguments["entity"]
        origin = arguments["origin"]
        type = arguments["type"]
        after = try arguments.integer("after", in: 0...Int.max)
        consumer = arguments["consumer"]
        limit = try arguments.integer("limit", in: 1...10000)
        all = arguments.flag("all")
        follow = arguments.flag("follow")
    }

    func validate() throws {
        if consumer != nil && after != nil {
            throw UsageError("give --after or --consumer, not both: a consumer resumes after what it acknowledged")
        }
    }

    func run() throws {
        let connection = try global.connect()
        var output = StandardOutput()
        var cursor = after ?? 0
        var more: Int?
        var acknowledgements = consumer.map { ConsumerAcknowledgements(name: $0, global: global) }
        var first = true
        while true {
            var params = JSONObjectWriter()
            if first, let consumer {
                params.add("consumer", consumer)
            } else {
                params.add("after", cursor)
            }
            first = false
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
            // Where the next page starts: `next`, or once the page reached the head, the head
            // (every seq up to it was read, whether or not the filters kept its event).
            let reached =
                next ?? max(cursor, result["head"] as? Int ?? events.compactMap { $0["seq"] as? Int }.max() ?? cursor)
            if var pending = acknowledgements {
                output.flush()
                try pending.acknowledge(reached)
                acknowledgements = pending
            }
            guard all || follow else {
                more = next
                break
            }
            if let next, next > cursor {
                cursor = next
                continue
            }
            cursor = reached
            break
        }
        output.flush()
        guard follow else {
            if !global.json, let more {
                Terminal.note("there is more: add --after \(more) for the next page, or --all for every page.")
            }
            return
        }
        try Follower(global: global, entity: entity, origin: origin, type: type, acknowledgements: acknowledgements)
            .follow(connection, after: cursor)
    }
}

/// A durable consumer's acknowledgements, on a connection of their own (the reading one may
/// be a watch). Each is sent once what it covers is written to standard output.
struct ConsumerAcknowledgements {
    let name: String
    let global: GlobalOptions
    private var connection: Connection?
    /// The last seq acknowledged.
    private(set) var acknowledged = -1

    init(name: String, global: GlobalOptions) {
        self.name = name
        self.global = global
    }

    /// Acknowledges every event up to `seq` (no request when nothing moved).
    mutating func acknowledge(_ seq: Int) throws {
        guard seq > acknowledged else { return }
        if connection == nil { connection = try global.connect() }
        var params = JSONObjectWriter()
        params.add("name", name)
        params.add("seq", seq)
        _ = try connection!.call("consumers.ack", params)
        acknowledged = seq
    }
}

/// Prints events as the daemon's `watch` notifications bring them.
struct Follower {
    var global: GlobalOptions
    var entity: String?
    var origin: String?
    var type: String?
    /// With `--consumer`: what is written is acknowledged, each run of events once the
    /// daemon has sent nothing more for now, or every 1,000 events.
    var acknowledgements: ConsumerAcknowledgements?

    /// Watches from seq `after`, forever; reconnects, resuming after the last seq it saw,
    /// when the daemon cut the connection for falling behind.
    func follow(_ first: Connection, after start: Int) throws {
        var acknowledgements = self.acknowledgements
        var connection = first
        var after = start
        var output = StandardOutput()
        var unacknowledged = 0
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
                    // Everything written was acknowledged before waiting for more.
                    if let acknowledgements {
                        throw CommandFailure(
                            exitCode: ExitStatus.unavailable,
                            "the daemon at \(connection.path) closed the connection. To continue, run: \(command) --consumer \(acknowledgements.name)"
                        )
                    }
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
                    if var pending = acknowledgements {
                        unacknowledged += 1
                        if unacknowledged >= 1000 || !connection.hasPendingInput {
                            try pending.acknowledge(after)
                            acknowledgements = pending
                            unacknowledged = 0
                        }
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
