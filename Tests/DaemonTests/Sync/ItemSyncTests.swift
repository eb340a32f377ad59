@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import StoreTestSupport
import TestSupport
import Testing
@testable import Writer

/// Sync truth down to the item: `get` with `sync`, `list` with `pending_for`,
/// `peers.show`, and `attention` against status's `needs_attention`, on real daemons.
@Suite("Per-item sync status and the attention view")
struct ItemSyncTests {
    /// A node that syncs in the background only when told to: the interval and the backoff
    /// are an hour, so what a test sees follows from its own `sync` calls.
    static let quiet = ["--sync-interval-s", "3600", "--backoff-base-s", "3600", "--backoff-cap-s", "3600"]

    func append(_ daemon: DaemonProcess, _ events: [String]) throws {
        _ = try daemon.client().call("append", eventsParams(events))
    }

    func status(_ entity: String) -> String { #"{"entity":"\#(entity)","kind":"status","status":"assigned"}"# }

    func edit(_ entity: String, _ value: String) -> String {
        #"{"entity":"\#(entity)","kind":"edit","fields":{"address":"\#(value)"}}"#
    }

    func sync(_ daemon: DaemonProcess, _ peer: String) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(peer)"}"#)
        return (result["peers"] as! [[String: Any]])[0]
    }

    func syncStatus(_ daemon: DaemonProcess, _ entity: String) throws -> [String: String] {
        try daemon.client().call("get", #"{"entity":"\#(entity)","sync":true}"#)["sync"] as? [String: String] ?? [:]
    }

    /// Every page of `list` with `pending_for`, `limit` at a time; the entities and the
    /// number of pages read.
    func pending(_ daemon: DaemonProcess, for peer: String, type: String? = nil, limit: Int = 2) throws -> (
        entities: [String], pages: Int
    ) {
        var entities: [String] = []
        var pages = 0
        var after: String?
        repeat {
            var params = #"{"pending_for":"\#(peer)","limit":\#(limit)"#
            if let type { params += #","type":"\#(type)""# }
            if let after { params += #","after":"\#(after)""# }
            let page = try daemon.client().call("list", params + "}")
            let items = page["entities"] as? [[String: Any]] ?? []
            #expect(items.count <= limit)
            entities += items.compactMap { $0["entity"] as? String }
            after = page["next"] as? String
            pages += 1
        } while after != nil && pages < 100
        return (entities, pages)
    }

    /// Syncs with `peer` until it counts as failing (a unix:// socket nobody listens on
    /// fails at once): `PeerSchedule.failingAfter` failures.
    func makeFailing(_ daemon: DaemonProcess, _ peer: String) throws {
        for _ in 0..<PeerSchedule.failingAfter {
            #expect(try sync(daemon, peer)["error"] is [String: Any])
        }
        let state =
            (try daemon.client().call("status")["peers"] as! [[String: Any]])
            .first { $0["name"] as? String == peer }?["state"] as? String
        #expect(state == "failing")
    }

    @Test("get with sync: pending before a sync and synced after it for a good peer, failed for a failing one")
    func getSync() throws {
        let hq = try DaemonProcess(arguments: ["--node", "hq"])
        let field = try DaemonProcess(arguments: ["--node", "field"] + ItemSyncTests.quiet)
        defer {
            hq.removeFiles()
            field.removeFiles()
        }
        try append(hq, [status("job/from-hq")])
        try append(field, [status("job/1")])
        let client = try field.client()
        _ = try client.call("peers.add", #"{"name":"hq","url":"unix://\#(hq.socketPath)"}"#)
        _ = try client.call("peers.add", #"{"name":"down","url":"unix://\#(field.root)/nobody.sock"}"#)
        #expect(try sync(field, "hq")["error"] is NSNull)
        // A job of this node and one that came from hq: hq holds both.
        #expect(try syncStatus(field, "job/1") == ["hq": "synced", "down": "pending"])
        #expect(try syncStatus(field, "job/from-hq") == ["hq": "synced", "down": "pending"])

        // New here: neither peer has it yet; an entity hq had gets an event it lacks.
        try append(field, [status("job/2"), edit("job/from-hq", "1 Quay St")])
        #expect(try syncStatus(field, "job/2") == ["hq": "pending", "down": "pending"])
        #expect(try syncStatus(field, "job/from-hq") == ["hq": "pending", "down": "pending"])
        #expect(try syncStatus(field, "job/1") == ["hq": "synced", "down": "pending"])
        // Without sync, get is as it was.
        #expect(try client.call("get", #"{"entity":"job/2"}"#)["sync"] == nil)

        #expect(try sync(field, "hq")["error"] is NSNull)
        #expect(try syncStatus(field, "job/2") == ["hq": "synced", "down": "pending"])
        #expect(try syncStatus(field, "job/from-hq") == ["hq": "synced", "down": "pending"])

        try makeFailing(field, "down")
        #expect(try syncStatus(field, "job/2") == ["hq": "synced", "down": "failed"])
        #expect(try client.failure("get", #"{"entity":"job/none","sync":true}"#).reason == "not_found")

        let (code, output) = try runProgram(
            try builtBinary("evctl").path, ["--socket", field.socketPath, "get", "job/2", "--sync"])
        #expect(code == 0, "\(output)")
        #expect(output.contains("hq:") && output.contains("synced"), "\(output)")
        #expect(output.contains("down:") && output.contains("failed"), "\(output)")
        #expect(output.contains("evctl attention"), "\(output)")
    }

    @Test("list with pending_for pages through exactly the entities the peer lacks, and none after a sync")
    func listPending() throws {
        let hq = try DaemonProcess(arguments: ["--node", "hq"])
        let field = try DaemonProcess(arguments: ["--node", "field"] + ItemSyncTests.quiet)
        defer {
            hq.removeFiles()
            field.removeFiles()
        }
        let client = try field.client()
        _ = try client.call("peers.add", #"{"name":"hq","url":"unix://\#(hq.socketPath)"}"#)
        _ = try client.call("peers.add", #"{"name":"never","url":"unix://\#(field.root)/nobody.sock"}"#)
        try append(field, (1...3).map { status("job/\($0)") })
        #expect(try sync(field, "hq")["error"] is NSNull)
        #expect(try pending(field, for: "hq").entities.isEmpty)

        // Five new jobs, a new event of job/2, and a note.
        try append(field, (4...8).map { status("job/\($0)") } + [edit("job/2", "9 Mill Way"), status("note/1")])
        let unsynced = ["job/2", "job/4", "job/5", "job/6", "job/7", "job/8", "note/1"]
        let all = try pending(field, for: "hq")
        #expect(all.entities == unsynced)
        #expect(all.pages == 4)
        #expect(try pending(field, for: "hq", type: "job").entities == unsynced.filter { $0.hasPrefix("job/") })
        // A peer never synced lacks everything.
        #expect(try pending(field, for: "never", limit: 3).entities == (["job/1", "job/3"] + unsynced).sorted())
        #expect(try client.failure("list", #"{"pending_for":"nobody"}"#).reason == "not_found")

        // peers.show: per origin, what the peer lacks.
        let node = (try client.call("status")["node"] as! [String: Any])["id"] as! String
        let shown = try client.call("peers.show", #"{"name":"hq"}"#)
        #expect(shown["pending"] as? Int == 7)
        #expect(shown["node"] as? String == (try hq.client().call("status")["node"] as! [String: Any])["id"] as? String)
        let origins = shown["origins"] as? [[String: Any]] ?? []
        #expect(origins.count == 1)
        #expect(origins.first?["origin"] as? String == node)
        #expect(origins.first?["lacking"] as? Int == 7)
        #expect(origins.first?["held"] as? Int == 10)
        #expect((shown["vector"] as? [String: String])?[node] != nil)
        #expect(try client.failure("peers.show", #"{"name":"nobody"}"#).reason == "not_found")

        #expect(try sync(field, "hq")["error"] is NSNull)
        let after = try pending(field, for: "hq")
        #expect(after.entities.isEmpty && after.pages == 1)
        #expect(try client.call("peers.show", #"{"name":"hq"}"#)["pending"] as? Int == 0)

        let evctl = try builtBinary("evctl").path
        let (code, output) = try runProgram(evctl, ["--socket", field.socketPath, "list", "--pending-for", "hq"])
        #expect(code == 0 && output.contains("nothing pending for hq"), "\(output)")
        let (shownCode, shownText) = try runProgram(evctl, ["--socket", field.socketPath, "peers", "show", "hq"])
        #expect(shownCode == 0 && shownText.contains("0 of 10"), "\(shownText)")
    }

    @Test("attention lists what status counts under needs_attention: conflicts, dead letters, a failing peer")
    func attention() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"] + ItemSyncTests.quiet)
        let b = try DaemonProcess(arguments: ["--node", "b"] + ItemSyncTests.quiet)
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let evctl = try builtBinary("evctl").path
        let clean = try runProgram(evctl, ["--socket", a.socketPath, "attention"])
        #expect(clean.status == 0 && clean.output.contains("nothing needs attention"), "\(clean.output)")

        // Three entities edited on both nodes without seeing each other's edit.
        let jobs = ["job/c1", "job/c2", "job/c3"]
        try append(a, jobs.map { edit($0, "on a") })
        try append(b, jobs.map { edit($0, "on b") })
        #expect(try sync(a, "unix://\(b.socketPath)")["error"] is NSNull)

        // Two invalid events from a peer: two dead letters.
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            try channel.write(
                try peer.batch([
                    (peer.id(1), #"{"entity":"job/x","kind":"teleport","origin":"\#(peer.node)"}"#),
                    (peer.id(2), "<html>not an event</html>"),
                ]))
            _ = try channel.read()
            try channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 2, reconciled: 0))))
        }
        let scripted = try sync(a, peer.url)
        peer.finish()
        #expect(scripted["dead_letters"] as? Int == 2, "\(scripted)")

        let client = try a.client()
        _ = try client.call("peers.add", #"{"name":"down","url":"unix://\#(a.root)/nobody.sock"}"#)
        try makeFailing(a, "down")

        let counts = try client.call("status")["needs_attention"] as! [String: Int]
        #expect(
            counts == [
                "conflicts": 3, "dead_letters": 2, "divergent": 0, "rule_violations": 0, "rejected_proposals": 0,
                "failing_peers": 1,
            ])

        // One item a page: every conflict, then every dead letter, each once.
        var conflicts: [[String: Any]] = []
        var letters: [[String: Any]] = []
        var peers: [[String: Any]] = []
        var after: String?
        var pages = 0
        repeat {
            let page = try client.call(
                "attention", after.map { #"{"limit":1,"after":"\#($0)"}"# } ?? #"{"limit":1}"#)
            let more = (page["conflicts"] as! [[String: Any]]) + (page["dead_letters"] as! [[String: Any]])
            #expect(more.count == 1)
            conflicts += page["conflicts"] as! [[String: Any]]
            letters += page["dead_letters"] as! [[String: Any]]
            peers = page["peers"] as! [[String: Any]]
            after = page["next"] as? String
            pages += 1
        } while after != nil && pages < 20
        #expect(pages == 5)
        #expect(conflicts.count == counts["conflicts"])
        #expect(conflicts.compactMap { $0["entity"] as? String } == jobs)
        #expect(conflicts.allSatisfy { $0["fields"] as? [String] == ["address"] && $0["status"] as? Bool == false })
        #expect(letters.count == counts["dead_letters"])
        #expect(letters.allSatisfy { $0["peer"] as? String == peer.url && ($0["reason"] as? String) != nil })
        #expect(Set(letters.compactMap { $0["key"] as? String }).count == 2)
        #expect(peers.count == counts["failing_peers"])
        let down = try #require(peers.first)
        #expect(down["name"] as? String == "down")
        #expect(down["state"] as? String == "failing")
        // The background sync that peers.add starts may have failed once more.
        #expect((down["failures"] as? Int ?? 0) >= PeerSchedule.failingAfter)
        #expect((down["last_error"] as? [String: Any])?["reason"] != nil)
        let since = try #require(down["since"] as? String)
        #expect(since.hasSuffix("Z") && since.contains("T"))

        // The whole view in one page; a cursor that is not one is refused.
        let whole = try client.call("attention")
        #expect((whole["conflicts"] as? [Any])?.count == 3 && (whole["dead_letters"] as? [Any])?.count == 2)
        #expect(whole["next"] is NSNull)
        #expect(try client.failure("attention", #"{"after":"x"}"#).code == -32602)

        let listed = try runProgram(evctl, ["--socket", a.socketPath, "attention"])
        #expect(listed.status == 1, "\(listed.output)")
        #expect(
            jobs.allSatisfy(listed.output.contains) && listed.output.contains("down")
                && listed.output.contains("failing"), "\(listed.output)")
        let json = try runProgram(evctl, ["--socket", a.socketPath, "--json", "attention", "--all"])
        #expect(json.status == 1)
        let object = try JSONSerialization.jsonObject(with: Data(json.output.utf8)) as? [String: Any]
        #expect((object?["conflicts"] as? [Any])?.count == 3 && (object?["dead_letters"] as? [Any])?.count == 2)
    }

    @Test("a dead letter at the peer makes an entity failed and pending for it, though its vector covers it")
    func deadLettered() throws {
        let store = try TempStore()
        defer { store.remove() }
        try store.append([status("job/1"), status("job/2"), edit("job/2", "1 Main St")])
        let vector = try store.log.versionVector()
        let ids = try store.log.events(ofEntity: EntityKey(validated: Array("job/2".utf8))).events.map(\.id)
        let refused = PeerHoldings(vector: vector, deadLettered: [ids[1]])
        let holdings = [PeerHoldings(vector: vector), refused, PeerHoldings()]
        let one = try #require(
            try store.log.canonicalState(of: EntityKey(validated: Array("job/1".utf8)), deliveredTo: holdings))
        #expect(one.delivery == [.held, .held, .lacking])
        let two = try #require(
            try store.log.canonicalState(of: EntityKey(validated: Array("job/2".utf8)), deliveredTo: holdings))
        #expect(two.delivery == [.held, .deadLettered, .lacking])
        #expect(try store.log.entitiesLacking(refused).entities.map(\.entity.description) == ["job/2"])
        #expect(try store.log.entitiesLacking(PeerHoldings(vector: vector)).entities.isEmpty)
        // A peer never synced lacks more events than there are entities: the entities are
        // walked instead, with the same answer.
        let first = try store.log.entitiesLacking(PeerHoldings(), limit: 1)
        #expect(first.entities.map(\.entity.description) == ["job/1"])
        #expect(first.next?.description == "job/1")
        let second = try store.log.entitiesLacking(PeerHoldings(), after: first.next, limit: 1)
        #expect(second.entities.map(\.entity.description) == ["job/2"] && second.next == nil)
        #expect(try store.log.entitiesLacking(PeerHoldings(), type: "note").entities.isEmpty)
    }
}
