import Arguments
import Foundation

/// `evctl log`: the events, in id order; `--follow` keeps printing new ones.
struct Log: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "log",
            abstract: "Print events in id order, one a line; --follow waits for new ones.",
            discussion: """
                Each line shows the event's id, entity, kind and what it changed. With --json, \
                each line is the stored event as the daemon holds it (NDJSON).

                --follow prints the log from --after on (every page), then each event as it is \
                appended or replicated, until evctl is stopped or the daemon closes the \
                connection. A follower that falls too far behind is cut off by the daemon; evctl \
                reconnects and resumes where it stopped.
                """,
            arguments: [
                .option("entity", value: "ENTITY", completion: .dynamic("entity"), help: "Only the events of ENTITY."),
                .option("origin", value: "NODE", help: "Only events made on the node with this id."),
                .option("after", value: "ID", help: "Start after the event ID."),
                .option("limit", value: "N", help: "At most N events per page (1-10000; the daemon's default is 100)."),
                .flag("all", help: "Read every page, not only the first."),
                .flag("follow", help: "Keep printing events as they arrive."),
            ])
    }

    var global: GlobalOptions
    var entity: String?
    var origin: String?
    var after: String?
    var limit: Int?
    var all: Bool
    var follow: Bool

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        entity = arguments["entity"]
        origin = arguments["origin"]
        after = arguments["after"]
        limit = try arguments.integer("limit", in: 1...10000)
        all = arguments.flag("all")
        follow = arguments.flag("follow")
    }

    func run() throws {
        let connection = try global.connect()
        let pages = Pages(connection: connection, method: "log", itemsMember: "events", all: all || follow)
        var output = StandardOutput()
        var last: String?
        let next = try pages.read(after: after) { cursor in
            var params = JSONObjectWriter()
            params.add("after", cursor)
            params.add("limit", limit ?? (all || follow ? 1000 : nil))
            params.add("entity", entity)
            params.add("origin", origin)
            return params
        } page: { reply in
            let raw = global.json ? pages.rawItems(reply) : []
            for (index, event) in pages.items(reply).enumerated() {
                last = event["id"] as? String ?? last
                if global.json { output.line(bytes: raw[index]) } else { output.line(EventText.line(event)) }
            }
        }
        output.flush()
        guard follow else {
            if !global.json { Pages.hintMore(next) }
            return
        }
        // Nothing printed and no --after: the log was empty, so replaying from the start is
        // cheap and catches what was appended since (with --origin, which watch cannot filter,
        // only new events).
        let start = last ?? after ?? (origin == nil ? "00000000000000000000000000" : nil)
        try Follower(global: global, entity: entity, origin: origin).follow(connection, after: start)
    }
}

/// Prints events as the daemon's `watch` notifications bring them.
struct Follower {
    var global: GlobalOptions
    var entity: String?
    var origin: String?

    /// Watches from `after` (nil: only events appended from now on), forever; reconnects
    /// when the daemon cut the connection for falling behind.
    func follow(_ first: Connection, after start: String?) throws {
        var connection = first
        var after = start
        var output = StandardOutput()
        while true {
            var params = JSONObjectWriter()
            params.add("after", after)
            params.add("entity", entity)
            let id = try connection.send("watch", params)
            var reconnect = false
            while !reconnect {
                guard let message = try connection.receiveOrEnd() else {
                    var text = "the daemon at \(connection.path) closed the connection."
                    if let after {
                        var command = "evctl log --follow"
                        if let entity { command += " --entity \(entity)" }
                        if let origin { command += " --origin \(origin)" }
                        text += " To continue, run: \(command) --after \(after)"
                    }
                    throw CommandFailure(exitCode: ExitStatus.unavailable, text)
                }
                switch message {
                case .reply(let reply):
                    if let error = reply.error, reply.id == id || reply.id == nil {
                        throw CommandFailure(exitCode: error.exitStatus, error.description)
                    }
                case .notification("event", let params, let bytes):
                    guard let event = params["event"] as? [String: Any] else { continue }
                    after = event["id"] as? String ?? after
                    if let origin, event["origin"] as? String != origin { continue }
                    if global.json {
                        let raw = RawJSON.member("params", of: bytes).flatMap { RawJSON.member("event", of: $0) }
                        output.line(bytes: raw ?? Array(RawJSON.text(event).utf8), immediately: true)
                    } else {
                        output.line(EventText.line(event), immediately: true)
                    }
                case .notification("watch.overflow", let params, _):
                    after = params["resume_after"] as? String ?? after
                    Terminal.note(
                        "the daemon ended the watch: evctl fell too far behind; "
                            + "reconnecting and resuming after \(after ?? "the newest event").")
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
