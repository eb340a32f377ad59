@testable import Daemon
import Foundation
import Projections
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// Outgoing sessions run side by side, so one silent peer holds no other back; and what a
/// node knows of its peers' syncs survives a restart.
@Suite("A fleet that never waits on one bad peer")
struct PeerFleetTests {
    func append(_ daemon: DaemonProcess, _ entity: String) throws {
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"\#(entity)","kind":"status","status":"new"}"#]))
    }

    func events(_ daemon: DaemonProcess) -> Int { (try? daemon.client().call("status")["events"] as? Int) ?? -1 }

    func peers(_ daemon: DaemonProcess) throws -> [String: [String: Any]] {
        let status = try daemon.client().call("status")
        return Dictionary(
            uniqueKeysWithValues: (status["peers"] as! [[String: Any]]).map { ($0["name"] as! String, $0) })
    }

    /// Lines of `path`, 0 when it does not exist yet.
    func lineCount(_ path: String) -> Int {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    /// How many sessions with `peer` the daemon logged as failed, and their durations (ms).
    func failedSessions(_ daemon: DaemonProcess, _ peer: String) -> [Int] {
        daemon.stderr.split(separator: "\n").compactMap { line -> Int? in
            guard let range = line.range(of: "sync with \(peer) failed after ") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
    }

    func wait(_ seconds: Double, until condition: () -> Bool) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return condition()
    }

    func temporaryRoot() throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evfleet-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        return root
    }

    @Test(
        "a peer that starts and says nothing holds no other back; its session ends within sync_timeout_s and a second; stop cuts every session"
    )
    func hungPeer() throws {
        let good = try DaemonProcess(arguments: ["--node", "good"])
        defer { good.removeFiles() }
        let root = try temporaryRoot()
        // Each of these says when its session starts, then is silent for an hour.
        func hung(_ name: String) -> String {
            #"{"name":"\#(name)","url":"exec:sh -c 'echo start >> \#(root)/\#(name).log; exec sleep 3600'"}"#
        }
        let timeout = 4
        let config = """
            {"peers":[\(hung("hung")),\(hung("hung2")),{"name":"good","url":"unix://\(good.socketPath)"}],
             "sync_interval_s":1,"sync_timeout_s":\(timeout),"backoff_base_s":1,"backoff_cap_s":1}
            """
        try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let node = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json", "--node", "a"])
        defer { node.removeFiles() }

        // While a hung session is in progress, an event appended reaches the good peer
        // (one session at a time, it would wait for the hung one to end first).
        #expect(wait(20) { lineCount(root + "/hung.log") >= 1 }, "the hung peer's session started")
        let endedBefore = failedSessions(node, "hung").count
        let appended = Date()
        try append(node, "job/1")
        #expect(wait(20) { events(good) == 1 }, "the event reached the good peer")
        let took = Date().timeIntervalSince(appended)
        #expect(took < 2 * 1 + 3, "within two sync intervals and a generous margin: \(took) s")
        #expect(
            failedSessions(node, "hung").count <= endedBefore + 1,
            "the good peer did not wait for the hung peer's sessions to end")

        // `sync` of the good peer answers while the hung peer's session runs.
        let starts = lineCount(root + "/hung.log")
        #expect(wait(20) { lineCount(root + "/hung.log") > starts }, "a new hung session started")
        let ended = failedSessions(node, "hung").count
        try append(node, "job/2")
        let answer = (try node.client().call("sync", #"{"peer":"good"}"#)["peers"] as! [[String: Any]])[0]
        #expect(answer["error"] is NSNull, "\(answer)")
        // The background session may have sent it first; either way the peer has it now.
        #expect(events(good) == 2)
        #expect(failedSessions(node, "hung").count == ended, "answered before the hung session ended")

        // The hung sessions end with `timeout` after sync_timeout_s, and within a second more.
        let hung = (try node.client().call("sync", #"{"peer":"hung"}"#)["peers"] as! [[String: Any]])[0]
        #expect((hung["error"] as? [String: Any])?["reason"] as? String == "timeout", "\(hung)")
        let milliseconds = hung["duration_ms"] as? Int ?? 0
        #expect(milliseconds >= timeout * 1000 - 100 && milliseconds <= (timeout + 1) * 1000, "\(milliseconds) ms")
        for logged in failedSessions(node, "hung") + failedSessions(node, "hung2") {
            #expect(logged <= (timeout + 1) * 1000, "a hung session took \(logged) ms")
        }

        // `sync` of every peer runs them side by side: two hung peers cost one timeout, not two.
        let started = Date()
        let all = try node.client().call("sync")["peers"] as! [[String: Any]]
        let wall = Date().timeIntervalSince(started)
        #expect(all.count == 3)
        #expect(wall < Double(2 * timeout) - 0.5, "the peers were synced concurrently: \(wall) s")
        let reasons = Dictionary(
            uniqueKeysWithValues: all.map {
                ($0["name"] as! String, ($0["error"] as? [String: Any])?["reason"] as? String ?? "none")
            })
        #expect(reasons == ["hung": "timeout", "hung2": "timeout", "good": "none"], "\(reasons)")

        // A stop cuts both hung sessions in progress at once.
        let before = (lineCount(root + "/hung.log"), lineCount(root + "/hung2.log"))
        #expect(wait(20) { lineCount(root + "/hung.log") > before.0 && lineCount(root + "/hung2.log") > before.1 })
        let stopping = Date()
        #expect(try node.stop() == 0)
        let stopped = Date().timeIntervalSince(stopping)
        #expect(stopped < Double(timeout) - 1, "the sessions were cut, not waited out: \(stopped) s")
        print(
            "hung peers: the event reached the good peer in \(String(format: "%.2f", took)) s; hung sessions \(failedSessions(node, "hung") + failedSessions(node, "hung2")) ms; sync of all \(String(format: "%.2f", wall)) s; stop \(String(format: "%.2f", stopped)) s"
        )
    }

    @Test("a unix:// peer whose listener accepts nothing and whose backlog is full times out within sync_timeout_s")
    func fullBacklog() throws {
        let root = try temporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        // Backlog 0 queues one connection; the next connect would wait for an accept.
        let listener = try UnixListener.bind(path: root + "/stuck.sock", mode: 0o666, backlog: 0)
        _ = listener
        let queued = try UnixConnection.connect(to: root + "/stuck.sock")
        defer { queued.close() }
        let node = try DaemonProcess(arguments: ["--sync-timeout-s", "2"])
        defer { node.removeFiles() }
        let answer =
            (try node.client().call("sync", #"{"peer":"unix://\#(root)/stuck.sock"}"#)["peers"]
            as! [[String: Any]])[0]
        let error = answer["error"] as? [String: Any]
        #expect(error?["reason"] as? String == "timeout", "\(answer)")
        let message = error?["message"] as? String ?? ""
        #expect(message.contains("accepted no connection") && message.contains("sync_timeout_s"), "\(answer)")
        #expect(answer["duration_ms"] as? Int ?? 0 <= 3000, "\(answer)")
    }

    @Test(
        "a failing and a terminal peer are still so after a restart, with their failures, last error and next attempt")
    func stateSurvivesRestart() throws {
        let root = try temporaryRoot()
        // `newer` speaks a protocol from the future (terminal, protocol_mismatch); `gone` has
        // no daemon (retrying). The backoff is long, so no attempt runs again after the restart.
        let config = """
            {"peers":[{"name":"newer","url":"exec:sh -c 'printf \\"EVSYNC/99\\\\n\\"; exec cat >/dev/null'"},
                      {"name":"gone","url":"unix://\(root)/nobody.sock"}],
             "backoff_base_s":600,"backoff_cap_s":3600}
            """
        try config.write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        var node = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json"])
        defer { node.removeFiles() }
        #expect(
            wait(20) {
                let peers = (try? self.peers(node)) ?? [:]
                return peers["newer"]?["state"] as? String == "terminal" && peers["gone"]?["failures"] as? Int == 1
            })
        let before = try peers(node)
        #expect(try node.stop() == 0)

        node = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json"])
        let after = try peers(node)
        for name in ["newer", "gone"] {
            let was = before[name]!
            let now = after[name]!
            #expect(now["state"] as? String == was["state"] as? String, "\(name): \(now)")
            #expect(now["failures"] as? Int == was["failures"] as? Int, "\(name): \(now)")
            #expect(now["next_attempt"] as? String == was["next_attempt"] as? String, "\(name): \(now)")
            let error = now["last_error"] as? [String: Any]
            let previous = was["last_error"] as? [String: Any]
            #expect(error?["reason"] as? String == previous?["reason"] as? String, "\(name): \(now)")
            #expect(error?["message"] as? String == previous?["message"] as? String, "\(name): \(now)")
        }
        #expect(after["newer"]?["state"] as? String == "terminal")
        #expect((after["newer"]?["last_error"] as? [String: Any])?["reason"] as? String == "protocol_mismatch")
        #expect(after["gone"]?["state"] as? String == "retrying")
        #expect((after["gone"]?["last_error"] as? [String: Any])?["reason"] as? String == "unreachable")
        let attention = try node.client().call("status")["needs_attention"] as? [String: Any]
        #expect(attention?["failing_peers"] as? Int == 1, "the terminal peer still needs attention")
        #expect(try node.stop() == 0)
    }

    @Test("a peer's state record round-trips its schedule; one of the previous release (no schedule) still loads")
    func stateRecord() throws {
        var schedule = PeerSchedule(nextAttempt: 1_800_000_000_000)
        for step in 0..<9 {
            schedule.failed(
                SyncError(.timeout, "the peer sent nothing for 30 s (sync_timeout_s)"),
                at: 1_799_999_000_000 + UInt64(step), base: 2, cap: 600, jitter: 0.5)
        }
        var known = SyncService.Known()
        let origin = ULID("01M8SDQBSADFFHKEPBKKS19DVP")!
        known.vector = [origin: ULID("01M8SDQBQT7TWTZ9D0VM7MPXG0")!]
        known.lastSuccess = 1_799_000_000_000
        schedule.lastSuccess = known.lastSuccess
        let bytes = try #require(PeerState(known: known, schedule: schedule, url: "unix:///run/hq.sock").encoded())
        let decoded = try #require(PeerState(decoding: bytes))
        #expect(decoded.schedule == schedule)
        #expect(decoded.url == "unix:///run/hq.sock", "the schedule is of that URL")
        #expect(decoded.schedule?.state == .failing)
        #expect(decoded.known.vector == known.vector && decoded.known.lastSuccess == known.lastSuccess)

        let old =
            #"{"last_success":1799000000000,"node":"01M8SDQBQT7TWTZ9D0VM7MPXG0","vector":{"01M8SDQBSADFFHKEPBKKS19DVP":"01M8SDQBQT7TWTZ9D0VM7MPXG0"}}"#
        let previous = try #require(PeerState(decoding: Array(old.utf8)))
        #expect(previous.schedule == nil)
        #expect(previous.known.vector == known.vector)
        #expect(previous.known.lastSuccess == 1_799_000_000_000)
        #expect(previous.known.node == ULID("01M8SDQBQT7TWTZ9D0VM7MPXG0"))
    }
}
