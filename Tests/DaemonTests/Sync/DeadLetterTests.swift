@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// Dead letters that converge: replicated events held to the protocol's limit, dead letters
/// retried and dropped through the API, and peers that learn what became a dead letter.
@Suite("Dead letters converge")
struct DeadLetterTests {
    func sync(_ daemon: DaemonProcess, _ peer: String) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(peer)"}"#)
        return (result["peers"] as! [[String: Any]])[0]
    }

    func status(_ daemon: DaemonProcess) throws -> [String: Any] { try daemon.client().call("status") }

    func deadLetterCount(_ daemon: DaemonProcess) throws -> Int? {
        (try status(daemon)["needs_attention"] as? [String: Any])?["dead_letters"] as? Int
    }

    @Test("a 70 KB event from a node allowing 128 KiB reaches a node with the default: equal digests, no dead letter, a second session sends nothing")
    func differentEventLimits() throws {
        let a = try DaemonProcess(arguments: ["--node", "big", "--max-event-bytes", "131072"])
        let b = try DaemonProcess(arguments: ["--node", "small"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let blob = String(repeating: "x", count: 70_000)
        _ = try a.client().call(
            "append", eventsParams([#"{"entity":"doc/big","kind":"edit","fields":{"blob":"\#(blob)"}}"#]))
        // The same event appended on b itself is over b's own limit.
        let local = try b.client().failure(
            "append", eventsParams([#"{"entity":"doc/local","kind":"edit","fields":{"blob":"\#(blob)"}}"#]))
        #expect(local.reason == "too_large")
        let first = try sync(a, "unix://\(b.socketPath)")
        #expect(first["error"] is NSNull)
        #expect(first["sent"] as? Int == 1)
        #expect(first["dead_letters"] as? Int == 0)
        #expect(try deadLetterCount(b) == 0)
        let got = try b.client().call("get", #"{"entity":"doc/big"}"#)
        #expect((got["fields"] as? [String: String])?["blob"]?.count == 70_000)
        #expect(try status(a)["digest"] as? String == status(b)["digest"] as? String)
        let second = try sync(a, "unix://\(b.socketPath)")
        #expect(second["error"] is NSNull)
        #expect(second["sent"] as? Int == 0 && second["received"] as? Int == 0)
        #expect(second["skipped"] as? Int == 0)
    }

    /// `count` letters and digits in a pseudo-random order (xorshift, 6 bits a letter), so
    /// that zstd leaves megabytes of them, as of a real document.
    static func letters(_ count: Int) -> [UInt8] {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 10)
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        while bytes.count < count {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            var word = state
            for _ in 0..<10 {
                bytes.append(alphabet[Int(word & 63)])
                word >>= 6
            }
        }
        return Array(bytes.prefix(count))
    }

    @Test(
        "near the protocol's 16 MiB limit: an event just under it crosses from a node allowing it to one with the default and converges; one just over is refused whole; both nodes serve on"
    )
    func nearTheReplicatedLimit() throws {
        let limit = StoreOptions.absoluteMaxEventBytes
        let a = try DaemonProcess(arguments: [
            "--node", "big", "--max-event-bytes", "\(limit)", "--max-line-bytes", "\(limit + (1 << 20))",
        ])
        let b = try DaemonProcess(arguments: ["--node", "small"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        // The stored event is the blob and about 150 bytes around it: under the limit by a
        // few hundred bytes.
        let letters = DeadLetterTests.letters(limit)
        let blob = String(decoding: letters.prefix(limit - 512), as: UTF8.self)
        let appended = try a.client().call(
            "append", eventsParams([#"{"entity":"doc/big","kind":"edit","fields":{"blob":"\#(blob)"}}"#]))
        #expect((appended["ids"] as? [String])?.count == 1)
        let first = try sync(a, "unix://\(b.socketPath)")
        #expect(first["error"] is NSNull, "\(first)")
        #expect(first["sent"] as? Int == 1)
        #expect(first["dead_letters"] as? Int == 0)
        #expect(try deadLetterCount(b) == 0)
        let got = try b.client().call("get", #"{"entity":"doc/big"}"#)
        // Its length here, its bytes by the digest (comparing 16 MiB strings bridged from
        // Foundation would take seconds).
        #expect((got["fields"] as? [String: String])?["blob"]?.utf8.count == limit - 512)
        #expect(try status(a)["digest"] as? String == status(b)["digest"] as? String)

        // One byte over the limit, from a peer: the batch is refused whole, nothing of it is
        // stored, and no dead letter stands for it (a record that long is not an event).
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            let head = Array(#"{"entity":"doc/over","kind":"edit","origin":"\#(peer.node)","fields":{"blob":""#.utf8)
            let tail = Array(#""}}"#.utf8)
            let json = head + letters.prefix(limit + 1 - head.count - tail.count) + tail
            #expect(json.count == limit + 1)
            let small = peer.event(peer.id(1), "doc/small", status: "ok")
            let events = [
                ReplicatedEvent(id: small.0, json: Array(small.1.utf8)), ReplicatedEvent(id: peer.id(2), json: json),
            ]
            try channel.write(Frame(kind: .batch, payload: try BatchCodec.encode(events, compressor: Compressor())))
            _ = try? channel.read()
        }
        let result = try b.client().call("sync", #"{"peer":"\#(peer.url)"}"#)
        peer.finish()
        let over = try #require((result["peers"] as? [[String: Any]])?.first)
        #expect((over["error"] as? [String: Any])?["reason"] as? String == "corrupt_batch", "\(over)")
        #expect(try status(b)["events"] as? Int == 1)
        #expect(try deadLetterCount(b) == 0)
        #expect(try b.client().failure("get", #"{"entity":"doc/small"}"#).reason == "not_found")
        // Both serve on: appends and reads on each.
        for daemon in [a, b] {
            _ = try daemon.client().call(
                "append", eventsParams([#"{"entity":"job/after","kind":"status","status":"assigned"}"#]))
            #expect(try status(daemon)["events"] as? Int == 2)
        }
        #expect(try sync(a, "unix://\(b.socketPath)")["error"] is NSNull)
        #expect(try status(a)["digest"] as? String == status(b)["digest"] as? String)
    }

    /// A scripted peer that sends `events` (id, JSON) in one batch and says done.
    func send(_ daemon: DaemonProcess, _ events: [(ULID, String)]) throws -> [String: Any] {
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            try channel.write(try peer.batch(events))
            _ = try channel.read()
            try channel.write(
                Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: events.count, reconciled: 0))))
        }
        defer { peer.finish() }
        return try sync(daemon, peer.url)
    }

    func writeConfig(_ path: String, skew: Int) throws {
        try #"{"max_clock_skew_s":\#(skew)}"#.write(toFile: path, atomically: true, encoding: .utf8)
    }

    @Test("foreign_own_origin dead letters: retried after a SIGHUP raising max_clock_skew_s and stored; one dropped and skipped when offered again; one still invalid stays")
    func retryAfterReload() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try writeConfig(config, skew: 60)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let node = try #require((try status(daemon)["node"] as? [String: Any])?["id"] as? String)
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        // Under this node's own origin, 2 hours ahead (twice) and 1,000 days ahead.
        let retried = ULID(timestamp: now + 7_200_000, random: (1, 1))
        let dropped = ULID(timestamp: now + 7_200_000, random: (2, 2))
        let far = ULID(timestamp: now + 1000 * 86_400_000, random: (3, 3))
        func own(_ entity: String) -> String {
            #"{"entity":"\#(entity)","kind":"status","origin":"\#(node)","status":"assigned"}"#
        }
        let events = [(retried, own("job/retried")), (dropped, own("job/dropped")), (far, own("job/far"))]
        let outcome = try send(daemon, events)
        #expect(outcome["error"] is NSNull && outcome["dead_letters"] as? Int == 3, "\(outcome)")
        #expect(try deadLetterCount(daemon) == 3)
        let letters = try #require(try client.call("dead_letters")["dead_letters"] as? [[String: Any]])
        let droppedKey = try #require(letters.first { $0["id"] as? String == dropped.description }?["key"] as? String)

        // Before the reload the event still fails, and stays.
        let early = try client.call("dead_letters.retry", #"{"ids":["\#(retried)"]}"#)
        #expect((early["stored"] as? [String])?.isEmpty == true)
        let earlyReason = (early["still_invalid"] as? [[String: Any]])?.first?["reason"] as? String
        #expect(earlyReason == "foreign_own_origin", "\(early)")

        try writeConfig(config, skew: 86_400)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while (try status(daemon)["clock"] as? [String: Any])?["max_skew_ms"] as? Int != 86_400_000 {
            guard Date() < deadline else { Issue.record("the reload did not apply max_clock_skew_s"); return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let unknown = ULID(timestamp: 1_600_000_000_000, random: (9, 9))
        let watcher = try daemon.client()
        #expect(try watcher.call("watch", #"{"entity":"job/retried"}"#)["watching"] as? Bool == true)
        let answer = try client.call("dead_letters.retry", #"{"ids":["\#(retried)","\#(far)","\#(unknown)"]}"#)
        #expect(answer["stored"] as? [String] == [retried.description], "\(answer)")
        let stillInvalid = try #require(answer["still_invalid"] as? [[String: Any]])
        #expect(stillInvalid.count == 2)
        #expect(stillInvalid.first { $0["id"] as? String == far.description }?["reason"] as? String == "foreign_own_origin")
        #expect(stillInvalid.first { $0["id"] as? String == unknown.description }?["reason"] as? String == "not_found")
        // Stored as ingest stores it: the entity is there, the log has it with a seq.
        let got = try client.call("get", #"{"entity":"job/retried"}"#)
        #expect((got["status"] as? [String: Any])?["current"] as? String == "assigned")
        let log = try #require(try client.call("log")["events"] as? [[String: Any]])
        let stored = try #require(log.first { $0["id"] as? String == retried.description })
        #expect((stored["seq"] as? Int ?? 0) > 0)
        // Published to watchers, as a received event is.
        let note = try watcher.readJSON()
        let published = (note["params"] as? [String: Any])?["event"] as? [String: Any]
        #expect(note["method"] as? String == "event" && published?["id"] as? String == retried.description, "\(note)")
        #expect(published?["seq"] as? Int == stored["seq"] as? Int)
        #expect(try deadLetterCount(daemon) == 2)

        // Dropped by its key: gone, and the same event offered again is skipped, not kept again.
        let drop = try client.call("dead_letters.drop", #"{"ids":["\#(droppedKey)","\#(unknown)"]}"#)
        #expect(drop["dropped"] as? Int == 1)
        #expect(try deadLetterCount(daemon) == 1)
        let again = try send(daemon, [(dropped, own("job/dropped"))])
        #expect(again["error"] is NSNull && again["dead_letters"] as? Int == 0 && again["skipped"] as? Int == 1, "\(again)")
        #expect(try deadLetterCount(daemon) == 1)
        #expect(try client.failure("get", #"{"entity":"job/dropped"}"#).reason == "not_found")

        // The one still invalid stays, with its reason; dropped, the count is 0.
        let left = try #require(try client.call("dead_letters")["dead_letters"] as? [[String: Any]])
        #expect(left.count == 1 && left.first?["id"] as? String == far.description)
        #expect((left.first?["reason"] as? String)?.hasPrefix("foreign_own_origin: ") == true)
        #expect(try client.call("dead_letters.drop", #"{"ids":["\#(far)"]}"#)["dropped"] as? Int == 1)
        #expect(try deadLetterCount(daemon) == 0)
    }

    @Test("dead_letters.retry and .drop take 1 to 1000 ids; past that, or not ids, invalid_params")
    func idBounds() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        let many = (0..<1001).map { #""\#(ULID(timestamp: 1_600_000_000_000, random: (0, UInt64($0))))""# }
        for method in ["dead_letters.retry", "dead_letters.drop"] {
            let tooMany = try client.failure(method, #"{"ids":[\#(many.joined(separator: ","))]}"#)
            #expect(tooMany.code == -32602 && tooMany.message.contains("at most 1000"), "\(tooMany)")
            #expect(try client.failure(method, #"{"ids":[]}"#).code == -32602)
            #expect(try client.failure(method, #"{"ids":["job/1"]}"#).code == -32602)
            let atLimit = "{\"ids\":[\(many.dropLast().joined(separator: ","))]}"
            _ = try client.call(method, atLimit)
        }
    }

    func pending(_ daemon: DaemonProcess, for peer: String) throws -> Int? {
        let peers = try status(daemon)["peers"] as? [[String: Any]] ?? []
        return peers.first { $0["name"] as? String == peer }?["pending"] as? Int
    }

    @Test("an event the peer dead-lettered is pending for it, and not sent again; once the peer retried it and they synced, pending is 0")
    func pendingCountsDeadLetters() throws {
        let a = try DaemonProcess(arguments: ["--node", "a", "--sync-interval-s", "3600"])
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try writeConfig(config, skew: 60)
        let b = try DaemonProcess(root: root, arguments: ["--config", config, "--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        let bNode = try #require((try status(b)["node"] as? [String: Any])?["id"] as? String)
        // a holds an event under b's origin 2 hours ahead (imported: another origin to a),
        // which b refuses as foreign_own_origin while its max_clock_skew_s is 60.
        let ahead = ULID(timestamp: UInt64(Date().timeIntervalSince1970 * 1000) + 7_200_000, random: (4, 4))
        _ = try a.client().call(
            "import",
            eventsParams([#"{"entity":"job/ahead","id":"\#(ahead)","kind":"status","origin":"\#(bNode)","status":"x"}"#]))
        _ = try a.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"assigned"}"#]))
        _ = try a.client().call("peers.add", #"{"name":"b","url":"unix://\#(b.socketPath)"}"#)
        let first = try sync(a, "b")
        #expect(first["error"] is NSNull, "\(first)")
        #expect(try deadLetterCount(b) == 1)
        #expect(try pending(a, for: "b") == 1)
        // Per item: the dead-lettered entity has failed to reach b, the other reached it.
        #expect(try itemSync(a, "job/ahead")["b"] == "failed")
        #expect(try itemSync(a, "job/1")["b"] == "synced")
        // The next session sends nothing: b's hello lists the dead letter.
        let quiet = try sync(a, "b")
        #expect(quiet["error"] is NSNull && quiet["sent"] as? Int == 0, "\(quiet)")
        #expect(try pending(a, for: "b") == 1)
        // Kept with the vector in state/b: still pending after a restart of a.
        try a.stop()
        let restarted = try DaemonProcess(root: a.root, arguments: ["--node", "a", "--sync-interval-s", "3600"])
        defer { restarted.removeFiles() }
        #expect(try pending(restarted, for: "b") == 1)

        // Made valid on b and retried there: stored; a learns it at the next session.
        try writeConfig(config, skew: 86_400)
        b.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while (try status(b)["clock"] as? [String: Any])?["max_skew_ms"] as? Int != 86_400_000 {
            guard Date() < deadline else { Issue.record("the reload did not apply max_clock_skew_s"); return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let retry = try b.client().call("dead_letters.retry", #"{"ids":["\#(ahead)"]}"#)
        #expect(retry["stored"] as? [String] == [ahead.description], "\(retry)")
        #expect(try deadLetterCount(b) == 0)
        let after = try sync(restarted, "b")
        #expect(after["error"] is NSNull && after["sent"] as? Int == 0, "\(after)")
        #expect(try pending(restarted, for: "b") == 0)
        #expect(try itemSync(restarted, "job/ahead")["b"] == "synced")
        #expect(try status(restarted)["digest"] as? String == status(b)["digest"] as? String)
    }

    /// `get` with `sync: true`: per peer, synced, pending or failed.
    private func itemSync(_ daemon: DaemonProcess, _ entity: String) throws -> [String: String] {
        try daemon.client().call("get", #"{"entity":"\#(entity)","sync":true}"#)["sync"] as? [String: String] ?? [:]
    }

    @Test("the new hello and ack members are optional both ways: left out when nil, unknown members ignored")
    func compatibleMessages() throws {
        // A previous release's hello and ack decode, with nothing known of dead letters.
        let old = #"{"clock":1,"name":"van-7","node":"01M8KX60XQ9QZ6TBERPGCC148Z","protocol":1,"vector":{}}"#
        let hello = try Messages.decode(Messages.Hello.self, Array(old.utf8), frame: "hello")
        #expect(try hello.decodedDeadLetters() == nil && hello.deadLettersCut == nil)
        let ack = try Messages.decode(
            Messages.Ack.self, Array(#"{"dead_letters":0,"received":2,"skipped":0}"#.utf8), frame: "ack")
        #expect(ack.deadLettered == nil)
        // Members a later release may add are ignored.
        let later = #"{"node":"01M8KX60XQ9QZ6TBERPGCC148Z","protocol":1,"vector":{},"dead_letters":[],"future":{"x":1}}"#
        #expect(try Messages.decode(Messages.Hello.self, Array(later.utf8), frame: "hello").deadLetters == [])
        // Without dead letters to tell, the frames are byte for byte what the previous release sent.
        let plain = Messages.Ack(received: 2, skipped: 0, deadLetters: 0)
        #expect(String(decoding: Messages.encode(plain), as: UTF8.self) == #"{"dead_letters":0,"received":2,"skipped":0}"#)
        var listed = hello
        listed.deadLetters = ["01M8KX60XQ9QZ6TBERPGCC148Z"]
        let text = String(decoding: Messages.encode(listed), as: UTF8.self)
        #expect(text.contains(#""dead_letters":["01M8KX60XQ9QZ6TBERPGCC148Z"]"#) && !text.contains("dead_letters_cut"))
        // A list past the bound, or holding something else than ids, ends the session.
        listed.deadLetters = ["not an id"]
        #expect(throws: SyncError.self) { try listed.decodedDeadLetters() }
    }
}

