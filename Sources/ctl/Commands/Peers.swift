import Arguments

/// `evctl peers add NAME URL | remove NAME | list`: the nodes this daemon syncs with.
struct Peers: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "peers",
            abstract: "Add, remove or list the peers this daemon syncs with.",
            discussion: """
                The daemon syncs with each peer in the background (every sync_interval_s, with \
                backoff after failures) and on `evctl sync`. Peers added here are kept in the \
                store; peers in the config file are listed too, and are changed there.

                  evctl peers add hq ssh://evstore@hq.example.net
                  evctl peers add field-2 unix:///run/evstore-2/evstored.sock
                  evctl peers list
                  evctl peers remove field-2
                """,
            subcommands: [PeersAdd.self, PeersRemove.self, PeersList.self],
            sections: [HelpSection("peer URLs", PeerURLForms.helpText)])
    }

    init(_ arguments: ParsedArguments) {}

    /// Calls a `peers.*` method; invalid params are a usage error, other errors exit with
    /// their reason's status.
    static func call(_ method: String, _ params: JSONObjectWriter, global: GlobalOptions) throws -> Reply {
        let reply = try global.connect().exchange(method, params)
        if let error = reply.error {
            if let usage = error.usageError { throw usage }
            throw CommandFailure(exitCode: error.exitStatus, error.description)
        }
        return reply
    }
}

struct PeersAdd: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "add",
            abstract: "Add a peer; the daemon syncs with it right away and then in the background.",
            discussion: """
                Adding a peer that exists with the same URL changes nothing. A name that is \
                taken by another URL is a conflict (exit 3): remove the peer first.
                """,
            arguments: [
                .positional("NAME", help: "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit."),
                .positional("URL", help: "Where the peer is reached (see below)."),
            ],
            sections: [HelpSection("peer URLs", PeerURLForms.helpText)])
    }

    var global: GlobalOptions
    var name: String
    var url: String

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        name = arguments["NAME"] ?? ""
        url = arguments["URL"] ?? ""
    }

    func validate() throws {
        try PeerURLForms.check(url: url)
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("name", name)
        params.add("url", url)
        let reply = try Peers.call("peers.add", params, global: global)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            output.line("peer \(name): \(url); `evctl sync \(name)` syncs now, `evctl status` shows how it goes")
        }
        output.flush()
    }
}

struct PeersRemove: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "remove",
            abstract: "Remove a peer added with `evctl peers add`; its events stay in the store.",
            discussion: """
                Peers from the config file cannot be removed here (exit 77): remove them from \
                the file and reload the daemon (SIGHUP).
                """,
            arguments: [.positional("NAME", completion: .dynamic("peer"), help: "The peer's name.")])
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
        let reply = try Peers.call("peers.remove", params, global: global)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            output.line("removed peer \(name)")
        }
        output.flush()
    }
}

struct PeersList: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "list",
            abstract: "List the peers: name, URL, and whether the config file or `peers add` made them.")
    }

    var global: GlobalOptions

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
    }

    func run() throws {
        let reply = try Peers.call("peers.list", JSONObjectWriter(), global: global)
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            let peers = (reply.result as? [String: Any])?["peers"] as? [[String: Any]] ?? []
            if peers.isEmpty {
                output.line("no peers; add one with `evctl peers add NAME URL`")
            } else {
                let rows = peers.map { peer in
                    [peer["name"] as? String ?? "?", peer["url"] as? String ?? "?", peer["source"] as? String ?? "?"]
                }
                for line in Format.table([["NAME", "URL", "SOURCE"]] + rows) { output.line(line) }
            }
        }
        output.flush()
    }
}
