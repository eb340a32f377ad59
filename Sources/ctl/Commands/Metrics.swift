import Arguments

/// `evctl metrics [--textfile PATH]`: the daemon's state in the Prometheus text format,
/// from one `status` call.
struct Metrics: Command {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            name: "metrics",
            abstract: "Print the daemon's state as Prometheus metrics (text format 0.0.4).",
            discussion: """
                The metrics come from one `status` call: the store's size, appends, what needs \
                attention, each peer's state and clock skew. When the daemon cannot be reached \
                (or refuses), the output is `evstore_up 0` and evctl exits as other commands do \
                (69, 77), so a collector shows the node as down rather than stale. --json does \
                not change the output.

                With --textfile, the text goes to PATH instead of standard output, written \
                atomically (a temporary file in the same directory, synced, then renamed; mode \
                0644), for node_exporter's textfile collector; `evstore_up 0` is written there \
                too. The evstore-metrics.timer unit runs this every minute.

                  evctl metrics
                  evctl metrics --textfile /var/lib/prometheus/node-exporter/evstore.prom
                """,
            arguments: [
                .option(
                    "textfile", value: "PATH", completion: .files,
                    help: "Write the metrics to PATH (atomically, mode 0644) instead of standard output.")
            ])
    }

    var global: GlobalOptions
    var textfile: String?

    init(_ arguments: ParsedArguments) throws {
        global = GlobalOptions(arguments)
        textfile = arguments["textfile"]
        if textfile?.isEmpty == true { throw UsageError("--textfile takes a file path") }
    }

    func run() throws {
        var text: String
        var failure: CommandFailure?
        do throws(CommandFailure) {
            let reply = try global.connect().call("status")
            text = Metrics.exposition(reply.result as? [String: Any] ?? [:], now: WallTime())
        } catch {
            failure = error
            text = Metrics.down()
        }
        if let textfile {
            try TextFile.replace(textfile, with: Array(text.utf8))
        } else {
            StandardOutput.write(Array(text.utf8))
        }
        if let failure { throw failure }
    }

    static let upHelp = "Whether evctl reached the daemon and read its status (1), or not (0)."

    /// What a collector gets when the daemon does not answer.
    static func down() -> String {
        var out = Exposition()
        out.family("evstore_up", .gauge, upHelp, [([], .int(0))])
        return out.text
    }

    /// The metrics of a `status` result; `now` is what ages are counted from.
    static func exposition(_ status: [String: Any], now: WallTime) -> String {
        var out = Exposition()
        func gauge(_ name: String, _ help: String, _ value: Exposition.Value?) {
            guard let value else { return }
            out.family(name, .gauge, help, [([], value)])
        }
        func counter(_ name: String, _ help: String, _ value: Exposition.Value?) {
            guard let value else { return }
            out.family(name, .counter, help, [([], value)])
        }
        func int(_ object: [String: Any], _ key: String) -> Exposition.Value? {
            (object[key] as? Int).map { .int($0) }
        }
        func seconds(milliseconds value: Any?) -> Exposition.Value? {
            RawJSON.double(value).map { .double($0 / 1000) }
        }

        out.family("evstore_up", .gauge, upHelp, [([], .int(1))])
        let node = status["node"] as? [String: Any] ?? [:]
        out.family(
            "evstore_node_info", .gauge, "This node: its id, its name (empty when unset) and the daemon's version.",
            [
                (
                    [
                        ("node_id", node["id"] as? String ?? ""), ("node_name", node["name"] as? String ?? ""),
                        ("version", status["version"] as? String ?? ""),
                    ], .int(1)
                )
            ])
        gauge(
            "evstore_start_time_seconds", "When the daemon started, in seconds since the Unix epoch.",
            seconds(milliseconds: status["started_at"]))
        gauge("evstore_uptime_seconds", "Seconds since the daemon started.", int(status, "uptime_s"))

        gauge("evstore_stored_events", "Events held in the store.", int(status, "events"))
        gauge("evstore_entities", "Entities held in the store, deleted ones included.", int(status, "entities"))
        gauge("evstore_store_bytes", "Bytes the store's data uses.", int(status, "bytes"))
        gauge("evstore_map_bytes", "The size of the store's memory map, in bytes.", int(status, "map_bytes"))
        let cache = status["block_cache"] as? [String: Any] ?? [:]
        gauge(
            "evstore_block_cache_bytes", "Bytes of decompressed event blocks kept for reads.", int(cache, "bytes"))
        counter(
            "evstore_block_cache_hits_total", "Reads of an event block found decompressed, since the daemon started.",
            int(cache, "hits"))
        counter(
            "evstore_block_cache_misses_total",
            "Reads of an event block that decompressed it, since the daemon started.",
            int(cache, "misses"))

        let appends = status["appends"] as? [String: Any] ?? [:]
        counter(
            "evstore_appended_events_total", "Events appended by this node's clients since the daemon started.",
            int(appends, "events_total"))
        counter(
            "evstore_append_requests_total", "Append requests that succeeded since the daemon started.",
            int(appends, "requests_total"))
        counter(
            "evstore_received_events_total", "Events received from peers and stored since the daemon started.",
            int(appends, "received_total"))
        gauge(
            "evstore_appended_events_per_second",
            "Events appended by this node's clients per second over the last minute.",
            RawJSON.double(appends["per_second"]).map { .double($0) })

        let attention = status["needs_attention"] as? [String: Any] ?? [:]
        gauge(
            "evstore_conflicted_entities", "Entities with conflicting concurrent changes.", int(attention, "conflicts"))
        gauge(
            "evstore_dead_letters", "Events received from peers that failed validation.", int(attention, "dead_letters")
        )
        gauge(
            "evstore_divergent_events", "Events a peer holds with other content under the same id.",
            int(attention, "divergent"))
        gauge("evstore_failing_peers", "Peers in state failing or terminal.", int(attention, "failing_peers"))
        if let health = status["health"] as? [String: Any] {
            let problems = health["problems"] as? [[String: Any]] ?? []
            gauge(
                "evstore_storage_problems", "Kinds of storage write failing with no client to tell (status health).",
                .int(problems.count))
        }

        if let blobs = status["blobs"] as? [String: Any] {
            gauge("evstore_blobs", "Blobs held (attachments: photos, signatures, documents).", int(blobs, "count"))
            gauge("evstore_blob_bytes", "Bytes the blobs held take.", int(blobs, "bytes"))
            gauge(
                "evstore_blobs_pending", "Blobs events here name whose bytes have not come yet.", int(blobs, "pending"))
            gauge(
                "evstore_blob_partial_bytes",
                "Bytes kept of blobs partly received, for the next session to go on from.",
                int(blobs, "partial_bytes"))
            gauge("evstore_blob_uploads", "Blob uploads under way from clients.", int(blobs, "uploads"))
        }

        let peers = status["peers"] as? [[String: Any]] ?? []
        gauge("evstore_peers", "Replication peers configured.", .int(peers.count))
        var pending: [Exposition.Sample] = []
        var blobsPending: [Exposition.Sample] = []
        var lastSuccess: [Exposition.Sample] = []
        var sinceSuccess: [Exposition.Sample] = []
        var failures: [Exposition.Sample] = []
        var states: [Exposition.Sample] = []
        for peer in peers {
            let name = peer["name"] as? String ?? ""
            let label = [("peer", name)]
            if let value = int(peer, "pending") { pending.append((label, value)) }
            if let value = int(peer, "blobs_pending") { blobsPending.append((label, value)) }
            if let time = (peer["last_success"] as? String).flatMap(Format.date) {
                lastSuccess.append((label, .double(time.timeIntervalSince1970)))
                sinceSuccess.append((label, .double(max(0, now.timeIntervalSince(time)))))
            }
            if let value = int(peer, "failures") { failures.append((label, value)) }
            let state = peer["state"] as? String
            for candidate in peerStates {
                states.append(([("peer", name), ("state", candidate)], .int(state == candidate ? 1 : 0)))
            }
        }
        out.family(
            "evstore_peer_pending_events", .gauge, "Local events the peer lacks by its last known version vector.",
            pending)
        out.family(
            "evstore_peer_pending_blobs", .gauge,
            "Blobs held here that the peer asked for at its last session and does not hold; absent before a session that moved blobs.",
            blobsPending)
        out.family(
            "evstore_peer_last_success_timestamp_seconds", .gauge,
            "When the last successful sync session with the peer ended, in seconds since the Unix epoch; "
                + "absent while it never succeeded.", lastSuccess)
        out.family(
            "evstore_peer_seconds_since_last_success", .gauge,
            "Seconds since the last successful sync session with the peer; absent while it never succeeded.",
            sinceSuccess)
        out.family(
            "evstore_peer_consecutive_failures", .gauge, "Failed sync sessions with the peer in a row.", failures)
        out.family(
            "evstore_peer_state", .gauge,
            "The peer's sync state: 1 for the state it is in (ok, retrying, failing, terminal), 0 for the others.",
            states)

        gauge(
            "evstore_head_seq", "The commit sequence's head: the seq of the last event this node stored.",
            int(status, "seq"))
        let consumers = status["consumers"] as? [[String: Any]] ?? []
        var lags: [Exposition.Sample] = []
        var acknowledged: [Exposition.Sample] = []
        for consumer in consumers {
            let label = [("consumer", consumer["name"] as? String ?? "")]
            if let value = int(consumer, "lag") { lags.append((label, value)) }
            if let value = int(consumer, "seq") { acknowledged.append((label, value)) }
        }
        out.family(
            "evstore_consumer_lag_events", .gauge,
            "Events this node stored after the last one the durable consumer acknowledged (head - acknowledged seq).",
            lags)
        out.family(
            "evstore_consumer_acknowledged_seq", .gauge, "The last seq the durable consumer acknowledged.",
            acknowledged)

        let clock = status["clock"] as? [String: Any] ?? [:]
        gauge(
            "evstore_max_clock_skew_seconds",
            "How far another node's clock may be off this one's before it is reported (max_clock_skew_s).",
            seconds(milliseconds: clock["max_skew_ms"]))
        let skewed = clock["skewed_origins"] as? [String: Any] ?? [:]
        out.family(
            "evstore_clock_skew_seconds", .gauge,
            "Origins whose clock is off this node's by more than the allowed skew, in seconds (negative: behind).",
            skewed.keys.sorted().compactMap { origin in
                seconds(milliseconds: skewed[origin]).map { ([("origin", origin)], $0) }
            })
        let offsets = clock["offsets"] as? [String: Any] ?? [:]
        out.family(
            "evstore_clock_offset_seconds", .gauge,
            "How far a peer node's wall clock was from this one's at their last sync session since the daemon "
                + "started, in seconds (negative: behind).",
            offsets.keys.sorted().compactMap { node in
                seconds(milliseconds: offsets[node]).map { ([("node_id", node)], $0) }
            })
        return out.text
    }

    /// The states of `status`'s peers, each a sample of `evstore_peer_state`.
    static let peerStates = ["ok", "retrying", "failing", "terminal"]
}

/// Text in the Prometheus exposition format, version 0.0.4: per metric family a `# HELP`
/// line, a `# TYPE` line, then its samples.
struct Exposition {
    enum Kind: String {
        case gauge
        case counter
    }

    enum Value {
        case int(Int)
        case double(Double)

        /// As the format writes a float: Go's `ParseFloat` reads it; `NaN`, `+Inf`, `-Inf`.
        var text: String {
            switch self {
            case .int(let value): return String(value)
            case .double(let value):
                if value.isNaN { return "NaN" }
                if value.isInfinite { return value < 0 ? "-Inf" : "+Inf" }
                if value == value.rounded(), value.magnitude < 1e15 { return String(Int(value)) }
                return value.description
            }
        }
    }

    typealias Sample = (labels: [(name: String, value: String)], value: Value)

    private(set) var text = ""

    /// Adds a family; one with no samples is left out.
    mutating func family(_ name: String, _ kind: Kind, _ help: String, _ samples: [Sample]) {
        guard !samples.isEmpty else { return }
        text += "# HELP \(name) \(Exposition.escapeHelp(help))\n"
        text += "# TYPE \(name) \(kind.rawValue)\n"
        for sample in samples {
            text += name
            if !sample.labels.isEmpty {
                text += "{"
                text += sample.labels.map { "\($0.name)=\"\(Exposition.escapeLabel($0.value))\"" }
                    .joined(separator: ",")
                text += "}"
            }
            text += " \(sample.value.text)\n"
        }
    }

    /// In HELP text, a backslash and a line feed are escaped.
    static func escapeHelp(_ text: String) -> String {
        text.replacing("\\", with: "\\\\").replacing("\n", with: "\\n")
    }

    /// In a label value, a backslash, a double quote and a line feed are escaped.
    static func escapeLabel(_ text: String) -> String {
        escapeHelp(text).replacing("\"", with: "\\\"")
    }
}
