import Foundation
import Projections
import Synchronization
import Testing
import UnixSocket

@testable import Daemon
@testable import EventStore
@testable import Server
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
        var committed: [CommittedEvent] = []
        for input in inputs {
            let result = try log.commit([AppendJob([input])], keepStored: true)
            if case .failure(let error) = result.outcomes[0] { Issue.record("\(error)") }
            committed += result.stored
        }
        #expect(committed.count == inputs.count)
        // Two more events in the same entity, so bases (heads) show up in the payload.
        let more = try log.commit(
            [AppendJob([try EventCodec.decodeInput(Array(NotificationJSONTests.inputs[0].utf8))])], keepStored: true)
        committed += more.stored
        let page = try log.feed(after: 0, limit: 100)
        #expect(page.events.map(\.seq) == committed.map(\.seq))
        for (item, kept) in zip(page.events, committed) {
            let payload = try #require(item.payload)
            // What the commit kept is what the log holds, in a buffer of its size: a
            // watcher's queue holds it and counts it at its size on the wire.
            #expect(kept.payload == payload && kept.id == item.event.id && kept.entity == item.event.entity)
            #expect(
                kept.payload.capacity <= kept.payload.count + 64,
                "seq \(item.seq): \(kept.payload.capacity) bytes held for \(kept.payload.count)")
            #expect(kept.hasKey == (item.event.key != nil))
            #expect(EventCodec.idPosition(inPayload: payload, hasKey: item.event.key != nil) != nil)
            // The writer encoded it, and kept where the id goes: where the search finds it.
            #expect(kept.idPosition != nil)
            #expect(kept.idPosition == EventCodec.idPosition(inPayload: payload, hasKey: item.event.key != nil))
            let spliced = EventJSON.stored(item)
            var encoded: [UInt8] = []
            EventCodec.encodeStored(item.event, includeID: true, into: &encoded)
            encoded.removeLast()
            encoded += Array(#","seq":\#(item.seq)}"#.utf8)
            #expect(
                String(decoding: spliced, as: UTF8.self) == String(decoding: encoded, as: UTF8.self),
                "seq \(item.seq)")
            // Queued as a reference to the payload, it makes the same notification, at the
            // size it was queued at, whatever the width of the seq.
            for seq in [item.seq, 9, 10, 999_999, 1_000_000, UInt64(Int.max), UInt64.max] {
                var other = kept
                other.seq = seq
                let notification = Notification(other)
                guard case .spliced = notification else {
                    Issue.record("seq \(seq): not made from the payload")
                    continue
                }
                var made: [UInt8] = []
                notification.append(to: &made)
                #expect(made == WatchHub.notification(SequencedEvent(seq: seq, event: item.event)), "seq \(seq)")
                #expect(notification.count == made.count, "seq \(seq)")
            }
        }
        // A payload whose id's place is not found (the canonical order broken: `kind` moved
        // first) is decoded and encoded at once: the same notification.
        let first = page.events[0]
        var odd = committed[0]
        let text = String(decoding: odd.payload, as: UTF8.self)
        #expect(text.contains(#","kind":"edit""#))
        odd.payload = Array(
            text.replacingOccurrences(of: #","kind":"edit""#, with: "").replacingOccurrences(
                of: "{", with: #"{"kind":"edit","#, options: .anchored
            ).utf8)
        // A payload the writer did not encode comes without the id's place.
        odd.idPosition = nil
        if case .encoded(let bytes) = Notification(odd) {
            #expect(bytes == WatchHub.notification(SequencedEvent(seq: odd.seq, event: first.event)))
        } else {
            Issue.record("a payload without the id's place was not encoded at once")
        }
        // One that does not decode either is sent as it is, with the id and seq after it.
        odd.payload = Array(#"{"kind":"unknown-kind","x":1}"#.utf8)
        guard case .encoded(let bytes) = Notification(odd) else {
            Issue.record("an undecodable payload was not encoded at once")
            return
        }
        let line = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        let event = try #require((line["params"] as? [String: Any])?["event"] as? [String: Any])
        #expect(event["id"] as? String == odd.id.description && event["seq"] as? Int == Int(odd.seq))
        #expect(event["kind"] as? String == "unknown-kind" && event["x"] as? Int == 1)
    }

    /// A watch's catch-up and `log` read events back as stored, not decoded: whether one
    /// has a key is read from its payload, and the JSON made from it is the event's
    /// encoding, for every input above and for objects whose last member is a `key`.
    @Test func readBackAsStoredEqualsEncoded() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evnotify-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = try EventLog.open(directory: directory)
        let inputs =
            NotificationJSONTests.inputs + [
                // A `key` last in an object just before where the event's own would be.
                #"{"entity":"job/5","kind":"edit","fields":{"a":1,"key":"v"}}"#,
                #"{"entity":"job/5","kind":"edit","fields":{"a":1,"key":"v"},"key":"own"}"#,
                #"{"entity":"job/6","kind":"edit","fields":{"key":"a\\"},"key":"b\\"}"#,
                #"{"entity":"job/6","kind":"edit","fields":{"key":"\",\"kind\":\""}}"#,
                #"{"entity":"job/7","kind":"add","set":"parts","element":{"key":"x"}}"#,
            ]
        for input in inputs {
            let result = try log.commit([AppendJob([try EventCodec.decodeInput(Array(input.utf8))])])
            if case .failure(let error) = result.outcomes[0] { Issue.record("\(input): \(error)") }
        }
        let page = try log.feed(after: 0, limit: 100)
        let stored = try log.storedFeed(after: 0, limit: 100)
        #expect(page.events.count == inputs.count)
        #expect(stored.events.map { $0.seq } == page.events.map { $0.seq } && stored.next == page.next)
        #expect(page.events.contains { $0.event.key != nil } && page.events.contains { $0.event.key == nil })
        for (item, read) in zip(page.events, stored.events) {
            #expect(read.id == item.event.id && read.payload == item.payload)
            #expect(
                EventCodec.idPosition(inPayload: read.payload)
                    == EventCodec.idPosition(inPayload: read.payload, hasKey: item.event.key != nil),
                "seq \(item.seq): \(String(decoding: read.payload, as: UTF8.self))")
            var made: [UInt8] = []
            try EventJSON.stored(read, into: &made)
            var encoded: [UInt8] = []
            EventCodec.encodeStored(item.event, includeID: true, into: &encoded)
            encoded.removeLast()
            encoded += Array(#","seq":\#(item.seq)}"#.utf8)
            #expect(String(decoding: made, as: UTF8.self) == String(decoding: encoded, as: UTF8.self))
            let notification = try Notification(read)
            guard case .spliced = notification else {
                Issue.record("seq \(item.seq): not made from the payload")
                continue
            }
            var line: [UInt8] = []
            notification.append(to: &line)
            #expect(line == WatchHub.notification(SequencedEvent(seq: item.seq, event: item.event)))
            #expect(notification.count == line.count)
        }
        // Filtered by origin or type, the events are decoded to be matched: the same pages.
        let origin = page.events[0].event.origin
        for filter in [
            FeedFilter(type: "job"), FeedFilter(type: "other"), FeedFilter(origin: origin),
            FeedFilter(origin: ULID(timestamp: 1_600_000_000_000, random: (9, 9))),
            FeedFilter(entity: page.events[4].event.entity),
        ] {
            let decoded = try log.feed(after: 2, limit: 3, filter: filter)
            let read = try log.storedFeed(after: 2, limit: 3, filter: filter)
            #expect(read.events.map { $0.seq } == decoded.events.map { $0.seq }, "\(filter)")
            #expect(read.next == decoded.next && read.head == decoded.head, "\(filter)")
        }
        // A record damaged so that it is no longer JSON is `corrupt` to a read that passes
        // it on, as to one that decodes it.
        let damaged = try #require(stored.events.first)
        var bytes = damaged.payload
        bytes.removeLast()
        #expect(throws: EventStoreError.self) { try log.checkStructure(bytes, id: damaged.id) }
        #expect(throws: EventStoreError.self) { try log.checkStructure(Array("[1]".utf8), id: damaged.id) }
        try log.checkStructure(damaged.payload, id: damaged.id)
        // A payload that neither has the id's place nor decodes is `corrupt`, as a decoded
        // read of it would be.
        let broken = StoredEvent(
            seq: 1, id: ULID(timestamp: 1_600_000_000_000, random: (9, 9)),
            payload: Array(#"{"kind":"unknown-kind","x":1}"#.utf8))
        #expect(throws: EventStoreError.self) { try Notification(broken) }
        var out: [UInt8] = []
        #expect(throws: EventStoreError.self) { try EventJSON.stored(broken, into: &out) }
    }

    /// The writer queues a commit's notifications as references to the payloads; the thread
    /// that writes them makes the bytes, a socket's worth at a time, with the outbox's lock
    /// let go. A client reading slowly gets every one, whole and in order, and the outbox
    /// counts exactly the bytes the socket took.
    @Test func notificationsMadeByTheSenderArriveWhole() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evnotify-\(UUID().uuidString.prefix(8))"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = try EventLog.open(directory: directory)
        var stored: [CommittedEvent] = []
        for batch in 0..<8 {
            let inputs = try (0..<500).map { index in
                let n = batch * 500 + index
                return try EventCodec.decodeInput(
                    Array(
                        #"{"entity":"job/\#(n % 37)","kind":"edit","fields":{"n":\#(n),"pad":"\#(String(repeating: "y", count: n % 300))"}}"#
                            .utf8))
            }
            stored += try log.commit([AppendJob(inputs)], keepStored: true).stored
        }
        #expect(stored.count == 4000)
        let (server, client) = try UnixConnection.pair()
        let outbox = Outbox(
            socket: server, notificationLimit: 10_000, byteLimit: 64 << 20, notificationByteLimit: 64 << 20)
        let sender = startFlusher(outbox)
        let page = try log.feed(after: 0, limit: 10_000)
        #expect(page.events.map(\.seq) == stored.map(\.seq))
        let expected = page.events.map {
            String(
                decoding: WatchHub.notification(SequencedEvent(seq: $0.seq, event: $0.event)).dropLast(), as: UTF8.self)
        }
        let received = Mutex<[String]>([])
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var reader = LineReader(limit: 1 << 20)
            while received.withLock({ $0.count }) < expected.count {
                guard
                    case .line(let bytes) = try? reader.next(reading: { buffer, n in
                        try client.read(into: &buffer, count: min(n, 4096))
                    })
                else { break }
                let count = received.withLock { received in
                    received.append(String(decoding: bytes, as: UTF8.self))
                    return received.count
                }
                if count % 500 == 0 { usleep(2000) }
            }
            finished.signal()
        }
        var queuedBytes = 0
        for start in stride(from: 0, to: stored.count, by: 250) {
            let parts = stored[start..<start + 250].map(Notification.init)
            #expect(parts.allSatisfy { if case .spliced = $0 { true } else { false } })
            queuedBytes += parts.reduce(0) { $0 + $1.count }
            #expect(outbox.offerNotifications(parts) == 250)
        }
        #expect(finished.wait(timeout: .now() + 60) == .success)
        let got = received.withLock { $0 }
        #expect(got == expected)
        #expect(outbox.written == queuedBytes)
        #expect(outbox.notificationBytes == 0)
        if got.count != expected.count || outbox.written != queuedBytes { outbox.abort() }
        outbox.finish()
        #expect(sender.wait(timeout: .now() + 10) == .success)
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
        let logLines = try log.map {
            String(decoding: try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]), as: UTF8.self)
        }
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
                got.append(
                    String(
                        decoding: try JSONSerialization.data(withJSONObject: event, options: [.sortedKeys]),
                        as: UTF8.self))
            }
            #expect(got == expected.map { logLines[$0] }, "watcher \(filter)")
        }
    }
}
