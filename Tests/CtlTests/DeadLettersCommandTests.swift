import Foundation
import Projections
import Testing

/// `evctl dead-letters retry|drop`, against real daemons, with their exit statuses.
@Suite(.enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct DeadLettersCommandTests {
    @Test("retry of a dead letter still invalid exits 1 and keeps it; an unknown id exits 2; drop --all empties the list")
    func retryAndDrop() throws {
        let (a, b) = try SyncCommandTests.daemonPair()
        defer {
            a.remove()
            b.remove()
        }
        let bNode = try #require(
            (try evctl(["--json", "status"], socket: b.socketPath).json()["node"] as? [String: Any])?["id"] as? String)
        // Two events under b's own origin 2 hours ahead of its clock (beyond the default
        // max_clock_skew_s of 1 hour), held by a: b dead-letters them.
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        let ids = (1...2).map { ULID(timestamp: now + 7_200_000, random: (UInt16($0), UInt64($0))) }
        let lines = ids.enumerated().map { index, id in
            #"{"entity":"job/ahead-\#(index)","id":"\#(id)","kind":"status","origin":"\#(bNode)","status":"x"}"#
        }
        let imported = try evctl(["import", "-"], socket: a.socketPath, stdin: lines.joined(separator: "\n") + "\n")
        #expect(imported.status == 0, "\(imported)")
        let synced = try evctl(["sync", "unix://\(b.socketPath)"], socket: a.socketPath)
        #expect(synced.status == 0, "\(synced)")
        func onB(_ arguments: String...) throws -> EvctlResult { try evctl(arguments, socket: b.socketPath) }
        #expect(try onB("dead-letters").lines.count == 3)

        var result = try onB("dead-letters", "retry", ids[0].description)
        #expect(result.status == 1, "\(result)")
        #expect(result.stdout.contains("stored 0 events; 1 still failing"), "\(result)")
        #expect(result.stdout.contains("foreign_own_origin"), "\(result)")
        result = try onB("--json", "dead-letters", "retry", ULID(timestamp: 1_600_000_000_000, random: (9, 9)).description)
        #expect(result.status == 2, "\(result)")
        #expect((try result.json()["still_invalid"] as? [[String: Any]])?.first?["reason"] as? String == "not_found")
        for usage in [["dead-letters", "retry"], ["dead-letters", "erase", "x"], ["dead-letters", "drop", "--all", "x"]] {
            #expect(try evctl(usage, socket: b.socketPath).status == 64, "\(usage)")
        }

        result = try onB("dead-letters", "drop", "--all")
        #expect(result.status == 0 && result.stdout == "dropped 2 dead letters\n", "\(result)")
        #expect(try onB("dead-letters").stdout == "no dead letters\n")
        result = try onB("dead-letters", "drop", ids[1].description)
        #expect(result.status == 2, "\(result)")
    }
}
