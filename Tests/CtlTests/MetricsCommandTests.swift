import Foundation
import TestSupport
import Testing

/// `evctl types` and `evctl metrics` against real daemons.
@Suite(.enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct MetricsCommandTests {
    /// The samples whose value moves with time alone: left out when two runs are compared.
    static let volatile: Set<String> = [
        "evstore_uptime_seconds", "evstore_appended_events_per_second", "evstore_peer_seconds_since_last_success",
    ]

    static func status(_ socket: String) throws -> [String: Any] {
        let result = try evctl(["--json", "status"], socket: socket)
        guard result.status == 0 else { throw TestFailure("status failed: \(result)") }
        return try result.json()
    }

    static func metrics(_ socket: String) throws -> (text: String, parsed: PrometheusText) {
        let result = try evctl(["metrics"], socket: socket)
        guard result.status == 0, result.stderr.isEmpty else { throw TestFailure("metrics failed: \(result)") }
        return (result.stdout, try PrometheusText(result.stdout))
    }

    /// The reader the tests hold evctl's output to refuses what it should.
    @Test(arguments: [
        "a 1\n",  // no TYPE
        "# TYPE a gauge\na 1",  // no final line feed
        "# TYPE a gauge\na 1\n# HELP a late\n",  // HELP after the samples
        "# TYPE a gauge\n# TYPE a gauge\na 1\n",  // TYPE twice
        "# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na 2\n",  // a's samples apart
        "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n",  // a series twice
        "# TYPE a gauge\na{x=\"\\t\"} 1\n",  // an escape the format has not
        "# TYPE a gauge\na{x=\"1\"y=\"2\"} 1\n",  // no comma
        "# TYPE a gauge\na{1x=\"1\"} 1\n",  // a bad label name
        "# TYPE a gauge\na one\n",  // not a float
        "# TYPE a number\na 1\n",  // no such type
    ])
    func theReaderIsStrict(_ text: String) {
        #expect(throws: PrometheusText.ParseError.self) { try PrometheusText(text) }
    }

    @Test func theReaderReadsTheFormat() throws {
        let text = #"""
            # A comment.
            # HELP a Help with a \\ and a \n.
            # TYPE a gauge
            a{x="q\"\\\n",y="2"} -1.5e3
            a NaN 1700000000000
            # TYPE b_total counter
            b_total +Inf

            """#
        let parsed = try PrometheusText(text)
        #expect(parsed.helps["a"] == "Help with a \\ and a \n.")
        #expect(parsed.value("a", ["x": "q\"\\\n", "y": "2"]) == -1500)
        #expect(parsed.value("a")?.isNaN == true && parsed.value("b_total") == .infinity)
        #expect(parsed.types == ["a": "gauge", "b_total": "counter"])
    }

    @Test func typesPrintsOneTypePerLine() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        var result = try evctl(["types"], socket: daemon.socketPath)
        #expect(result.status == 0 && result.stdout.isEmpty && result.stderr.isEmpty, "\(result)")
        for entity in ["job/1", "job/2/3", "job2/a", "job-x/b/c", "site/north/depot", "zone/1"] {
            #expect(try evctl(["append", entity, "status", "new"], socket: daemon.socketPath).status == 0)
        }
        #expect(try evctl(["append", "zone/1", "delete"], socket: daemon.socketPath).status == 0)
        result = try evctl(["types"], socket: daemon.socketPath)
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout == "job\njob-x\njob2\nsite\nzone\n")
        result = try evctl(["--json", "types"], socket: daemon.socketPath)
        #expect(result.stdout == #"{"types":["job","job-x","job2","site","zone"],"rules":{}}"# + "\n")
    }

    @Test func metricsParseAndEqualStatus() throws {
        // A node name that needs escaping in a label value.
        let name = #"van "7" \ south"#
        let daemon = try RunningDaemon(arguments: ["--node", name])
        defer { daemon.remove() }
        for entity in ["job/1", "job/2", "site/1"] {
            #expect(try evctl(["append", entity, "status", "new"], socket: daemon.socketPath).status == 0)
        }
        #expect(try evctl(["append", "job/1", "set", "a=1", "b=2"], socket: daemon.socketPath).status == 0)
        #expect(try evctl(["consumers", "add", "bridge", "--seq", "1"], socket: daemon.socketPath).status == 0)
        try Data("a photo of the meter".utf8).write(to: URL(fileURLWithPath: daemon.directory + "/photo.jpg"))
        #expect(try evctl(["blob", "put", daemon.directory + "/photo.jpg"], socket: daemon.socketPath).status == 0)

        let before = try MetricsCommandTests.status(daemon.socketPath)
        let (text, metrics) = try MetricsCommandTests.metrics(daemon.socketPath)
        let after = try MetricsCommandTests.status(daemon.socketPath)

        #expect(text.contains(#"node_name="van \"7\" \\ south""#), "\(text)")
        // Every family has a HELP and a TYPE; counters end in _total.
        #expect(Set(metrics.helps.keys) == Set(metrics.types.keys))
        for (family, type) in metrics.types {
            #expect(family.hasPrefix("evstore_"))
            #expect((type == "counter") == family.hasSuffix("_total"), "\(family) is a \(type)")
            #expect(type == "counter" || type == "gauge")
        }
        #expect(metrics.value("evstore_up") == 1)
        let node = try #require(before["node"] as? [String: Any])
        let info = try #require(metrics.samples("evstore_node_info").first)
        #expect(metrics.samples("evstore_node_info").count == 1 && info.value == 1)
        let version = try #require(before["version"] as? String)
        #expect(info.labels == ["node_id": node["id"] as? String ?? "?", "node_name": name, "version": version])

        func number(_ object: [String: Any]?, _ key: String) -> Double? { (object?[key] as? NSNumber)?.doubleValue }
        let appends = before["appends"] as? [String: Any]
        let attention = before["needs_attention"] as? [String: Any]
        let clock = before["clock"] as? [String: Any]
        let blobs = before["blobs"] as? [String: Any]
        let cache = before["block_cache"] as? [String: Any]
        let equal: [(String, Double?)] = [
            ("evstore_blobs", number(blobs, "count")),
            ("evstore_blob_bytes", number(blobs, "bytes")),
            ("evstore_blobs_pending", number(blobs, "pending")),
            ("evstore_stored_events", number(before, "events")),
            ("evstore_entities", number(before, "entities")),
            ("evstore_store_bytes", number(before, "bytes")),
            ("evstore_map_bytes", number(before, "map_bytes")),
            ("evstore_block_cache_bytes", number(cache, "bytes")),
            ("evstore_block_cache_hits_total", number(cache, "hits")),
            ("evstore_block_cache_misses_total", number(cache, "misses")),
            ("evstore_appended_events_total", number(appends, "events_total")),
            ("evstore_append_requests_total", number(appends, "requests_total")),
            ("evstore_received_events_total", number(appends, "received_total")),
            ("evstore_conflicted_entities", number(attention, "conflicts")),
            ("evstore_dead_letters", number(attention, "dead_letters")),
            ("evstore_divergent_events", number(attention, "divergent")),
            ("evstore_failing_peers", number(attention, "failing_peers")),
            ("evstore_peers", 0),
            ("evstore_max_clock_skew_seconds", number(clock, "max_skew_ms").map { $0 / 1000 }),
            ("evstore_start_time_seconds", number(before, "started_at").map { $0 / 1000 }),
        ]
        for (metric, expected) in equal {
            #expect(expected != nil && metrics.value(metric) == expected, "\(metric)")
        }
        #expect(metrics.value("evstore_stored_events") == 4 && metrics.value("evstore_appended_events_total") == 4)
        #expect(metrics.value("evstore_blobs") == 1 && metrics.value("evstore_blob_bytes") == 20)
        // A durable consumer's lag and place, and the head they are counted from.
        #expect(metrics.value("evstore_head_seq") == 4)
        #expect(metrics.value("evstore_consumer_lag_events", ["consumer": "bridge"]) == 3)
        #expect(metrics.value("evstore_consumer_acknowledged_seq", ["consumer": "bridge"]) == 1)
        // Between the two status calls.
        let uptime = try #require(metrics.value("evstore_uptime_seconds"))
        #expect(number(before, "uptime_s")! <= uptime && uptime <= number(after, "uptime_s")!)
        // Without appends the rate only falls; status rounds it to 0.001.
        let rate = try #require(metrics.value("evstore_appended_events_per_second"))
        let rateBefore = try #require(number(before["appends"] as? [String: Any], "per_second"))
        let rateAfter = try #require(number(after["appends"] as? [String: Any], "per_second"))
        #expect(
            rate > 0 && rateAfter <= rate + 0.001 && rate <= rateBefore + 0.001, "\(rateBefore) \(rate) \(rateAfter)")
        // No peers: no per-peer families, and no skewed clocks.
        #expect(!metrics.types.keys.contains { $0.hasPrefix("evstore_peer_") })
        #expect(metrics.samples("evstore_clock_skew_seconds").isEmpty)
        // --json changes nothing.
        let json = try evctl(["--json", "metrics"], socket: daemon.socketPath)
        #expect(json.status == 0)
        #expect(try PrometheusText(json.stdout).types == metrics.types)
    }

    @Test func perPeerMetrics() throws {
        // No background session after the first, and no retry within the test.
        let settings = ["--sync-interval-s", "3600", "--backoff-base-s", "3600", "--backoff-cap-s", "3600"]
        let a = try RunningDaemon(arguments: ["--node", "a"] + settings)
        defer { a.remove() }
        let b = try RunningDaemon(arguments: ["--node", "b"] + settings)
        defer { b.remove() }
        #expect(try evctl(["append", "job/1", "status", "new"], socket: a.socketPath).status == 0)
        #expect(try evctl(["append", "site/1", "status", "up"], socket: b.socketPath).status == 0)
        #expect(try evctl(["peers", "add", "b", "unix://\(b.socketPath)"], socket: a.socketPath).status == 0)
        #expect(
            try evctl(["peers", "add", "gone", "unix://\(a.directory)/nobody.sock"], socket: a.socketPath).status == 0)
        // Each new peer gets one session at once: b's succeeds, gone's fails.
        let deadline = Date().addingTimeInterval(20)
        var peers: [[String: Any]] = []
        while Date() < deadline {
            peers = try MetricsCommandTests.status(a.socketPath)["peers"] as? [[String: Any]] ?? []
            let b = peers.first { $0["name"] as? String == "b" }
            let gone = peers.first { $0["name"] as? String == "gone" }
            if b?["last_success"] is String, (gone?["failures"] as? Int ?? 0) >= 1 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        for number in 2...3 {
            #expect(try evctl(["append", "job/\(number)", "status", "new"], socket: a.socketPath).status == 0)
        }

        let status = try MetricsCommandTests.status(a.socketPath)
        let (_, metrics) = try MetricsCommandTests.metrics(a.socketPath)
        peers = status["peers"] as? [[String: Any]] ?? []
        let peerB = try #require(peers.first { $0["name"] as? String == "b" })
        let gone = try #require(peers.first { $0["name"] as? String == "gone" })
        #expect(peerB["pending"] as? Int == 2 && peerB["state"] as? String == "ok", "\(peerB)")
        #expect(gone["state"] as? String == "retrying" && gone["last_success"] is NSNull, "\(gone)")

        #expect(metrics.value("evstore_peers") == 2)
        #expect(metrics.value("evstore_received_events_total") == 1)
        #expect(metrics.value("evstore_peer_pending_events", ["peer": "b"]) == 2)
        #expect(metrics.value("evstore_peer_pending_events", ["peer": "gone"]) == Double(gone["pending"] as? Int ?? -1))
        #expect(metrics.value("evstore_peer_consecutive_failures", ["peer": "b"]) == 0)
        let failures = Double(gone["failures"] as? Int ?? 0)
        #expect(failures >= 1 && metrics.value("evstore_peer_consecutive_failures", ["peer": "gone"]) == failures)
        for state in ["ok", "retrying", "failing", "terminal"] {
            #expect(metrics.value("evstore_peer_state", ["peer": "b", "state": state]) == (state == "ok" ? 1 : 0))
            #expect(
                metrics.value("evstore_peer_state", ["peer": "gone", "state": state]) == (state == "retrying" ? 1 : 0))
        }
        #expect(metrics.samples("evstore_peer_state").count == 8)
        // The last success: a time, and an age; neither for a peer that never succeeded.
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let success = try #require(formatter.date(from: peerB["last_success"] as? String ?? ""))
        let timestamp = try #require(metrics.value("evstore_peer_last_success_timestamp_seconds", ["peer": "b"]))
        #expect(abs(timestamp - success.timeIntervalSince1970) < 0.001)
        let age = try #require(metrics.value("evstore_peer_seconds_since_last_success", ["peer": "b"]))
        #expect(age >= 0 && age < 60)
        #expect(metrics.samples("evstore_peer_last_success_timestamp_seconds").count == 1)
        #expect(metrics.samples("evstore_peer_seconds_since_last_success").count == 1)
        #expect(metrics.value("evstore_failing_peers") == 0)
        // The clock offset measured in the session with b, by b's node id.
        let offsets = (status["clock"] as? [String: Any])?["offsets"] as? [String: Any] ?? [:]
        #expect(offsets.count == 1)
        for (node, offset) in offsets {
            let expected = ((offset as? NSNumber)?.doubleValue ?? .nan) / 1000
            #expect(metrics.value("evstore_clock_offset_seconds", ["node_id": node]) == expected)
        }
    }

    @Test func anUnreachableDaemonIsUpZero() throws {
        let directory = try makeTemporaryDirectory("evctl-down")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let socket = directory + "/evstored.sock"
        let down =
            "# HELP evstore_up Whether evctl reached the daemon and read its status (1), or not (0).\n"
            + "# TYPE evstore_up gauge\nevstore_up 0\n"
        var result = try evctl(["metrics"], socket: socket)
        #expect(result.status == 69, "\(result)")
        #expect(result.stdout == down)
        #expect(result.stderr.hasPrefix("evctl: no evstore daemon is listening on \(socket)."))
        #expect(try PrometheusText(result.stdout).value("evstore_up") == 0)

        let file = directory + "/evstore.prom"
        result = try evctl(["metrics", "--textfile", file], socket: socket)
        #expect(result.status == 69 && result.stdout.isEmpty, "\(result)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == down)
    }

    @Test func textfileIsReplacedAtomicallyWithMode0644() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        #expect(try evctl(["append", "job/1", "status", "new"], socket: daemon.socketPath).status == 0)
        let directory = try makeTemporaryDirectory("evctl-textfile")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/evstore.prom"
        try "old content\n".write(toFile: file, atomically: false, encoding: .utf8)

        // Under a umask that would leave the file unreadable to node_exporter.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = [
            "-c", #"umask 077; exec "$0" --socket "$1" metrics --textfile "$2" > "$3/out" 2>&1"#,
            try builtBinary("evctl").path, daemon.socketPath, file, directory,
        ]
        process.environment = cleanEnvironment()
        try process.run()
        process.waitUntilExit()
        let output = try String(contentsOfFile: directory + "/out", encoding: .utf8)
        #expect(process.terminationStatus == 0 && output.isEmpty, "\(output)")
        try FileManager.default.removeItem(atPath: directory + "/out")

        let attributes = try FileManager.default.attributesOfItem(atPath: file)
        #expect((attributes[.posixPermissions] as? Int) == 0o644)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["evstore.prom"])
        let written = try String(contentsOfFile: file, encoding: .utf8)
        let parsed = try PrometheusText(written)
        #expect(parsed.value("evstore_up") == 1 && parsed.value("evstore_stored_events") == 1)

        // The same text as on standard output, but for what moves with time alone.
        let (printed, _) = try MetricsCommandTests.metrics(daemon.socketPath)
        func stable(_ text: String) -> [Substring] {
            text.split(separator: "\n").filter { line in
                !MetricsCommandTests.volatile.contains { line.hasPrefix($0 + " ") || line.hasPrefix($0 + "{") }
            }
        }
        #expect(stable(written) == stable(printed))
        #expect(stable(written).count < written.split(separator: "\n").count)

        // A directory that does not exist: exit 1, a message, nothing written.
        let result = try evctl(
            ["metrics", "--textfile", directory + "/missing/evstore.prom"], socket: daemon.socketPath)
        #expect(result.status == 1 && result.stdout.isEmpty, "\(result)")
        #expect(result.stderr.contains("cannot create a file in \(directory)/missing"), "\(result)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["evstore.prom"])
    }
}
