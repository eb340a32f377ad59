import Foundation
import TestSupport
import Testing
import UnixSocket

/// Replication between real daemons over their sockets.
@Suite("Replication between daemons")
struct ReplicationTests {
    /// Loads input-form lines into a daemon, batch by batch.
    func load(_ daemon: DaemonProcess, _ lines: [String]) throws {
        let client = try daemon.client()
        var start = 0
        while start < lines.count {
            let end = min(start + 500, lines.count)
            // One event per request would be slow; a batch fails whole on an append to a
            // deleted entity, so retry such a batch one event at a time.
            let response = try client.request("append", eventsParams(Array(lines[start..<end])))
            if response["error"] != nil {
                for line in lines[start..<end] { _ = try client.request("append", eventsParams([line])) }
            }
            start = end
        }
    }

    func sync(_ daemon: DaemonProcess, _ peer: String) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(peer)"}"#)
        return (result["peers"] as! [[String: Any]])[0]
    }

    func status(_ daemon: DaemonProcess) throws -> [String: Any] {
        try daemon.client().call("status")
    }

    /// Every entity's `get` answer, by entity.
    func states(_ daemon: DaemonProcess) throws -> [String: String] {
        let client = try daemon.client()
        var out: [String: String] = [:]
        var after: String?
        repeat {
            let params =
                after.map { #"{"include_deleted":true,"limit":1000,"after":"\#($0)"}"# }
                ?? #"{"include_deleted":true,"limit":1000}"#
            let page = try client.call("list", params)
            for entity in page["entities"] as! [[String: Any]] {
                let name = entity["entity"] as! String
                try client.send(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"\#(name)"}}"#)
                out[name] = (try client.readLine()).map(withoutRev)
            }
            after = page["next"] as? String
        } while after != nil
        return out
    }

    func assertConverged(_ daemons: [DaemonProcess]) throws {
        let reference = try status(daemons[0])
        let referenceStates = try states(daemons[0])
        for daemon in daemons.dropFirst() {
            let other = try status(daemon)
            #expect(other["events"] as? Int == reference["events"] as? Int)
            #expect(other["digest"] as? String == reference["digest"] as? String)
            #expect(try states(daemon) == referenceStates)
        }
    }

    /// The field workload's replicas when its generator is at hand, else the built-in one.
    func workloads(replicas: Int, events: Int, seed: Int) throws -> [[String]] {
        if let script = workloadScript() {
            let prefix = FileManager.default.temporaryDirectory.appendingPathComponent(
                "fo-\(UUID().uuidString.prefix(6))"
            ).path
            let (status, output) = try runProgram(
                "/usr/bin/env",
                [
                    "python3", script, "--events", "\(events)", "--seed", "\(seed)", "--replicas", "\(replicas)",
                    "--overlap", "0.3", "--out-prefix", prefix,
                ])
            if status == 0 {
                return try (0..<replicas).map { index in
                    let path = "\(prefix).\(index).ndjson"
                    defer { try? FileManager.default.removeItem(atPath: path) }
                    return try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map(String.init)
                }
            }
            Issue.record("fieldops.py failed: \(output)")
        }
        return replicaWorkloads(replicas: replicas, eventsEach: events, seed: UInt64(seed))
    }

    @Test(
        "daemons loaded with the field workload's replicas and synced in random pairs converge; conflicts show everywhere and resolving clears them everywhere",
        .timeLimit(.minutes(30)), arguments: [(3, 1), (4, 2), (5, 3)] as [(Int, Int)])
    func convergence(replicas: Int, seed: Int) throws {
        var rng = SeededGenerator(seed: UInt64(seed))
        let daemons = try (0..<replicas).map { index in try DaemonProcess(arguments: ["--node", "n\(index)"]) }
        defer { for daemon in daemons { daemon.removeFiles() } }
        let work = try workloads(replicas: replicas, events: 1500, seed: seed)
        for (daemon, lines) in zip(daemons, work) { try load(daemon, lines) }
        var quiet = false
        var passes = 0
        while !quiet {
            quiet = true
            passes += 1
            for i in (0..<replicas).shuffled(using: &rng) {
                var j = Int.random(in: 0..<replicas, using: &rng)
                if j == i { j = (j + 1) % replicas }
                let result = try sync(daemons[i], "unix://\(daemons[j].socketPath)")
                #expect(result["error"] is NSNull)
                if (result["sent"] as! Int) + (result["received"] as! Int) > 0 { quiet = false }
            }
            #expect(passes < 20)
            if passes >= 20 { break }
        }
        try assertConverged(daemons)

        let conflicts = (try status(daemons[0])["needs_attention"] as! [String: Any])["conflicts"] as! Int
        #expect(conflicts > 0)
        for daemon in daemons.dropFirst() {
            #expect((try status(daemon)["needs_attention"] as! [String: Any])["conflicts"] as? Int == conflicts)
        }
        // Resolve every conflict on one node with `evctl resolve`: its events name every head.
        let evctl = try builtBinary("evctl").path
        let client = try daemons[1].client()
        var pending: [[String: Any]] = []
        var after: String?
        repeat {
            let page = try client.call(
                "conflicts", after.map { #"{"limit":1000,"after":"\#($0)"}"# } ?? #"{"limit":1000}"#)
            pending += page["entities"] as! [[String: Any]]
            after = page["next"] as? String
        } while after != nil
        for entry in pending {
            let entity = entry["entity"] as! String
            var arguments = ["--socket", daemons[1].socketPath, "resolve", entity]
            arguments += (entry["fields"] as! [String]).map { "\($0)=resolved" }
            if entry["status"] as! Bool { arguments += ["--status", "done"] }
            var (code, output) = try runProgram(evctl, arguments)
            if code != 0 {
                // A deleted entity takes a restore first.
                _ = try client.call("append", eventsParams([#"{"entity":"\#(entity)","kind":"restore"}"#]))
                (code, output) = try runProgram(evctl, arguments)
            }
            #expect(code == 0, "\(output)")
        }
        #expect((try status(daemons[1])["needs_attention"] as! [String: Any])["conflicts"] as? Int == 0)
        for daemon in daemons where daemon !== daemons[1] {
            _ = try sync(daemon, "unix://\(daemons[1].socketPath)")
        }
        for daemon in daemons {
            #expect((try status(daemon)["needs_attention"] as! [String: Any])["conflicts"] as? Int == 0)
        }
        try assertConverged(daemons)
    }

    @Test(
        "OR-set: a concurrent add survives a remove of the element it did not see; a delete wins over a concurrent edit"
    )
    func setsAndDeletes() throws {
        let a = try DaemonProcess()
        let b = try DaemonProcess()
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let ca = try a.client()
        let cb = try b.client()
        _ = try ca.call("append", eventsParams([#"{"entity":"job/1","kind":"add","set":"parts","element":"valve-3"}"#]))
        _ = try ca.call(
            "append", eventsParams([#"{"entity":"job/2","kind":"edit","fields":{"address":"12 Main St"}}"#]))
        _ = try sync(a, "unix://\(b.socketPath)")
        // Offline: b removes the valve it saw; a adds it again (a new add b has not seen).
        _ = try cb.call(
            "append", eventsParams([#"{"entity":"job/1","kind":"remove","set":"parts","element":"valve-3"}"#]))
        _ = try ca.call("append", eventsParams([#"{"entity":"job/1","kind":"add","set":"parts","element":"valve-3"}"#]))
        // Offline: a deletes job/2 while b edits it.
        _ = try ca.call("append", eventsParams([#"{"entity":"job/2","kind":"delete"}"#]))
        _ = try cb.call("append", eventsParams([#"{"entity":"job/2","kind":"edit","fields":{"phone":"+15550100"}}"#]))
        _ = try sync(b, "unix://\(a.socketPath)")
        for client in [ca, cb] {
            let job1 = try client.call("get", #"{"entity":"job/1"}"#)
            #expect((job1["sets"] as? [String: [String]])?["parts"] == ["valve-3"])
            let job2 = try client.call("get", #"{"entity":"job/2"}"#)
            #expect(job2["deleted"] as? Bool == true)
            #expect((job2["fields"] as? [String: String])?["phone"] == "+15550100")  // folded, not resurrecting
        }
        // A restore on either side brings the entity back everywhere.
        _ = try cb.call("append", eventsParams([#"{"entity":"job/2","kind":"restore"}"#]))
        _ = try sync(b, "unix://\(a.socketPath)")
        #expect(try ca.call("get", #"{"entity":"job/2"}"#)["deleted"] as? Bool == false)
        try assertConverged([a, b])
    }

    @Test(
        "kill -9 of either side in the middle of a session, then a full sync: nothing twice, converged",
        .timeLimit(.minutes(30)))
    func killMidSession() throws {
        let source = try DaemonProcess(arguments: ["--node", "source"])
        defer { source.removeFiles() }
        try load(source, try workloads(replicas: 2, events: 30_000, seed: 9)[0])
        let total = try status(source)["events"] as! Int

        for killResponder in [true, false] {
            var target = try DaemonProcess(arguments: ["--node", "target"])
            defer { target.removeFiles() }
            // The responder is the side that was connected to: the target when the source
            // starts the session, the source's peer when the target pulls.
            let initiator = killResponder ? source : target
            let peer = killResponder ? target : source
            let started = DispatchSemaphore(value: 0)
            let finished = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                started.signal()
                _ = try? initiator.client().request("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)
                finished.signal()
            }
            started.wait()
            // Kill the target once some, not all, batches are in.
            let deadline = Date().addingTimeInterval(60)
            while Date() < deadline {
                if let events = try? status(target)["events"] as? Int, events > 2000 { break }
                Thread.sleep(forTimeInterval: 0.01)
            }
            kill(target.process.processIdentifier, SIGKILL)
            reap(target.process, timeout: 30)
            _ = finished.wait(timeout: .now() + 60)
            #expect(try source.client().call("status")["events"] as? Int == total)  // the source serves on

            target = try DaemonProcess(root: target.root, arguments: ["--node", "target"])
            let partial = try status(target)["events"] as! Int
            #expect(partial > 0 && partial <= total)
            let result = try sync(target, "unix://\(source.socketPath)")
            #expect(result["error"] is NSNull)
            #expect(result["received"] as? Int == total - partial)  // nothing held is sent again
            #expect(result["skipped"] as? Int == 0)
            try assertConverged([source, target])
            let verify = try target.client().call("rebuild", #"{"verify":true}"#)
            #expect((verify["mismatched"] as? [Any])?.isEmpty == true)
        }
    }

    @Test(
        "a plain edit of a field in conflict leaves it in conflict with one head more on both nodes; evctl resolve, and an edit with if_match, clear it everywhere"
    )
    func conflictsStayUntilResolved() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let ca = try a.client()
        let cb = try b.client()
        func edit(_ client: RPCClient, _ value: String, _ extra: String = "") throws -> [String: Any] {
            try client.call(
                "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"address":"\#(value)"}\#(extra)}"#])
            )
        }
        /// The values of the heads of `address`, in id order ([] when not in conflict), and
        /// the number of entities in conflict.
        func conflict(_ client: RPCClient) throws -> (values: [String], entities: Int) {
            let job = try client.call("get", #"{"entity":"job/1"}"#)
            let heads =
                ((job["conflicts"] as? [String: Any])?["fields"] as? [String: Any])?["address"] as? [[String: Any]]
            let attention = try client.call("status")["needs_attention"] as! [String: Any]
            return ((heads ?? []).compactMap { $0["value"] as? String }, attention["conflicts"] as! Int)
        }
        func syncBoth() throws {
            #expect(try sync(a, "unix://\(b.socketPath)")["error"] is NSNull)
        }
        _ = try edit(ca, "12 Main St")
        try syncBoth()
        // Offline, each node edits the address: after a sync, two heads on both.
        _ = try edit(ca, "13 Main St")
        _ = try edit(cb, "14 Main St")
        try syncBoth()
        for client in [ca, cb] {
            #expect(Set(try conflict(client).values) == ["13 Main St", "14 Main St"])
        }
        // A plain edit on a joins the conflict: three heads, on both nodes after the sync.
        _ = try edit(ca, "15 Main St")
        #expect(try conflict(ca).values.count == 3)
        try syncBoth()
        for client in [ca, cb] {
            let (values, entities) = try conflict(client)
            #expect(Set(values) == ["13 Main St", "14 Main St", "15 Main St"])
            #expect(entities == 1)
        }
        // evctl resolve on b settles it; after the sync, on a too.
        let (code, output) = try runProgram(
            try builtBinary("evctl").path, ["--socket", b.socketPath, "resolve", "job/1", "address=16 Main St"])
        #expect(code == 0, "\(output)")
        #expect(output.hasPrefix("resolved address of job/1"), "\(output)")
        #expect(try conflict(cb).values.isEmpty)
        try syncBoth()
        for client in [ca, cb] {
            let (values, entities) = try conflict(client)
            #expect(values.isEmpty && entities == 0)
            let fields = try client.call("get", #"{"entity":"job/1"}"#)["fields"] as? [String: Any]
            #expect(fields?["address"] as? String == "16 Main St")
        }
        // A new conflict, settled by an edit whose if_match is the rev get returned.
        _ = try edit(ca, "17 Main St")
        _ = try edit(cb, "18 Main St")
        try syncBoth()
        #expect(try conflict(ca).values.count == 2)
        let rev = try #require(try ca.call("get", #"{"entity":"job/1"}"#)["rev"] as? Int)
        _ = try edit(ca, "19 Main St", #","if_match":\#(rev)"#)
        try syncBoth()
        for client in [ca, cb] {
            let (values, entities) = try conflict(client)
            #expect(values.isEmpty && entities == 0)
        }
        try assertConverged([a, b])
    }
}
