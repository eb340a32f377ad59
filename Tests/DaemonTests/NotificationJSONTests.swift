@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Server
import Testing
@testable import Wire
@testable import Writer

/// A notification (and a `log` page) is made from the payload the writer stored, with the
/// id put in its place: byte for byte what encoding the event again gives, whatever the
/// event holds.
@Suite("Notification JSON")
struct NotificationJSONTests {
    static let inputs = [
        #"{"entity":"job/1","kind":"edit","fields":{"address":"12 Main St"}}"#,
        // Nested objects whose keys are those the id goes between.
        #"{"entity":"job/1","kind":"edit","fields":{"meta":{"kind":"x","key":"y","id":"z"},"list":[{"kind":1}]},"key":"k-1"}"#,
        #"{"entity":"job/2","kind":"edit","fields":{"note":"a \",\"kind\":\" b"},"by":"tech \"7\"","key":",\"key\":\""}"#,
        #"{"entity":"job/2","kind":"status","status":",\"kind\":\"done","at":"2026-12-01T10:00:00Z"}"#,
        #"{"entity":"job/3","kind":"add","set":"parts","element":{"kind":"valve"}}"#,
        #"{"entity":"job/3","kind":"remove","set":"parts","element":{"kind":"valve"},"key":"rm"}"#,
        #"{"entity":"job/4","kind":"delete"}"#,
        #"{"entity":"job/4","kind":"restore","by":"x"}"#,
    ]

    @Test func splicedFromThePayloadEqualsEncoded() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evnotify-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = try EventLog.open(directory: directory)
        let inputs = try NotificationJSONTests.inputs.map { try EventCodec.decodeInput(Array($0.utf8)) }
        // One request per input: a later one builds on the state an earlier one made.
        var stored: [SequencedEvent] = []
        for input in inputs {
            let result = try log.commit([AppendJob([input])], keepStored: true)
            if case .failure(let error) = result.outcomes[0] { Issue.record("\(error)") }
            stored += result.stored
        }
        #expect(stored.count == inputs.count)
        // Two more events in the same entity, so bases (heads) show up in the payload.
        let more = try log.commit(
            [AppendJob([try EventCodec.decodeInput(Array(NotificationJSONTests.inputs[0].utf8))])], keepStored: true)
        stored += more.stored
        let page = try log.feed(after: 0, limit: 100)
        for item in stored + page.events {
            let payload = try #require(item.payload)
            #expect(EventCodec.idPosition(inPayload: payload, hasKey: item.event.key != nil) != nil)
            let spliced = EventJSON.stored(item)
            var encoded: [UInt8] = []
            EventCodec.encodeStored(item.event, includeID: true, into: &encoded)
            encoded.removeLast()
            encoded += Array(#","seq":\#(item.seq)}"#.utf8)
            #expect(
                String(decoding: spliced, as: UTF8.self) == String(decoding: encoded, as: UTF8.self),
                "seq \(item.seq)")
        }
    }
}

/// Several watchers of one commit: each gets exactly the events it asked for, in seq order,
/// each notification the same bytes as the event in `log`.
@Suite("Notifications to several watchers")
struct SeveralWatchersTests {
    @Test func eachWatcherGetsItsEventsAsLogHasThem() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let filters = ["{}", #"{"type":"job"}"#, #"{"entity":"job/2"}"#, "{}"]
        let watchers = try filters.map { filter -> RPCClient in
            let client = try daemon.client()
            _ = try client.call("watch", filter)
            return client
        }
        // One request of 60 events over three types: one commit, one publish.
        let events = (0..<60).map { n -> String in
            let entity = ["job/\(n % 4)", "site/\(n % 3)", "van/1"][n % 3]
            return n % 2 == 0
                ? #"{"entity":"\#(entity)","kind":"edit","fields":{"n":\#(n),"meta":{"kind":"x"}}}"#
                : #"{"entity":"\#(entity)","kind":"status","status":"s\#(n)","key":"k\#(n)"}"#
        }
        _ = try daemon.client().call("append", #"{"events":[\#(events.joined(separator: ","))]}"#)
        let log = try #require(try daemon.client().call("log", #"{"limit":1000}"#)["events"] as? [[String: Any]])
        #expect(log.count == 60)
        let logLines = try log.map { String(decoding: try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]), as: UTF8.self) }
        func wanted(_ filter: String) -> [Int] {
            log.indices.filter { index in
                let entity = log[index]["entity"] as? String ?? ""
                if filter.contains("type") { return entity.hasPrefix("job/") }
                if filter.contains("entity") { return entity == "job/2" }
                return true
            }
        }
        for (watcher, filter) in zip(watchers, filters) {
            let expected = wanted(filter)
            var got: [String] = []
            for _ in expected {
                let message = try watcher.readJSON()
                #expect(message["method"] as? String == "event")
                let event = try #require((message["params"] as? [String: Any])?["event"] as? [String: Any])
                got.append(String(decoding: try JSONSerialization.data(withJSONObject: event, options: [.sortedKeys]), as: UTF8.self))
            }
            #expect(got == expected.map { logLines[$0] }, "watcher \(filter)")
        }
    }
}
