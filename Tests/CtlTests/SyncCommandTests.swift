import Foundation
import Testing

/// `evctl sync`, `evctl peers` and the peers in `evctl status`, between two real daemons.
@Suite(.enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct SyncCommandTests {
    /// Two daemons whose background syncs wait an hour, so every session after the first
    /// (which a new peer gets at once) is one the test started.
    static func daemonPair() throws -> (RunningDaemon, RunningDaemon) {
        let a = try RunningDaemon(arguments: ["--node", "a", "--sync-interval-s", "3600"])
        do {
            return (a, try RunningDaemon(arguments: ["--node", "b", "--sync-interval-s", "3600"]))
        } catch {
            a.remove()
            throw error
        }
    }

    static func peerStatus(_ socket: String) throws -> [[String: Any]] {
        try evctl(["--json", "status"], socket: socket).json()["peers"] as? [[String: Any]] ?? []
    }

    /// Waits until `condition` holds for the peers in `status`.
    static func waitForPeers(_ socket: String, _ condition: ([[String: Any]]) -> Bool) throws {
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            if condition(try peerStatus(socket)) { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw TestFailure("the peers did not get there within 20 s: \(try peerStatus(socket))")
    }

    @Test func addSyncAndRemoveAPeer() throws {
        let (a, b) = try SyncCommandTests.daemonPair()
        defer {
            a.remove()
            b.remove()
        }
        func onA(_ arguments: String...) throws -> EvctlResult { try evctl(arguments, socket: a.socketPath) }
        func onB(_ arguments: String...) throws -> EvctlResult { try evctl(arguments, socket: b.socketPath) }
        let bURL = "unix://\(b.socketPath)"

        var result = try onA("peers", "list")
        #expect(result.status == 0 && result.stdout == "no peers; add one with `evctl peers add NAME URL`\n")
        result = try onA("peers", "add", "b", bURL)
        #expect(result.status == 0, "\(result)")
        result = try onA("peers", "list")
        #expect(result.lines.count == 2, "\(result)")
        #expect(result.lines.first?.split(separator: " ") == ["NAME", "URL", "SOURCE", "BLOBS"])
        #expect(result.lines.last?.split(separator: " ") == ["b", Substring(bURL), "api", "eager"])
        let listed = try #require(try onA("--json", "peers", "list").json()["peers"] as? [[String: Any]])
        #expect(listed.map { $0["name"] as? String } == ["b"])
        #expect(listed.first?["url"] as? String == bURL && listed.first?["source"] as? String == "api")

        // A new peer is synced at once; let that session end before counting.
        try SyncCommandTests.waitForPeers(a.socketPath) { $0.first?["last_success"] is String }

        var onAEntities: [String] = []
        for number in 1...3 {
            onAEntities.append("job/a\(number)")
            #expect(try onA("append", "job/a\(number)", "status", "en_route").status == 0)
        }
        for number in 1...2 {
            #expect(try onB("append", "job/b\(number)", "set", "address=\(number) Main St").status == 0)
        }
        #expect(try SyncCommandTests.peerStatus(a.socketPath).first?["pending"] as? Int == 3)

        result = try onA("sync", "b")
        #expect(result.status == 0, "\(result)")
        #expect(result.lines.count == 1, "\(result)")
        #expect(result.stdout.hasPrefix("b  sent 3, received 2, "), "\(result)")
        #expect(result.stdout.contains(" out, ") && result.stdout.contains(" in, "), "\(result)")
        #expect(!result.stdout.contains("dead letter") && !result.stdout.contains("reconciliation"))

        let fromB = try onA("get", "job/b2")
        #expect(fromB.status == 0, "\(fromB)")
        #expect(fromB.stdout.contains("address: 2 Main St"), "\(fromB)")
        #expect(try onB("get", onAEntities[2]).stdout.contains("status:   en_route"))
        let digestA = try onA("--json", "status").json()["digest"] as? String
        let digestB = try onB("--json", "status").json()["digest"] as? String
        #expect(digestA != nil && digestA == digestB)

        // Nothing is left to send: a second sync moves no events.
        let again = try onA("--json", "sync", "b").json()
        let outcome = try #require((again["peers"] as? [[String: Any]])?.first)
        #expect(outcome["name"] as? String == "b" && outcome["url"] as? String == bURL)
        #expect(outcome["sent"] as? Int == 0 && outcome["received"] as? Int == 0)
        #expect(outcome["error"] is NSNull)

        let status = try onA("status")
        #expect(status.status == 0)
        #expect(status.stdout.contains("0 pending for b"), "\(status)")
        #expect(
            status.lines.contains { $0.hasPrefix("  b  ok, last sync ") && $0.hasSuffix(", 0 pending") }, "\(status)")

        result = try onA("sync", "nosuch")
        #expect(result.status == 2, "\(result)")
        #expect(result.stderr.contains("no peer is named nosuch"), "\(result)")

        result = try onA("sync", "unix:///nonexistent.sock")
        #expect(result.status == 1, "\(result)")
        #expect(result.stdout.hasPrefix("unix:///nonexistent.sock  failed (unreachable): "), "\(result)")

        result = try onA("peers", "add", "b", "unix:///elsewhere.sock")
        #expect(result.status == 3, "\(result)")
        result = try onA("peers", "add", "bad name", bURL)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("peer name \"bad name\" is not valid"), "\(result)")

        result = try onA("peers", "remove", "b")
        #expect(result.status == 0 && result.stdout == "removed peer b\n", "\(result)")
        #expect(try onA("peers", "list").stdout == "no peers; add one with `evctl peers add NAME URL`\n")
        #expect(try onA("peers", "remove", "b").status == 2)
        result = try onA("sync")
        #expect(
            result.status == 0 && result.stdout == "no peers to sync with; add one with `evctl peers add NAME URL`\n")
    }

    @Test func aPeerThatCannotBeReachedShowsInStatusAndFailsTheSync() throws {
        let daemon = try RunningDaemon(arguments: ["--sync-interval-s", "3600", "--backoff-base-s", "600"])
        defer { daemon.remove() }
        let url = "unix://\(daemon.directory)/nobody.sock"
        #expect(try evctl(["peers", "add", "hq", url], socket: daemon.socketPath).status == 0)
        try SyncCommandTests.waitForPeers(daemon.socketPath) { $0.first?["state"] as? String == "retrying" }

        let status = try evctl(["status"], socket: daemon.socketPath)
        let line = try #require(status.lines.first { $0.hasPrefix("  hq  ") }, "\(status)")
        #expect(line.hasPrefix("  hq  retrying (1 failure, next in "), "\(line)")
        #expect(line.contains("), never synced, 0 pending; unreachable: "), "\(line)")

        let result = try evctl(["sync", "hq"], socket: daemon.socketPath)
        #expect(result.status == 1, "\(result)")
        #expect(result.stdout.hasPrefix("hq  failed (unreachable): "), "\(result)")
        let json = try evctl(["--json", "sync"], socket: daemon.socketPath)
        #expect(json.status == 1)
        let error = try #require((try json.json()["peers"] as? [[String: Any]])?.first?["error"] as? [String: Any])
        #expect(error["reason"] as? String == "unreachable")
    }
}
