import Foundation
import Testing
import UnixSocket

@Suite("Bad input and slow consumers")
struct RobustnessTests {
    @Test("malformed, oversized, non-UTF-8 and binary lines get an error and the connection keeps serving")
    func malformedInput() throws {
        let daemon = try DaemonProcess(arguments: ["--max-line-bytes", "4096"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let cases: [(name: String, bytes: [UInt8], code: Int)] = [
            ("truncated JSON", Array(#"{"jsonrpc":"2.0","id":1,"method":"#.utf8), -32700),
            ("not JSON", Array("GET / HTTP/1.1".utf8), -32700),
            (
                "invalid UTF-8 in a string",
                Array(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"job/"#.utf8) + [0xC3, 0x28]
                    + Array(#""}}"#.utf8), -32700
            ),
            ("binary", [0x00, 0x01, 0xFF, 0xFE, 0x7F, 0x80], -32700),
            ("a JSON string", Array(#""hello""#.utf8), -32600),
            (
                "an event with invalid JSON inside",
                Array(
                    #"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[{"entity":"job/1","kind":"delete",}]}}"#
                        .utf8), -32700
            ),
            (
                "over the line limit",
                Array(#"{"jsonrpc":"2.0","id":1,"method":"status","params":{"pad":""#.utf8)
                    + Array(repeating: UInt8(ascii: "a"), count: 10_000) + Array(#""}}"#.utf8), -32600
            ),
        ]
        for (name, bytes, code) in cases {
            try client.send(bytes + [0x0A])
            let response = try client.readJSON()
            let error = response["error"] as? [String: Any]
            #expect(error?["code"] as? Int == code, "\(name): \(response)")
            #expect(response["id"] is NSNull, "\(name)")
            #expect((error?["message"] as? String)?.isEmpty == false)
            // The same connection still answers.
            _ = try client.call("status")
        }
        // A line over the limit says so in data.reason.
        try client.send(Array(repeating: UInt8(ascii: "["), count: 9000) + [0x0A])
        let tooLong = try client.readJSON()
        #expect(((tooLong["error"] as? [String: Any])?["data"] as? [String: Any])?["reason"] as? String == "too_large")
        // Deep nesting is refused, not a stack overflow.
        try client.send(String(repeating: "[", count: 3000) + String(repeating: "]", count: 3000))
        #expect((try client.readJSON()["error"] as? [String: Any]) != nil)
        // Other clients never noticed, and nothing was written.
        let other = try daemon.client()
        #expect(try other.call("status")["events"] as? Int == 0)
        try daemon.stop()
    }

    @Test(
        "a client that disconnects mid-line or mid-pipeline leaves the daemon serving: the appends it sent whole are stored, the cut line changes nothing"
    )
    func abruptDisconnects() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        func append(_ id: Int, _ entity: String) -> [UInt8] {
            Array(
                #"{"jsonrpc":"2.0","id":\#(id),"method":"append","params":{"events":[{"entity":"\#(entity)","kind":"status","status":"a"}]}}"#
                    .utf8) + [0x0A]
        }
        let rounds = 20
        for round in 0..<rounds {
            let connection = try UnixConnection.connect(to: daemon.socketPath)
            // Two whole appends pipelined, then a third cut mid-line, then a hang-up
            // without reading an answer.
            let cut = append(3, "cut/\(round)").dropLast(30)
            try connection.write(append(1, "job/\(round)") + append(2, "site/\(round)") + cut)
            connection.close()
        }
        // A departed client's appends still run: wait for them, then check nothing more came.
        let client = try daemon.client()
        let deadline = Date().addingTimeInterval(20)
        var events = 0
        while Date() < deadline {
            events = try client.call("status")["events"] as? Int ?? -1
            if events >= 2 * rounds { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(events == 2 * rounds, "every append sent whole is stored, and nothing else")
        for round in 0..<rounds {
            let job = try client.call("get", #"{"entity":"job/\#(round)"}"#)
            #expect((job["status"] as? [String: Any])?["current"] as? String == "a")
            #expect(try client.call("get", #"{"entity":"site/\#(round)"}"#)["entity"] as? String == "site/\(round)")
        }
        #expect((try client.call("list", #"{"type":"cut"}"#)["entities"] as? [[String: Any]])?.isEmpty == true)
        // The daemon serves on: a new client appends and reads.
        let after = try daemon.client()
        _ = try after.call("append", eventsParams([#"{"entity":"job/after","kind":"status","status":"b"}"#]))
        #expect(try after.call("status")["events"] as? Int == 2 * rounds + 1)
        try daemon.stop()
    }

    @Test("watch streams new events, replays with after, and filters by entity and type")
    func watchStreams() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let writer = try daemon.client()
        let early = try writer.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let earlyID = try #require((early["ids"] as? [String])?.first)

        let live = try daemon.client()
        #expect(try live.call("watch")["watching"] as? Bool == true)
        let replay = try daemon.client()
        #expect(
            try replay.call("watch", #"{"after":0,"type":"job"}"#)["watching"] as? Bool
                == true)
        let entityOnly = try daemon.client()
        _ = try entityOnly.call("watch", #"{"entity":"site/1"}"#)

        let later = try writer.call(
            "append",
            eventsParams([
                #"{"entity":"site/1","kind":"status","status":"up"}"#, #"{"entity":"job/2","kind":"delete"}"#,
            ]))
        let laterIDs = try #require(later["ids"] as? [String])

        func notifiedID(_ client: RPCClient) throws -> String? {
            let message = try client.readJSON()
            #expect(message["method"] as? String == "event" && message["id"] == nil)
            return ((message["params"] as? [String: Any])?["event"] as? [String: Any])?["id"] as? String
        }
        #expect(try notifiedID(live) == laterIDs[0])
        #expect(try notifiedID(live) == laterIDs[1])
        #expect(try notifiedID(replay) == earlyID)
        #expect(try notifiedID(replay) == laterIDs[1])
        #expect(try notifiedID(entityOnly) == laterIDs[0])
        // The watching connection still answers requests.
        _ = try live.call("status")
        try daemon.stop()
    }

    @Test(
        "a watcher that stops reading is told it fell behind and dropped; the writer never waits; after resumes without a gap"
    )
    func slowWatcher() throws {
        let daemon = try DaemonProcess(arguments: ["--watch-queue-events", "200"])
        defer { daemon.removeFiles() }
        let slow = try daemon.client()
        #expect(try slow.call("watch")["watching"] as? Bool == true)
        // The watcher reads nothing while 4,000 events are appended: far more than the
        // socket's buffers and the 200 queued hold, and done well within the daemon's 30 s
        // send timeout (a watcher that reads nothing for that long is cut off unannounced),
        // even under a sanitizer on a busy machine.
        let writer = try daemon.client()
        var appended: [String] = []
        for batch in 0..<8 {
            let events = (0..<500).map {
                #"{"entity":"job/\#(batch)-\#($0)","kind":"edit","fields":{"pad":"\#(String(repeating: "p", count: 200))"}}"#
            }
            appended += try writer.call("append", eventsParams(events))["ids"] as? [String] ?? []
        }
        #expect(appended.count == 4000)
        var received: [String] = []
        var lastSeq: Int?
        var resumeAfter: Int?
        while let line = try slow.readLine() {
            let message = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            let params = message["params"] as? [String: Any]
            if message["method"] as? String == "watch.overflow" {
                #expect(params?["reason"] as? String == "too_far_behind")
                resumeAfter = params?["resume_after"] as? Int
                continue
            }
            if let event = params?["event"] as? [String: Any], let id = event["id"] as? String {
                received.append(id)
                lastSeq = event["seq"] as? Int
            }
        }
        #expect(resumeAfter != nil, "the watcher was told")
        #expect(received.count < 3000, "the daemon queued at most its limit beyond what the socket holds")
        #expect(received == Array(appended.prefix(received.count)))
        #expect(resumeAfter == lastSeq)
        // Resuming with after gets the rest, in order, nothing missing or repeated.
        let resumed = try daemon.client()
        _ = try resumed.call("watch", #"{"after":\#(try #require(resumeAfter))}"#)
        var rest: [String] = []
        while rest.count < appended.count - received.count {
            let message = try resumed.readJSON()
            if let id = ((message["params"] as? [String: Any])?["event"] as? [String: Any])?["id"] as? String {
                rest.append(id)
            }
        }
        #expect(received + rest == appended)
        try daemon.stop()
    }
}
