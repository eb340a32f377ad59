import Arguments

/// `evctl status`: what is saved locally, what each peer still lacks, what needs attention.
struct Status: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "status",
            abstract: "Show the store's state: saved locally, pending per peer, needs attention.",
            discussion: """
                The first line sums it up; then the node, the store's size and digest (equal \
                digests mean equal projections), clock skew seen from other nodes, what needs \
                attention, and the peers.
                """)
    }

    var global: GlobalOptions

    init(_ arguments: ParsedArguments) {
        global = GlobalOptions(arguments)
    }

    func run() throws {
        let reply = try global.connect().call("status")
        var output = StandardOutput()
        if global.json {
            output.line(bytes: reply.resultBytes)
        } else {
            for line in Status.lines(reply.result as? [String: Any] ?? [:]) { output.line(line) }
        }
        output.flush()
    }

    /// The text for people; `now` is when relative times ("2 min ago") are counted from.
    static func lines(_ status: [String: Any], now: WallTime = WallTime()) -> [String] {
        let events = status["events"] as? Int ?? 0
        let entities = status["entities"] as? Int ?? 0
        let peers = status["peers"] as? [[String: Any]] ?? []
        let attention = status["needs_attention"] as? [String: Any] ?? [:]
        let conflicts = attention["conflicts"] as? Int ?? 0
        let deadLetters = attention["dead_letters"] as? Int ?? 0
        let failingPeers = attention["failing_peers"] as? Int ?? 0

        var attentionWords: [String] = []
        if conflicts > 0 { attentionWords.append(Format.count(conflicts, "entity", "entities") + " in conflict") }
        if deadLetters > 0 { attentionWords.append(Format.count(deadLetters, "dead letter")) }
        let divergent = attention["divergent"] as? Int ?? 0
        if divergent > 0 { attentionWords.append(Format.count(divergent, "divergent event")) }
        let violations = attention["rule_violations"] as? Int ?? 0
        if violations > 0 { attentionWords.append(Format.count(violations, "rule violation")) }
        let rejectedProposals = attention["rejected_proposals"] as? Int ?? 0
        if rejectedProposals > 0 { attentionWords.append(Format.count(rejectedProposals, "rejected proposal")) }
        // Failing and terminal peers count under needs attention; name them.
        let failingNames = peers.filter { ["failing", "terminal"].contains($0["state"] as? String) }
            .compactMap { $0["name"] as? String }
        let failingText =
            Format.count(failingPeers, "failing peer")
            + (failingNames.isEmpty ? "" : " (\(failingNames.joined(separator: ", ")))")
        if failingPeers > 0 { attentionWords.append(failingText) }
        let attentionText = attentionWords.isEmpty ? "nothing" : attentionWords.joined(separator: ", ")
        let problems = (status["health"] as? [String: Any])?["problems"] as? [[String: Any]] ?? []

        let pendingText: String
        if peers.isEmpty {
            pendingText = "no peers"
        } else {
            pendingText =
                peers.map { peer in
                    let name = peer["name"] as? String ?? "?"
                    let blobs = peer["blobs_pending"] as? Int ?? 0
                    return "\(pendingCount(peer)) pending for \(name)"
                        + (blobs > 0 ? ", \(Format.count(blobs, "blob")) pending for \(name)" : "")
                }.joined(separator: ", ")
        }
        let blobs = status["blobs"] as? [String: Any]
        let blobsPendingHere = blobs?["pending"] as? Int ?? 0
        let blobsText = blobsPendingHere > 0 ? "; \(Format.count(blobsPendingHere, "blob")) not here yet" : ""
        var lines = [
            "saved locally: \(Format.count(events, "event")) in \(Format.count(entities, "entity", "entities"))\(blobsText); "
                + "\(pendingText); needs attention: \(attentionText)"
        ]
        if !problems.isEmpty {
            let names = problems.compactMap { $0["problem"] as? String }.joined(separator: ", ")
            lines.append("storage writes failing (\(names)): see the daemon's log; the watchdog is not answered")
        }

        let node = status["node"] as? [String: Any] ?? [:]
        var nodeText = node["id"] as? String ?? "?"
        if let name = node["name"] as? String, !name.isEmpty { nodeText += " (\(name))" }
        var rows: [[String]] = [
            ["node:", nodeText],
            ["events:", String(events)],
            ["entities:", String(entities)],
            ["size:", Format.bytes(status["bytes"] as? Int ?? 0)],
            [
                "blobs:",
                "\(blobs?["count"] as? Int ?? 0) (\(Format.bytes(blobs?["bytes"] as? Int ?? 0)))"
                    + (blobsPendingHere > 0 ? ", \(blobsPendingHere) named by events here and not here yet" : ""),
            ],
            ["digest:", status["digest"] as? String ?? "-"],
        ]
        let clock = status["clock"] as? [String: Any] ?? [:]
        let skewed = clock["skewed_origins"] as? [String: Any] ?? [:]
        // max_skew_ms is the skew the node accepts; the origins listed are further off,
        // ahead (positive) or behind (negative).
        let allowed = Format.milliseconds(clock["max_skew_ms"] as? Int ?? 0)
        if skewed.isEmpty {
            rows.append(["clock skew:", "none beyond the \(allowed) allowed"])
        } else {
            let count = Format.count(skewed.count, "node")
            rows.append(["clock skew:", "\(count) off this clock by more than the \(allowed) allowed:"])
            for origin in skewed.keys.sorted() {
                let skew = skewed[origin] as? Int ?? 0
                let side = skew < 0 ? "behind" : "ahead"
                rows.append(["", "  \(origin): \(Format.milliseconds(Int(skew.magnitude))) \(side)"])
            }
        }
        var attentionRows: [String] = []
        if conflicts > 0 {
            attentionRows.append(Format.count(conflicts, "entity", "entities") + " in conflict (evctl conflicts)")
        }
        if deadLetters > 0 { attentionRows.append(Format.count(deadLetters, "dead letter") + " (evctl dead-letters)") }
        if failingPeers > 0 { attentionRows.append(failingText + " (see peers below)") }
        if attentionRows.isEmpty { attentionRows = ["nothing"] }
        for (index, row) in attentionRows.enumerated() { rows.append([index == 0 ? "needs attention:" : "", row]) }
        if peers.isEmpty { rows.append(["peers:", "no peers (add one with `evctl peers add NAME URL`)"]) }
        for (index, problem) in problems.enumerated() {
            let since = problem["since"] as? String ?? "?"
            let failures = Format.count(problem["failures"] as? Int ?? 0, "failure")
            rows.append([
                index == 0 ? "storage:" : "",
                "\(problem["problem"] as? String ?? "?"): \(problem["message"] as? String ?? "") (\(failures) since \(since))",
            ])
        }
        lines += Format.table(rows)

        if !peers.isEmpty {
            lines.append("peers:")
            lines += Format.table(peers.map { ["  " + (($0["name"] as? String) ?? "?"), peerText($0, now: now)] })
        }
        let consumers = status["consumers"] as? [[String: Any]] ?? []
        if !consumers.isEmpty {
            lines.append("consumers:")
            lines += Format.table(
                consumers.map { consumer in
                    let lag = consumer["lag"] as? Int ?? 0
                    let seq = consumer["seq"] as? Int ?? 0
                    return [
                        "  " + (consumer["name"] as? String ?? "?"),
                        "at seq \(seq), \(Format.count(lag, "event")) behind",
                    ]
                })
        }
        return lines
    }

    /// A peer's `pending`, or `unknown` where the daemon could not count it (null).
    static func pendingCount(_ peer: [String: Any]) -> String {
        (peer["pending"] as? Int).map(String.init) ?? "unknown"
    }

    /// `ok, last sync 2 min ago, 0 pending`, or
    /// `retrying (3 failures, next in 14 s), last sync 2 h ago, 5 pending; timeout: ...`.
    static func peerText(_ peer: [String: Any], now: WallTime) -> String {
        let state = peer["state"] as? String ?? "?"
        var words: [String] = []
        if state == "ok" {
            words.append(state)
        } else {
            var next = "next attempt now"
            if let at = (peer["next_attempt"] as? String).flatMap(Format.date), at > now {
                next = "next in " + Format.span(at.timeIntervalSince(now))
            }
            words.append("\(state) (\(Format.count(peer["failures"] as? Int ?? 0, "failure")), \(next))")
        }
        if let last = (peer["last_success"] as? String).flatMap(Format.date) {
            let ago = now.timeIntervalSince(last)
            words.append(ago < 1 ? "last sync just now" : "last sync \(Format.span(ago)) ago")
        } else {
            words.append("never synced")
        }
        words.append("\(pendingCount(peer)) pending")
        var text = words.joined(separator: ", ")
        if let error = peer["last_error"] as? [String: Any] {
            text += "; \(error["reason"] as? String ?? "error"): \(error["message"] as? String ?? "no message")"
        }
        return text
    }
}
