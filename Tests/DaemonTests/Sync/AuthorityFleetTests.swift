import Foundation
import TestSupport
import Testing

/// Ten vans offline from the authority make 2,000 status proposals on 100 jobs, many of
/// them stale, and pass them among themselves, so the authority gets some through two
/// peers; then the authority returns.
@Suite("A fleet's proposals and the authority's return")
struct AuthorityFleetTests {
    static let rules = #"""
        {"job": {"status": {"initial": ["assigned"],
                            "transitions": {"assigned": ["en_route", "cancelled"], "en_route": ["on_site"]}},
                 "authority": "hq"}}
        """#

    /// Every event of `daemon`'s log, in seq order.
    func log(_ daemon: DaemonProcess) throws -> [[String: Any]] {
        var events: [[String: Any]] = []
        var after = 0
        while true {
            let page = try daemon.client().call("log", #"{"after":\#(after),"limit":10000}"#)
            events += page["events"] as? [[String: Any]] ?? []
            guard let next = page["next"] as? Int else { return events }
            after = next
        }
    }

    /// One session; its duration in ms, as the daemon measured it.
    @discardableResult
    func sync(_ from: DaemonProcess, _ to: DaemonProcess) throws -> Int {
        let result = try from.client().call("sync", #"{"peer":"unix://\#(to.socketPath)"}"#)
        let session = (result["peers"] as? [[String: Any]])?.first
        #expect(session?["error"] is NSNull, "\(result)")
        return session?["duration_ms"] as? Int ?? -1
    }

    @Test(
        "every proposal gets exactly one decision, none blocks another, all eleven converge, and each van lists its rejected proposals",
        .timeLimit(.minutes(30)))
    func fleet() throws {
        let (root, file) = try TypesFileTests.directory(rules: AuthorityFleetTests.rules)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let hq = try DaemonProcess(root: root + "/hq", arguments: ["--node", "hq", "--types-file", file])
        let vans = try (0..<10).map { index in
            try DaemonProcess(root: root + "/van-\(index)", arguments: ["--node", "van-\(index)", "--types-file", file])
        }
        defer { for daemon in [hq] + vans { daemon.removeFiles() } }
        let jobs = (0..<100).map { "job/\($0)" }
        _ = try hq.client().call(
            "append",
            eventsParams(jobs.map { #"{"entity":"\#($0)","kind":"status","status":"assigned"}"# }))
        for van in vans { try sync(van, hq) }

        // Offline from HQ: 200 proposals each, in batches, on random jobs.
        var rng = SeededGenerator(seed: 25)
        for van in vans {
            for _ in 0..<4 {
                let batch = (0..<50).map { _ in
                    let job = jobs.randomElement(using: &rng)!
                    let status = ["en_route", "cancelled"].randomElement(using: &rng)!
                    return #"{"entity":"\#(job)","kind":"status","status":"\#(status)"}"#
                }
                _ = try van.client().call("append", eventsParams(batch))
            }
        }
        // The vans pass them on to their neighbours: HQ will get many through two peers.
        for index in vans.indices { try sync(vans[index], vans[(index + 1) % vans.count]) }

        // HQ returns: it syncs with every van, then once more, so its decisions reach all.
        let returned = Date()
        var sessions: [Int] = []
        for van in vans { sessions.append(try sync(hq, van)) }
        for van in vans { sessions.append(try sync(hq, van)) }
        let elapsed = Date().timeIntervalSince(returned)

        let digests = try ([hq] + vans).map { try $0.client().call("status")["digest"] as? String }
        #expect(digests[0] != nil && Set(digests).count == 1, "all eleven converge")
        let events = try log(hq)
        let proposals = events.filter { $0["proposal"] as? Bool == true }
        let decisions = events.filter { $0["kind"] as? String == "decide" }
        #expect(proposals.count == 2000)
        let decided = decisions.compactMap { $0["event"] as? String }
        #expect(decided.count == proposals.count && Set(decided) == Set(proposals.compactMap { $0["id"] as? String }))
        let accepted = decisions.filter { $0["accept"] as? Bool == true }.count
        // On each job the first proposal HQ decides is made from its current status and
        // legal; every later one was made from that same status, which is stale by then.
        #expect(accepted == Set(proposals.compactMap { $0["entity"] as? String }).count, "\(accepted) accepted")

        // Each van lists its rejected proposals not superseded by a newer one of its own: for
        // each job, its latest proposal when that one was rejected.
        let rejectedIDs = Set(decisions.filter { $0["accept"] as? Bool == false }.compactMap { $0["event"] as? String })
        for van in vans {
            let node = (try van.client().call("status")["node"] as? [String: Any])?["id"] as? String
            var latest: [String: String] = [:]
            for proposal in proposals where proposal["origin"] as? String == node {
                let entity = proposal["entity"] as! String
                let id = proposal["id"] as! String
                if latest[entity].map({ $0 < id }) ?? true { latest[entity] = id }
            }
            let expected = Set(latest.values.filter { rejectedIDs.contains($0) })
            let listed = try van.client().call("attention")["rejected_proposals"] as? [[String: Any]] ?? []
            #expect(Set(listed.compactMap { $0["id"] as? String }) == expected)
            #expect(listed.allSatisfy { !(($0["reason"] as? String) ?? "").isEmpty })
        }
        print(
            "authority fleet: HQ's return to the last decision on the last van took \(Int(elapsed * 1000)) ms"
                + " (sessions \(sessions) ms); \(accepted) of 2000 proposals accepted")
    }
}
