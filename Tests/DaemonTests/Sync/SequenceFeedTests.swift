import Foundation
import Testing

/// Feeds by seq and revisions against real daemons: what replication brings later, whatever
/// its ids, reaches a consumer that resumes by seq, and an `if_match` read before a sync
/// cannot settle what the sync brought.
@Suite("Feeds by seq and revisions across sync")
struct SequenceFeedTests {
    func sync(_ daemon: DaemonProcess, with peer: DaemonProcess) throws {
        let result = try daemon.client().call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)
        let peers = try #require(result["peers"] as? [[String: Any]])
        #expect(peers.allSatisfy { $0["error"] is NSNull }, "\(result)")
    }

    static func ids(_ page: [String: Any]) -> [String] {
        (page["events"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
    }

    @Test("an event a peer made earlier and delivered later reaches log --after and watch resumed by seq")
    func olderEventsDeliveredLaterAreNotSkipped() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        // B makes job/b1 before A makes anything: its id is older than all of A's.
        let made = try b.client().call("append", eventsParams([#"{"entity":"job/b1","kind":"status","status":"new"}"#]))
        let older = try #require((made["ids"] as? [String])?.first)
        Thread.sleep(forTimeInterval: 0.01)
        let client = try a.client()
        let local = try client.call(
            "append",
            eventsParams([
                #"{"entity":"job/a1","kind":"status","status":"new"}"#, #"{"entity":"job/a2","kind":"delete"}"#,
            ]))
        let localIDs = try #require(local["ids"] as? [String])
        #expect(older < localIDs[0])

        // A consumer on A reads everything and keeps its cursor: the head.
        let first = try client.call("log", #"{"after":0}"#)
        #expect(SequenceFeedTests.ids(first) == localIDs)
        let cursor = try #require(first["head"] as? Int)
        #expect(cursor == 2 && first["next"] is NSNull)
        // A watcher resumes from the same cursor.
        let watcher = try a.client()
        #expect(try watcher.call("watch", #"{"after":\#(cursor)}"#)["watching"] as? Bool == true)

        try sync(a, with: b)

        let resumed = try client.call("log", #"{"after":\#(cursor)}"#)
        #expect(SequenceFeedTests.ids(resumed) == [older], "\(resumed)")
        let events = try #require(resumed["events"] as? [[String: Any]])
        #expect(events.first?["seq"] as? Int == cursor + 1)
        #expect(resumed["head"] as? Int == cursor + 1)
        let notification = try watcher.readJSON()
        let event = (notification["params"] as? [String: Any])?["event"] as? [String: Any]
        #expect(event?["id"] as? String == older && event?["seq"] as? Int == cursor + 1, "\(notification)")
        // Filters by origin and type, by seq too.
        let status = try client.call("status")
        #expect(status["seq"] as? Int == cursor + 1)
        let byOrigin = try client.call(
            "log", #"{"after":0,"origin":"\#(try #require(events.first?["origin"] as? String))"}"#)
        #expect(SequenceFeedTests.ids(byOrigin) == [older])
        // What 0.4 clients sent, an id as the cursor, is refused with what to pass.
        let refused = try client.failure("log", #"{"after":"\#(localIDs[1])"}"#)
        #expect(refused.code == -32602 && refused.message.contains("seq"), "\(refused)")
        let refusedWatch = try a.client().failure("watch", #"{"after":"\#(localIDs[1])"}"#)
        #expect(refusedWatch.code == -32602)
        try a.stop()
        try b.stop()
    }

    @Test("if_match with a rev read before a sync brought a concurrent edit is a conflict; the rev read after succeeds")
    func lostUpdateIsRefused() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let client = try a.client()
        _ = try client.call(
            "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"address":"1 Main St"}}"#]))
        try sync(a, with: b)
        // A client on A reads the entity and its rev...
        let read = try client.call("get", #"{"entity":"job/1"}"#)
        let rev = try #require(read["rev"] as? Int)
        let version = try #require(read["version"] as? String)
        // ...B edits the same field concurrently, and a sync brings it to A: a conflict.
        _ = try b.client().call(
            "append", eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"address":"2 Main St"}}"#]))
        try sync(a, with: b)
        let after = try client.call("get", #"{"entity":"job/1"}"#)
        let newRev = try #require(after["rev"] as? Int)
        #expect(newRev > rev)
        #expect(after["version"] as? String != nil && version.count == 26)

        // The append with the rev read before the sync is refused, nothing written.
        let stale = try client.failure(
            "append",
            eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"address":"3 Main St"},"if_match":\#(rev)}"#]))
        #expect(stale.reason == "conflict", "\(stale)")
        #expect(try client.call("get", #"{"entity":"job/1"}"#)["rev"] as? Int == newRev)
        // With the rev read after the sync it succeeds, and returns the entity's new rev.
        let fresh = try client.call(
            "append",
            eventsParams([#"{"entity":"job/1","kind":"edit","fields":{"address":"3 Main St"},"if_match":\#(newRev)}"#]))
        let revs = try #require(fresh["revs"] as? [String: Any])
        #expect((revs["job/1"] as? Int ?? 0) > newRev)
        #expect(try client.call("get", #"{"entity":"job/1"}"#)["rev"] as? Int == revs["job/1"] as? Int)
        let listed = try client.call("list", #"{"type":"job"}"#)
        #expect((listed["entities"] as? [[String: Any]])?.first?["rev"] as? Int == revs["job/1"] as? Int)
        try a.stop()
        try b.stop()
    }
}
