import Foundation
import Testing

/// Durable consumers against a real `evstored`: `consumers.*`, `log` and `watch` with
/// `consumer`, the lag in `status`, the bound on their number, and acknowledgements that
/// outlive a `kill -9`.
@Suite("Durable consumers")
struct DurableConsumerTests {
    static func seqs(_ page: [String: Any]) -> [Int] {
        (page["events"] as? [[String: Any]] ?? []).compactMap { $0["seq"] as? Int }
    }

    /// The entry of consumer `name` in a `consumers.*` answer.
    static func entry(_ name: String, in answer: [String: Any]) -> [String: Any]? {
        (answer["consumers"] as? [[String: Any]])?.first { $0["name"] as? String == name }
    }

    static func appendJobs(_ client: RPCClient, _ range: Range<Int>) throws {
        let events = range.map { #"{"entity":"job/\#($0)","kind":"status","status":"assigned"}"# }
        _ = try client.call("append", eventsParams(events))
    }

    @Test("log and watch start after the consumer's acknowledged seq; status and consumers.list give its lag")
    func feedsResumeAfterTheAcknowledgedSeq() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        try DurableConsumerTests.appendJobs(client, 0..<10)

        let unknown = try client.failure("log", #"{"consumer":"bridge"}"#)
        #expect(unknown.reason == "not_found" && unknown.message.contains("consumers.ack"), "\(unknown)")
        let unknownWatch = try daemon.client().failure("watch", #"{"consumer":"bridge"}"#)
        #expect(unknownWatch.reason == "not_found")

        let answer = try client.call("consumers.ack", #"{"name":"bridge","seq":0}"#)
        let created = try #require(DurableConsumerTests.entry("bridge", in: answer))
        #expect(created["seq"] as? Int == 0 && created["lag"] as? Int == 10, "\(answer)")
        #expect(answer["head"] as? Int == 10 && created["acked_at"] is String)
        #expect(DurableConsumerTests.seqs(try client.call("log", #"{"consumer":"bridge","limit":4}"#)) == [1, 2, 3, 4])
        // Reading does not move it; acknowledging does.
        #expect(DurableConsumerTests.seqs(try client.call("log", #"{"consumer":"bridge","limit":2}"#)) == [1, 2])
        _ = try client.call("consumers.ack", #"{"name":"bridge","seq":6}"#)
        #expect(DurableConsumerTests.seqs(try client.call("log", #"{"consumer":"bridge"}"#)) == [7, 8, 9, 10])
        let filtered = try client.call("log", #"{"consumer":"bridge","entity":"job/8"}"#)
        #expect(DurableConsumerTests.seqs(filtered) == [9])

        // A watch replays what follows the acknowledged seq, then goes live.
        let watcher = try daemon.client()
        #expect(try watcher.call("watch", #"{"consumer":"bridge"}"#)["watching"] as? Bool == true)
        try DurableConsumerTests.appendJobs(client, 10..<11)
        var replayed: [Int] = []
        while replayed.count < 5 {
            let notification = try watcher.readJSON()
            let event = (notification["params"] as? [String: Any])?["event"] as? [String: Any]
            replayed.append(try #require(event?["seq"] as? Int))
        }
        #expect(replayed == [7, 8, 9, 10, 11])

        let listed = try client.call("consumers.list")
        let consumers = try #require(listed["consumers"] as? [[String: Any]])
        #expect(consumers.count == 1 && consumers[0]["name"] as? String == "bridge")
        #expect(consumers[0]["seq"] as? Int == 6 && consumers[0]["lag"] as? Int == 5, "\(listed)")
        #expect(listed["head"] as? Int == 11)
        let status = try client.call("status")
        let inStatus = try #require((status["consumers"] as? [[String: Any]])?.first)
        #expect(inStatus["name"] as? String == "bridge" && inStatus["lag"] as? Int == 5, "\(status)")
    }

    @Test("an ack past the head, one going back, a bad name, after with consumer: clear errors that change nothing")
    func badAcknowledgementsAreRefused() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        try DurableConsumerTests.appendJobs(client, 0..<3)
        _ = try client.call("consumers.ack", #"{"name":"idx","seq":2}"#)

        let past = try client.failure("consumers.ack", #"{"name":"idx","seq":4}"#)
        #expect(past.code == -32602 && past.message.contains("beyond this node's head (3)"), "\(past)")
        let pastNew = try client.failure("consumers.ack", #"{"name":"new","seq":99}"#)
        #expect(pastNew.code == -32602)
        let back = try client.failure("consumers.ack", #"{"name":"idx","seq":1}"#)
        #expect(back.reason == "conflict" && back.message.contains("only move forward"), "\(back)")
        let again = try client.call("consumers.ack", #"{"name":"idx","seq":2}"#)
        #expect(DurableConsumerTests.entry("idx", in: again)?["seq"] as? Int == 2)
        let badName = try client.failure("consumers.ack", #"{"name":"a b","seq":0}"#)
        #expect(badName.code == -32602 && badName.message.contains("consumer name"), "\(badName)")
        let missing = try client.failure("consumers.ack", #"{"name":"idx"}"#)
        #expect(missing.code == -32602)
        let both = try client.failure("log", #"{"consumer":"idx","after":1}"#)
        #expect(both.code == -32602 && both.message.contains("not both"), "\(both)")
        let byID = try client.failure("log", #"{"consumer":"idx","order":"id"}"#)
        #expect(byID.code == -32602)
        let gone = try client.failure("consumers.remove", #"{"name":"nobody"}"#)
        #expect(gone.reason == "not_found")

        let consumers = try #require(try client.call("consumers.list")["consumers"] as? [[String: Any]])
        #expect(consumers.map { $0["name"] as? String } == ["idx"] && consumers[0]["seq"] as? Int == 2)
    }

    @Test("past max_consumers a new consumer is refused with too_many_consumers; removing one frees its place")
    func theNumberOfConsumersIsBounded() throws {
        let daemon = try DaemonProcess(arguments: ["--max-consumers", "3"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        for index in 0..<3 { _ = try client.call("consumers.ack", #"{"name":"c\#(index)","seq":0}"#) }
        let refused = try client.failure("consumers.ack", #"{"name":"c3","seq":0}"#)
        #expect(refused.reason == "too_many_consumers" && refused.code == -32012, "\(refused)")
        #expect(refused.message.contains("max_consumers"))
        // A flood of new names costs nothing past the bound.
        for index in 4..<200 {
            #expect(
                try client.failure("consumers.ack", #"{"name":"c\#(index)","seq":0}"#).reason == "too_many_consumers")
        }
        #expect((try client.call("consumers.list")["consumers"] as? [[String: Any]])?.count == 3)
        let left = try client.call("consumers.remove", #"{"name":"c1"}"#)
        #expect((left["consumers"] as? [[String: Any]])?.compactMap { $0["name"] as? String } == ["c0", "c2"])
        let added = try client.call("consumers.ack", #"{"name":"c3","seq":0}"#)
        #expect(DurableConsumerTests.entry("c3", in: added)?["seq"] as? Int == 0)
        #expect(daemon.process.isRunning)
    }

    @Test("an acknowledgement answered survives kill -9; the consumer resumes there after the restart")
    func acknowledgementsSurviveACrash() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        try DurableConsumerTests.appendJobs(client, 0..<20)
        _ = try client.call("consumers.ack", #"{"name":"hq","seq":0}"#)
        for seq in stride(from: 2, through: 14, by: 3) {
            _ = try client.call("consumers.ack", #"{"name":"hq","seq":\#(seq)}"#)
        }
        daemon.signal(SIGKILL)
        _ = try daemon.waitForExit()
        let restarted = try DaemonProcess(root: daemon.root)
        defer { restarted.removeFiles() }
        let again = try restarted.client()
        #expect(DurableConsumerTests.seqs(try again.call("log", #"{"consumer":"hq","limit":3}"#)) == [15, 16, 17])
        let consumer = try #require((try again.call("consumers.list")["consumers"] as? [[String: Any]])?.first)
        #expect(consumer["seq"] as? Int == 14 && consumer["lag"] as? Int == 6, "\(consumer)")
    }
}
