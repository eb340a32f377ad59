import Arguments

/// `evctl peers add NAME URL | remove NAME | list | show NAME`: the nodes this daemon syncs with.
struct Peers: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "peers",
            abstract: "Add, remove, list or show the peers this daemon syncs with.",
            discussion: """
                The daemon syncs with each peer in the background (every sync_interval_s, with \
                backoff after failures) and on `evctl sync`. Peers added here are kept in the \
                store; peers in the config file are listed too, and are changed there.

                  evctl peers add hq ssh://evstore@hq.example.net
                  evctl peers add field-2 unix:///run/evstore-2/evstored.sock
                  evctl peers list
                  evctl peers show hq
                  evctl peers remove field-2
                """,
            subcommands: [PeersAdd.self, PeersRemove.self, PeersList.self, PeersShow.self],
            sections: [HelpSection("peer URLs", PeerURLForms.helpText)])
    }

    init(_ arguments: ParsedArguments) {}
}

struct PeersAdd: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "add",
            abstract: "Add a peer; the daemon syncs with it right away and then in the background.",
            discussion: """
                Adding a peer that exists with the same URL changes nothing. A name that is \
                taken by another URL is a conflict (exit 3): remove the peer first. Adding it \
                again with the same URL and another --blobs changes its policy.
                """,
            arguments: [
                .positional("NAME", help: "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit."),
                .positional("URL", help: "Where the peer is reached (see below)."),
                .option(
                    "blobs", value: "POLICY", completion: .words(["eager", "lazy", "none"]),
                    help:
                        "Which of its blobs to fetch: eager (every one its events name; the default), lazy (only those `evctl blob get` asks for) or none."
                ),
            ],
            sections: [HelpSection("peer URLs", PeerURLForms.helpText)])
    }

    var global: GlobalOptions
    var name: String
    var url: String
    var blobs: String?

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        name = arguments["NAME"] ?? ""
        url = arguments["URL"] ?? ""
        blobs = arguments["blobs"]
    }

    func validate() throws {
        try PeerURLForms.check(url: url)
        if let blobs, !["eager", "lazy", "none"].contains(blobs) {
            throw UsageError("--blobs takes eager, lazy or none, not \(blobs)")
        }
    }

    func run() throws {
        var params = JSONObjectWriter()
        params.add("name", name)
        params.add("url", url)
        params.add("blobs", blobs)
        try global.printResult(of: "peers.add", params) { _ in
            ["peer \(name): \(url); `evctl sync \(name)` syncs now, `evctl status` shows how it goes"]
        }
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
        try global.printResult(of: "peers.remove", params) { _ in ["removed peer \(name)"] }
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
        try global.printResult(of: "peers.list") { result in
            let peers = result["peers"] as? [[String: Any]] ?? []
            guard !peers.isEmpty else { return ["no peers; add one with `evctl peers add NAME URL`"] }
            let rows = peers.map { peer in
                [
                    peer["name"] as? String ?? "?", peer["url"] as? String ?? "?", peer["source"] as? String ?? "?",
                    peer["blobs"] as? String ?? "eager",
                ]
            }
            return Format.table([["NAME", "URL", "SOURCE", "BLOBS"]] + rows)
        }
    }
}

struct PeersShow: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "show",
            abstract: "Show one peer: its URL, node id, last sync, its last known version vector and what it lacks.",
            discussion: """
                The version vector is what the peer held at its last session with this node: \
                per origin (the node that made the events), the greatest event id. Per origin \
                this node holds events of, the count the peer lacks by that vector; \
                `evctl list --pending-for NAME` lists the entities they belong to.
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
        try global.printResult(of: "peers.show", params, text: PeersShow.lines)
    }

    static func lines(_ peer: [String: Any]) -> [String] {
        var state = peer["state"] as? String ?? "?"
        if state != "ok" { state += " (\(Format.count(peer["failures"] as? Int ?? 0, "failure")))" }
        var rows: [[String]] = [
            ["peer:", peer["name"] as? String ?? "?"],
            ["url:", peer["url"] as? String ?? "?"],
            ["node:", peer["node"] as? String ?? "unknown (never synced)"],
            ["state:", state],
            ["last success:", peer["last_success"] as? String ?? "never"],
        ]
        if let since = peer["since"] as? String { rows.append(["failing since:", since]) }
        if let error = peer["last_error"] as? [String: Any] {
            let message = error["message"] as? String ?? "no message"
            rows.append(["last error:", "\(error["reason"] as? String ?? "error"): \(message)"])
        }
        rows.append([
            "pending:", (peer["pending"] as? Int).map { Format.count($0, "event") + " it lacks" } ?? "unknown",
        ])
        if let dead = peer["dead_lettered"] as? Int, dead > 0 {
            rows.append(["dead letters:", Format.count(dead, "event") + " it refused"])
        }
        var lines = Format.table(rows)
        let vector = peer["vector"] as? [String: Any] ?? [:]
        if vector.isEmpty {
            lines.append("vector: empty (it holds nothing known to this node)")
        } else {
            lines.append("vector:")
            lines += Format.table(vector.keys.sorted().map { ["  \($0)", vector[$0] as? String ?? "?"] })
        }
        let origins = peer["origins"] as? [[String: Any]] ?? []
        if !origins.isEmpty {
            lines.append("lacks, per origin held here:")
            let rows = origins.map { origin in
                [
                    "  " + (origin["origin"] as? String ?? "?"),
                    "\(origin["lacking"] as? Int ?? 0) of \(origin["held"] as? Int ?? 0)",
                ]
            }
            lines += Format.table([["  ORIGIN", "LACKS"]] + rows)
        }
        return lines
    }
}
