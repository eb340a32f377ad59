import Projections
import Synchronization
import TestSupport
import Testing

@testable import JetStream
@testable import NATSBridge

/// What the bridge reads from the daemon's watch, and how far it may acknowledge.
@Suite("The bridge's feed and confirmations")
struct FeedLineTests {
    static func notification(_ event: String) -> [UInt8] {
        Array(#"{"jsonrpc":"2.0","method":"event","params":{"event":\#(event)}}"#.utf8)
    }

    @Test(
        "an event's body is its canonical JSON without seq, whatever its values",
        arguments: [
            #"{"entity":"job/1","id":"01M8TVP1NE3V7V7Y557R797HN2","kind":"status","origin":"01M8TVNYPY649YV7K22W584XK7","status":"done"}"#,
            #"{"base":{"a":["01M8TVP1NE3V7V7Y557R797HN2"]},"by":"ana","entity":"site/a/b","fields":{"a":{"seq":1,"x":[1,{"seq":2}]},"z":"\"seq\":3}"},"id":"01M8TVP1NE3V7V7Y557R797HN3","kind":"edit","origin":"01M8TVNYPY649YV7K22W584XK7"}"#,
            #"{"entity":"w_x-9/ü","id":"01M8TVP1NE3V7V7Y557R797HN4","kind":"add","origin":"01M8TVNYPY649YV7K22W584XK7","set":"s","element":null}"#,
        ])
    func bodyWithoutSeq(event: String) throws {
        let stored = String(event.dropLast()) + #","seq":4711}"#
        guard case .event(let parsed) = try FeedLine.parse(FeedLineTests.notification(stored)) else {
            Issue.record("not an event")
            return
        }
        #expect(parsed.seq == 4711)
        #expect(String(decoding: parsed.body, as: UTF8.self) == event)
        let object = try #require(try JSONTree.parse(Array(event.utf8)) as? [String: Any])
        #expect(parsed.id == object["id"] as? String && parsed.origin == object["origin"] as? String)
        let entity = try #require(object["entity"] as? String)
        #expect(parsed.type == String(entity.prefix { $0 != "/" }))
    }

    @Test("seq where canonical order puts it, or first: cut out with its comma")
    func seqAnywhere() throws {
        let members = [
            #""entity":"job/1""#, #""id":"01M8TVP1NE3V7V7Y557R797HN2""#, #""kind":"status""#,
            #""origin":"01M8TVNYPY649YV7K22W584XK7""#, #""status":"done""#,
        ]
        for place in 0...members.count {
            var withSeq = members
            withSeq.insert(#""seq":12"#, at: place)
            let line = Self.notification("{" + withSeq.joined(separator: ",") + "}")
            guard case .event(let parsed) = try FeedLine.parse(line) else {
                Issue.record("not an event")
                continue
            }
            #expect(parsed.seq == 12)
            #expect(String(decoding: parsed.body, as: UTF8.self) == "{" + members.joined(separator: ",") + "}")
        }
        // `params` before `method`: read once the method is known.
        let event = #"{"entity":"job/1","id":"I","kind":"delete","origin":"O","seq":3}"#
        let reordered = Array(#"{"params":{"event":\#(event)},"jsonrpc":"2.0","method":"event"}"#.utf8)
        guard case .event(let parsed) = try FeedLine.parse(reordered) else {
            Issue.record("not an event")
            return
        }
        #expect(parsed.seq == 3 && String(decoding: parsed.body, as: UTF8.self) == #"{"entity":"job/1","id":"I","kind":"delete","origin":"O"}"#)
        let overflow = #"{"params":{"resume_after":9},"method":"watch.overflow"}"#
        guard case .overflow(9) = try FeedLine.parse(Array(overflow.utf8)) else {
            Issue.record("not an overflow")
            return
        }
    }

    /// Events as the daemon writes them: every kind of value, escapes, nesting.
    static let daemonEvents = [
        #"{"entity":"job/1","id":"01M8TVP1NE3V7V7Y557R797HN2","kind":"status","origin":"01M8TVNYPY649YV7K22W584XK7","seq":1,"status":"done"}"#,
        #"{"base":{"a":["01M8TVP1NE3V7V7Y557R797HN2"]},"by":"ana","entity":"site/a/b","fields":{"a":{"seq":1,"x":[1,{"seq":2}]},"n":-0.5e+3,"t":true,"u":null,"v":false,"w":[],"y":{},"z":"\"seq\":3}\\ \u00e9\n"},"id":"01M8TVP1NE3V7V7Y557R797HN3","kind":"edit","origin":"01M8TVNYPY649YV7K22W584XK7","seq":18446744073709551615}"#,
        #"{"amount":-9223372036854775808,"counter":"parts","entity":"job/9","id":"01M8TVP1NE3V7V7Y557R797HN4","kind":"incr","origin":"01M8TVNYPY649YV7K22W584XK7","seq":0}"#,
        #"{"entity":"job/2","fields":{"entity":"z/w","id":"x","origin":"y","seq":5},"id":"01M8TVP1NE3V7V7Y557R797HN5","key":"k\"1","kind":"edit","origin":"01M8TVNYPY649YV7K22W584XK7","seq":77}"#,
    ]

    static func same(_ a: FeedEvent, _ b: FeedEvent) -> Bool {
        a.seq == b.seq && a.id == b.id && a.origin == b.origin && a.type == b.type && a.body == b.body
    }

    @Test("the daemon's notifications are read in one pass, as the full scanner reads them")
    func onePassAsScanned() throws {
        for event in Self.daemonEvents {
            let line = Self.notification(event)
            let fast = try #require(FeedEvent.readNotification(line), "\(event)")
            guard case .event(let scanned) = try FeedLine.scanned(line) else {
                Issue.record("not an event: \(event)")
                continue
            }
            #expect(Self.same(fast, scanned), "\(event)")
        }
        // What the one pass leaves to the scanner: whitespace, a key with an escape, an id
        // with one, text outside ASCII, a second seq, keys out of order.
        for event in [
            #"{"entity":"job/1", "id":"I","kind":"delete","origin":"O","seq":3}"#,
            #"{"entity":"job/1","i\u0064":"I","id":"I","kind":"delete","origin":"O","seq":3}"#,
            #"{"entity":"job/1","id":"I\u0031","kind":"delete","origin":"O","seq":3}"#,
            #"{"entity":"job/ü","id":"I","kind":"delete","origin":"O","seq":3}"#,
            #"{"entity":"job/1","id":"I","kind":"delete","origin":"O","seq":3,"seq":4}"#,
            #"{"entity":"job/1","id":"I","kind":"delete","origin":"O","fields":{"b":1,"a":2},"seq":3}"#,
            #"{"id":"I","entity":"job/1","kind":"delete","origin":"O","seq":3}"#,
        ] {
            #expect(FeedEvent.readNotification(Self.notification(event)) == nil, "\(event)")
        }
    }

    @Test(
        "a line changed at random is read in one pass only as the scanner reads it, or left to the scanner",
        arguments: [1, 2, 3] as [UInt64])
    func onePassNeverTakesWhatTheScannerRefuses(seed: UInt64) throws {
        var random = SeededGenerator(seed: seed)
        let alphabet = Array(#"{}[]":,\/-+.eE0123456789abfnrtuxyz "#.utf8) + [0x00, 0x1F, 0x7F, 0xC3]
        var taken = 0
        for round in 0..<20_000 {
            var line = Self.notification(Self.daemonEvents[round % Self.daemonEvents.count])
            for _ in 0...(random.next() % 3) {
                let at = Int(random.next() % UInt64(line.count))
                let byte = alphabet[Int(random.next() % UInt64(alphabet.count))]
                switch random.next() % 3 {
                case 0: line[at] = byte
                case 1: line.insert(byte, at: at)
                default: line.remove(at: at)
                }
            }
            guard let fast = FeedEvent.readNotification(line) else { continue }
            taken += 1
            let text = String(decoding: line, as: UTF8.self)
            guard case .event(let scanned) = try FeedLine.scanned(line) else {
                Issue.record("read in one pass, not an event to the scanner: \(text)")
                continue
            }
            #expect(Self.same(fast, scanned), "\(text)")
        }
        // Most changes break the line; some leave one that reads.
        #expect(taken > 100)
    }

    @Test("whitespace between members is encoded again, canonically")
    func nonCanonicalInputIsEncodedAgain() throws {
        let line = Self.notification(
            #"{ "seq": 3, "origin":"O", "kind":"delete", "id":"I", "entity":"job/1" }"#)
        guard case .event(let parsed) = try FeedLine.parse(line) else {
            Issue.record("not an event")
            return
        }
        #expect(
            String(decoding: parsed.body, as: UTF8.self) == #"{"entity":"job/1","id":"I","kind":"delete","origin":"O"}"#
        )
    }

    @Test("overflow, replies, other notifications, and lines that are not the daemon's")
    func otherLines() throws {
        let overflow =
            #"{"jsonrpc":"2.0","method":"watch.overflow","params":{"reason":"too_far_behind","message":"m","resume_after":42}}"#
        guard case .overflow(let resume) = try FeedLine.parse(Array(overflow.utf8)) else {
            Issue.record("not an overflow")
            return
        }
        #expect(resume == 42)
        guard
            case .reply(let id, nil) = try FeedLine.parse(
                Array(#"{"jsonrpc":"2.0","id":1,"result":{"watching":true}}"#.utf8))
        else {
            Issue.record("not a reply")
            return
        }
        #expect(id == 1)
        let refused =
            #"{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"no consumer","data":{"reason":"not_found"}}}"#
        guard case .reply(_, let error?) = try FeedLine.parse(Array(refused.utf8)) else {
            Issue.record("not an error")
            return
        }
        #expect(error.contains("not_found"))
        guard case .other = try FeedLine.parse(Array(#"{"jsonrpc":"2.0","method":"ping","params":{}}"#.utf8)) else {
            Issue.record("not other")
            return
        }
        for bad in ["<html>", #"{"jsonrpc":"2.0","method":"event","params":{"event":{"seq":1}}}"#, "{"] {
            #expect(throws: JSONError.self) { try FeedLine.parse(Array(bad.utf8)) }
        }
    }

    static func ack(_ tag: UInt64, duplicate: Bool = false) -> PublishResult {
        PublishResult(tag: tag, outcome: .success(PublishAck(stream: "S", sequence: tag, duplicate: duplicate)))
    }

    @Test(
        "confirmed moves over runs of acknowledged publishes only, in any order of acknowledgements",
        arguments: [UInt64(1), 2, 3, 4, 5])
    func confirmationsFollowTheGaplessPrefix(seed: UInt64) {
        var rng = SeededGenerator(seed: seed)
        let confirmations = Confirmations(confirmed: 10) { _ in Issue.record("no failure here") }
        let seqs = (11...6000).map(UInt64.init).filter { $0 % 7 != 0 }  // seqs need not be consecutive
        for seq in seqs { confirmations.published(seq) }
        var order = seqs
        order.shuffle(using: &rng)
        var acknowledged: Set<UInt64> = []
        for seq in order {
            confirmations.complete(FeedLineTests.ack(seq, duplicate: seq % 3 == 0))
            acknowledged.insert(seq)
            let expected = seqs.prefix { acknowledged.contains($0) }.last ?? 10
            if seq % 97 == 0 { #expect(confirmations.confirmed == expected) }
        }
        #expect(confirmations.confirmed == seqs.last)
        #expect(confirmations.counts.published == seqs.count)
        #expect(confirmations.counts.duplicates == seqs.filter { $0 % 3 == 0 }.count)
    }

    @Test("a failed publish holds confirmed before it and is reported once")
    func aFailureHoldsConfirmed() {
        let failures = FailureBox()
        let confirmations = Confirmations(confirmed: 0) { failures.add($0) }
        for seq in UInt64(1)...5 { confirmations.published(seq) }
        confirmations.complete(FeedLineTests.ack(1))
        let refused = NATSError(code: .timeout, operation: "publish", message: "no acknowledgement")
        confirmations.complete(PublishResult(tag: 2, outcome: .failure(refused)))
        confirmations.complete(PublishResult(tag: 4, outcome: .failure(refused)))
        for seq in UInt64(3)...5 { confirmations.complete(FeedLineTests.ack(seq)) }
        #expect(confirmations.confirmed == 1)
        #expect(confirmations.failure?.code == .timeout)
        #expect(failures.count == 1)
    }
}

final class FailureBox: Sendable {
    private let errors = Mutex<[NATSError]>([])
    func add(_ error: NATSError) { errors.withLock { $0.append(error) } }
    var count: Int { errors.withLock { $0.count } }
}
