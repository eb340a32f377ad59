import Foundation
import Synchronization
import TestSupport
import Testing

/// `get` and small appends answered on the event loop (`ConnectionSession.answerOnLoop`): a
/// small entity's answer, or an append handed to the writer, needs no request thread, so it
/// comes while every request thread is taken; a get pipelined behind the same connection's
/// append still sees the append; a large entity, a get with `sync` and a refused client go
/// the usual way and answer as before.
@Suite("Get on the event loop", .serialized)
struct GetOnLoopTests {
    /// Runs `body` on a daemon with one request thread while a sync holds that thread (its
    /// peer never says a word; the sync waits up to 20 s), after `before` ran on the daemon
    /// with the thread free; then checks that `body` took well under those 20 s, so nothing
    /// in it waited for the thread.
    static func withTheRequestThreadHeld(
        before: (DaemonProcess) throws -> Void = { _ in }, _ body: (DaemonProcess) throws -> Void
    ) throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evloop-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        try #"{"request_threads":1,"sync_timeout_s":20,"sync_interval_s":3600}"#.write(
            toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json"])
        defer { daemon.removeFiles() }
        try before(daemon)
        let holder = try daemon.client()
        try holder.send(#"{"jsonrpc":"2.0","id":1,"method":"sync","params":{"peer":"exec:sleep 30"}}"#)
        Thread.sleep(forTimeInterval: 0.5)
        let started = Date()
        try body(daemon)
        #expect(Date().timeIntervalSince(started) < 10)
        withExtendedLifetime(holder) {}
    }

    @Test(
        "with the one request thread held by a sync that waits on a silent peer, a get on another connection is answered at once",
        .timeLimit(.minutes(30)))
    func getNeedsNoRequestThread() throws {
        try GetOnLoopTests.withTheRequestThreadHeld(
            before: { daemon in
                _ = try daemon.client().call(
                    "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"assigned"}"#]))
            },
            { daemon in
                let reader = try daemon.client()
                let state = try reader.call("get", #"{"entity":"job/1"}"#)
                #expect((state["status"] as? [String: Any])?["current"] as? String == "assigned", "\(state)")
                let missing = try reader.failure("get", #"{"entity":"job/2"}"#)
                #expect(missing.reason == "not_found", "\(missing)")
            })
    }

    @Test(
        "with the one request thread held, small appends on another connection are committed and answered at once",
        .timeLimit(.minutes(30)))
    func appendNeedsNoRequestThread() throws {
        try GetOnLoopTests.withTheRequestThreadHeld { daemon in
            let writer = try daemon.client()
            var ids: [String] = []
            for round in 1...5 {
                let answer = try writer.call(
                    "append", eventsParams([#"{"entity":"job/l","kind":"edit","fields":{"n":\#(round)}}"#]))
                let id = try #require((answer["ids"] as? [String])?.first, "\(answer)")
                ids.append(id)
            }
            // Nothing to store is answered at once, on the loop too.
            let empty = try writer.call("append", #"{"events":[]}"#)
            #expect((empty["ids"] as? [String]) == [], "\(empty)")
            let state = try writer.call("get", #"{"entity":"job/l"}"#)
            #expect((state["fields"] as? [String: Any])?["n"] as? Int == 5, "\(state)")
            #expect(state["events"] as? Int == 5, "\(state)")
            #expect(Set(ids).count == 5)
        }
    }

    @Test(
        "appends from many connections at once, each pipelining a few: every answer in order, every event stored once")
    func manyConnectionsAppend() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let connections = 24
        let perConnection = 30
        let failures = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: connections) { index in
            do {
                let client = try daemon.client()
                var sent = 0
                var received = 0
                // Up to three in flight: the first of a burst may go on the loop, the rest queue.
                while received < perConnection {
                    while sent < perConnection, sent - received < 3 {
                        sent += 1
                        try client.send(
                            #"{"jsonrpc":"2.0","id":\#(sent),"method":"append","params":{"events":[{"entity":"job/c\#(index)","kind":"edit","fields":{"n":\#(sent)}}]}}"#
                        )
                    }
                    let answer = try client.readJSON()
                    received += 1
                    if answer["id"] as? Int != received || answer["result"] == nil {
                        failures.add(1, ordering: .relaxed)
                    }
                }
            } catch {
                failures.add(1, ordering: .relaxed)
            }
        }
        #expect(failures.load(ordering: .relaxed) == 0)
        let client = try daemon.client()
        for index in 0..<connections {
            let state = try client.call("get", #"{"entity":"job/c\#(index)"}"#)
            #expect(state["events"] as? Int == perConnection, "\(state)")
            #expect((state["fields"] as? [String: Any])?["n"] as? Int == perConnection, "\(state)")
        }
    }

    @Test(
        "a get pipelined behind the same connection's append sees it; a large entity and a get with sync answer as before"
    )
    func orderAndSizesHold() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        // Sent in one write: the get must not overtake the append.
        var lines = ""
        for round in 1...20 {
            lines +=
                #"{"jsonrpc":"2.0","id":\#(2 * round),"method":"append","params":{"events":[{"entity":"job/p","kind":"edit","fields":{"n":\#(round)}}]}}"#
                + "\n"
            lines += #"{"jsonrpc":"2.0","id":\#(2 * round + 1),"method":"get","params":{"entity":"job/p"}}"# + "\n"
        }
        try client.send(Array(lines.utf8))
        for round in 1...20 {
            let append = try client.readJSON()
            #expect(append["id"] as? Int == 2 * round)
            let get = try client.readJSON()
            #expect(get["id"] as? Int == 2 * round + 1)
            let fields = ((get["result"] as? [String: Any])?["fields"] as? [String: Any])
            #expect(fields?["n"] as? Int == round, "\(get)")
        }
        // An entity whose record is past the loop's bound (40 KB of notes).
        let notes = String(repeating: "x", count: 40_000)
        _ = try client.call(
            "append", eventsParams([#"{"entity":"job/big","kind":"edit","fields":{"notes":"\#(notes)"}}"#]))
        let big = try client.call("get", #"{"entity":"job/big"}"#)
        #expect((big["fields"] as? [String: Any])?["notes"] as? String == notes)
        let synced = try client.call("get", #"{"entity":"job/p","sync":true}"#)
        #expect(synced["sync"] is [String: Any], "\(synced)")
        // Bad params are answered with the same error either way.
        let bad = try client.failure("get", #"{"entity":"nope"}"#)
        #expect(bad.reason == "invalid_params", "\(bad)")
        let unknown = try client.failure("get", #"{"entity":"job/p","colour":"red"}"#)
        #expect(unknown.reason == "invalid_params", "\(unknown)")
    }
}
