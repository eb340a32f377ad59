import EventStore
import Foundation
import Projections
import Testing

@testable import Daemon

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
            let result = try log.commit([.append([input])], keepStored: true)
            if case .failure(let error) = result.outcomes[0] { Issue.record("\(error)") }
            stored += result.stored
        }
        #expect(stored.count == inputs.count)
        // Two more events in the same entity, so bases (heads) show up in the payload.
        let more = try log.commit(
            [.append([try EventCodec.decodeInput(Array(NotificationJSONTests.inputs[0].utf8))])], keepStored: true)
        stored += more.stored
        let page = try log.feed(after: 0, limit: 100)
        for item in stored + page.events {
            let payload = try #require(item.payload)
            #expect(EventCodec.idPosition(inPayload: payload, hasKey: item.event.key != nil) != nil)
            let spliced = Methods.storedEventJSON(item)
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
