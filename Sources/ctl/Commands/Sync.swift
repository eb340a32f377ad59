import Arguments

/// `evctl sync [PEER...]`: sync with peers now, and say what each session did.
struct Sync: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "sync",
            abstract: "Sync with peers now: exchange the events each side lacks.",
            discussion: """
                With no PEER, syncs with every configured peer at once (at most \
                max_outgoing_sessions sessions at a time, so one silent peer holds back no other). A PEER is \
                a peer's name (see `evctl peers list`) or a URL, which syncs with that node once \
                without adding it as a peer. The daemon runs the sessions; evctl prints one line \
                per peer: events sent and received, bytes out and in, and how long it took, or \
                why it failed.

                  evctl sync
                  evctl sync field-2
                  evctl sync unix:///run/evstore-b/evstored.sock

                Exits 0 when every sync succeeded, 1 when one failed (what the failed session \
                committed before the failure is kept; the next sync resumes from there), 2 when \
                a PEER names no peer.
                """,
            arguments: [
                .positional(
                    "PEER", optional: true, repeating: true, completion: .dynamic("peer"),
                    help: "A peer's name or a peer URL.")
            ],
            sections: [HelpSection("peer URLs", PeerURLForms.helpText)])
    }

    var global: GlobalOptions
    var peers: [String]

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
        peers = arguments.values("PEER")
    }

    func validate() throws {
        for peer in peers where PeerURLForms.isURL(peer) { try PeerURLForms.check(url: peer) }
    }

    func run() throws {
        let connection = try global.connect()
        var results: [[String: Any]] = []
        var rawResults: [[UInt8]] = []
        var unknown: [String] = []
        // No PEER: one call for every peer; else one call per PEER, in order.
        for peer in peers.isEmpty ? [nil] : peers.map(Optional.some) {
            var params = JSONObjectWriter()
            params.add("peer", peer)
            let reply = try connection.exchange("sync", params)
            if let error = reply.error {
                if let usage = error.usageError { throw usage }
                guard error.reason == "not_found", let peer else {
                    throw CommandFailure(exitCode: error.exitStatus, error.description)
                }
                Terminal.note(error.message)
                unknown.append(peer)
                continue
            }
            results += (reply.result as? [String: Any])?["peers"] as? [[String: Any]] ?? []
            rawResults += RawJSON.member("peers", of: reply.resultBytes).flatMap(RawJSON.elements(of:)) ?? []
        }

        var output = StandardOutput()
        if global.json {
            var object = JSONObjectWriter()
            object.add("peers", json: RawJSON.array(rawResults))
            output.line(bytes: object.bytes)
        } else if results.isEmpty, peers.isEmpty {
            output.line("no peers to sync with; add one with `evctl peers add NAME URL`")
        } else {
            for line in Format.table(results.map(Sync.row)) { output.line(line) }
        }
        output.flush()

        if !unknown.isEmpty { throw CommandFailure(exitCode: ExitStatus.notFound, nil) }
        if results.contains(where: { Sync.failure($0) != nil }) {
            throw CommandFailure(exitCode: ExitStatus.failed, nil)
        }
    }

    /// The error of a session, when it failed.
    static func failure(_ result: [String: Any]) -> [String: Any]? {
        result["error"] as? [String: Any]
    }

    /// `field-2  sent 120, received 40, 15 KiB out, 4.1 KiB in, 84 ms`, or
    /// `field-2  failed (timeout): the peer sent nothing for 30 s (sync_timeout_s)`.
    static func row(_ result: [String: Any]) -> [String] {
        let name = result["name"] as? String ?? result["url"] as? String ?? "?"
        let sent = result["sent"] as? Int ?? 0
        let received = result["received"] as? Int ?? 0
        if let error = failure(result) {
            let reason = error["reason"] as? String ?? "error"
            var text = "failed (\(reason)): \(error["message"] as? String ?? "no message")"
            // Batches committed before the failure are kept: say so.
            if sent > 0 || received > 0 { text += "; sent \(sent), received \(received) before that" }
            return [name, text]
        }
        var words = [
            "sent \(sent)", "received \(received)",
            Format.bytes(result["bytes_sent"] as? Int ?? 0) + " out",
            Format.bytes(result["bytes_received"] as? Int ?? 0) + " in",
            Format.milliseconds(result["duration_ms"] as? Int ?? 0),
        ]
        let blobs = result["blobs"] as? [String: Any] ?? [:]
        let blobsIn = blobs["received"] as? Int ?? 0
        let blobsOut = blobs["sent"] as? Int ?? 0
        if blobsIn + blobsOut > 0 { words.append("blobs sent \(blobsOut), received \(blobsIn)") }
        let deadLetters = result["dead_letters"] as? Int ?? 0
        if deadLetters > 0 { words.append(Format.count(deadLetters, "dead letter") + " (evctl dead-letters)") }
        let reconciled = result["reconciled"] as? Int ?? 0
        if reconciled > 0 { words.append("\(reconciled) found by reconciliation") }
        let divergent = result["divergent"] as? Int ?? 0
        if divergent > 0 {
            words.append(Format.count(divergent, "event") + " held with other content there (evctl attention)")
        }
        return [name, words.joined(separator: ", ")]
    }
}
