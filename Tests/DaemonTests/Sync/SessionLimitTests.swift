@testable import Daemon
import EventStore
import Foundation
@testable import Lifecycle
import Projections
@testable import Replication
@testable import Server
import Synchronization
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// The largest resident set of a process while it is sampled, from /proc/PID/status.
final class PeakMemory: @unchecked Sendable {
    private let pid: Int32
    private let peak = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let stopped = DispatchSemaphore(value: 0)

    init(pid: Int32) {
        self.pid = pid
        DispatchQueue.global().async { [self] in
            while !stopping.load(ordering: .relaxed) {
                if let bytes = PeakMemory.residentBytes(of: pid) {
                    peak.store(max(peak.load(ordering: .relaxed), bytes), ordering: .relaxed)
                }
                Thread.sleep(forTimeInterval: 0.05)
            }
            stopped.signal()
        }
    }

    /// Stops sampling; the peak in bytes.
    func stop() -> Int {
        stopping.store(true, ordering: .relaxed)
        stopped.wait()
        return max(peak.load(ordering: .relaxed), PeakMemory.residentBytes(of: pid) ?? 0)
    }

    static func residentBytes(of pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
        else { return nil }
        return line.split(separator: " ").compactMap { Int($0) }.first.map { $0 * 1024 }
    }
}

/// Peers that try to make a session cost without end: reconciliation that never settles,
/// a session that never ends, a name of megabytes, a stream of invalid events. Each
/// session ends with a clear error, within its limits; the node serves and syncs on.
@Suite("Session limits")
struct SessionLimitTests {
    func sync(_ daemon: DaemonProcess, _ url: String) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(url)"}"#)
        return (result["peers"] as! [[String: Any]])[0]
    }

    func error(_ outcome: [String: Any]) -> (reason: String?, message: String) {
        let error = outcome["error"] as? [String: Any]
        return (error?["reason"] as? String, error?["message"] as? String ?? "")
    }

    func status(_ daemon: DaemonProcess) throws -> [String: Any] { try daemon.client().call("status") }

    /// Appends `count` events; the daemon's node id.
    @discardableResult
    func appendEvents(_ daemon: DaemonProcess, _ count: Int, prefix: String = "job/local") throws -> ULID {
        let lines = (0..<count).map { #"{"entity":"\#(prefix)-\#($0)","kind":"status","status":"assigned"}"# }
        _ = try daemon.client().call("append", eventsParams(lines))
        let node = try status(daemon)["node"] as! [String: Any]
        return ULID(node["id"] as! String)!
    }

    /// A fingerprint range over the whole of `origin` that matches nothing the daemon holds.
    func mismatchedRange(_ origin: ULID) -> Messages.WireRange {
        Messages.WireRange(
            origin: origin.description, after: nil, through: ULID(timestamp: 1 << 47, random: (0, 0)).description,
            count: 3, hash: String(repeating: "ab", count: 16), ids: nil)
    }

    /// After an attack: a good peer syncs both ways, and the node still appends.
    func goodPeerSyncs(_ daemon: DaemonProcess) throws {
        let good = try DaemonProcess()
        defer { good.removeFiles() }
        try appendEvents(good, 3, prefix: "job/good")
        let outcome = try sync(daemon, "unix://\(good.socketPath)")
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(outcome["received"] as? Int == 3)
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"job/after","kind":"status","status":"assigned"}"#]))
    }

    @Test("a peer answering every reconcile with new needs ends the session at the byte cap; memory stays bounded")
    func endlessNeedsFromTheResponder() throws {
        // Half the cap and half the ids of a round of the first version of this test: the
        // same number of rounds at half the work, which an address-sanitized build on a
        // loaded machine took past the client's 60 s to do.
        let daemon = try DaemonProcess(arguments: ["--sync-reconcile-max-bytes", "\(8 << 20)"])
        defer { daemon.removeFiles() }
        let origin = try appendEvents(daemon, 5)
        let rounds = Atomic<Int>(0)
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try channel.writePreamble()
            let hello = Messages.Hello(
                protocolVersion: 1, node: peer.node.description, name: "needy",
                vector: [origin.description: ULID(timestamp: 1 << 47, random: (0, 0)).description],
                ranges: [self.mismatchedRange(origin)])
            try channel.write(Frame(kind: .hello, payload: Messages.encode(hello)))
            var next: UInt64 = 0
            while try channel.read().kind == .reconcile {
                // 15,000 ids never seen, each round: about 435 KB.
                let needs = (0..<15_000).map { _ in
                    next += 1
                    return ULID(timestamp: 1_500_000_000_000 + next, random: (9, next)).description
                }
                let message = Messages.Reconcile(ranges: [self.mismatchedRange(origin)], needs: needs)
                try channel.write(Frame(kind: .reconcile, payload: Messages.encode(message)))
                rounds.add(1, ordering: .relaxed)
            }
        }
        let memory = PeakMemory(pid: daemon.process.processIdentifier)
        let outcome = try sync(daemon, peer.url)
        peer.finish()
        let peak = memory.stop()
        #expect(error(outcome).reason == "session_limit", "\(outcome)")
        #expect(error(outcome).message.contains("sync_reconcile_max_bytes"))
        // 8 MiB of reconcile frames is about 19 rounds of 435 KB: the session ended there,
        // having kept none of the 285,000 invented ids.
        #expect((15...25).contains(rounds.load(ordering: .relaxed)))
        #expect(!memoryBoundsApply || peak < 100 << 20, "peak RSS \(peak >> 20) MB")
        try goodPeerSyncs(daemon)
    }

    /// Starts a session on the daemon's socket as the initiator; the channel and the daemon's hello.
    func initiate(_ daemon: DaemonProcess, name: String? = "initiator", vector: [String: String] = [:])
        throws -> (FrameChannel, Messages.Hello)
    {
        let connection = try UnixConnection.connect(to: daemon.socketPath)
        let channel = FrameChannel(connection: connection, timeoutSeconds: 30)
        try channel.writePreamble()
        let hello = Messages.Hello(
            protocolVersion: 1, node: ULID(timestamp: 1_600_000_000_000, random: (8, 8)).description, name: name,
            vector: vector, ranges: nil)
        try channel.write(Frame(kind: .hello, payload: Messages.encode(hello)))
        _ = try channel.readPreamble()
        let frame = try channel.read()
        if frame.kind == .error { return (channel, Messages.Hello(protocolVersion: 1, node: "", vector: [:])) }
        return (channel, try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello"))
    }

    func failure(_ frame: Frame) throws -> Messages.Failure? {
        frame.kind == .error ? try Messages.decode(Messages.Failure.self, frame.payload, frame: "error") : nil
    }

    @Test("a peer that starts a session and keeps reconciling is cut off at the round cap")
    func endlessRoundsFromTheInitiator() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-reconcile-max-rounds", "20"])
        defer { daemon.removeFiles() }
        let origin = try appendEvents(daemon, 5)
        let (channel, hello) = try initiate(
            daemon, vector: [origin.description: ULID(timestamp: 1 << 47, random: (0, 0)).description])
        defer { channel.connection.close() }
        #expect(hello.ranges?.count == 1)
        var rounds = 0
        var last: Frame?
        while rounds < 100 {
            try channel.write(
                Frame(
                    kind: .reconcile,
                    payload: Messages.encode(Messages.Reconcile(ranges: [mismatchedRange(origin)], needs: []))))
            rounds += 1
            let frame = try channel.read()
            last = frame
            if frame.kind != .reconcile { break }
        }
        let refusal = try last.flatMap(failure)
        #expect(refusal?.reason == "session_limit")
        #expect(refusal?.message.contains("sync_reconcile_max_rounds") == true)
        #expect(rounds == 21)
        try goodPeerSyncs(daemon)
    }

    @Test("a peer that trickles a byte at a time is cut off at sync_session_max_s, though never silent")
    func tricklingPeerMeetsTheDeadline() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-session-max-s", "2", "--sync-timeout-s", "30"])
        defer { daemon.removeFiles() }
        let (channel, _) = try initiate(daemon)
        defer { channel.connection.close() }
        let started = Date()
        // The start of a batch frame that never completes: one byte every 0.2 s.
        let frame = Frame(kind: .batch, payload: Array(repeating: 0, count: 4096)).encoded()
        for byte in frame.prefix(100) {
            // Until the daemon hangs up, or well past its deadline.
            guard (try? channel.connection.write([byte])) != nil, Date().timeIntervalSince(started) < 4 else { break }
            Thread.sleep(forTimeInterval: 0.2)
        }
        let refusal = try failure(try channel.read())
        #expect(refusal?.reason == "session_limit", "\(String(describing: refusal))")
        #expect(refusal?.message.contains("sync_session_max_s") == true)
        #expect(Date().timeIntervalSince(started) < 15)
        try goodPeerSyncs(daemon)
    }

    @Test("a hello name of 4 MB is refused, in either direction; the store does not grow")
    func hugeHelloName() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        try appendEvents(daemon, 2)
        let bytesBefore = try status(daemon)["bytes"] as! Int
        let name = String(repeating: "x", count: 4 << 20)
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try channel.writePreamble()
            let hello = Messages.Hello(
                protocolVersion: 1, node: peer.node.description, name: name, vector: [:], ranges: nil)
            try channel.write(Frame(kind: .hello, payload: Messages.encode(hello)))
            // Then invalid events, each of which would carry the name into a dead letter.
            let events = (1...50).map {
                (peer.id($0), #"{"entity":"job/\#($0)","kind":"teleport","origin":"\#(peer.node)"}"#)
            }
            _ = try? channel.write(try peer.batch(events))
            _ = try? channel.read()
        }
        let outcome = try sync(daemon, peer.url)
        peer.finish()
        #expect(error(outcome).reason == "protocol", "\(outcome)")
        #expect(error(outcome).message.contains("not a node name"))
        #expect(error(outcome).message.utf8.count < 1000)

        // As the responder: the initiator's hello is refused with an error frame.
        let (channel, _) = try initiate(daemon, name: name)
        channel.connection.close()
        let refusal = try daemon.client().call("status")
        #expect((refusal["needs_attention"] as? [String: Any])?["dead_letters"] as? Int == 0)
        #expect(refusal["bytes"] as? Int == bytesBefore)
        #expect(refusal["events"] as? Int == 2)
        // Neither the name nor a long run of it reached the log.
        #expect(daemon.stderr.utf8.count < 64 * 1024)
        try goodPeerSyncs(daemon)
    }

    @Test("a page of dead letters ends at max_page_bytes with next; paging reads each once")
    func deadLetterPagesAreBoundedInBytes() throws {
        let daemon = try DaemonProcess(arguments: ["--max-page-bytes", "65536"])
        defer { daemon.removeFiles() }
        let padding = String(repeating: "p", count: 30_000)
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            // Five invalid events of about 30 KB each: each becomes a dead letter with its raw bytes.
            let events = (1...5).map { n in
                (peer.id(UInt64(n)), #"{"entity":"job/\#(n)","kind":"teleport","pad":"\#(padding)","origin":"\#(peer.node)"}"#)
            }
            try channel.write(try peer.batch(events))
            _ = try? channel.read()
        }
        _ = try sync(daemon, peer.url)
        peer.finish()
        var seen: [String] = []
        var after: String? = nil
        var pages = 0
        repeat {
            let params = after.map { #"{"limit":1000,"after":"\#($0)"}"# } ?? #"{"limit":1000}"#
            let page = try daemon.client().call("dead_letters", params)
            let letters = page["dead_letters"] as! [[String: Any]]
            let rawBytes = letters.reduce(0) { $0 + ($1["raw"] as! String).utf8.count }
            #expect(!letters.isEmpty && rawBytes <= 65536, "a page of \(letters.count) letters, \(rawBytes) raw bytes")
            seen += letters.map { $0["key"] as! String }
            after = page["next"] as? String
            pages += 1
        } while after != nil && pages < 10
        #expect(seen.count == 5 && Set(seen).count == 5)
        #expect(pages == 3)
    }

    @Test("a node name as 0.4 allowed it (a space, non-ASCII) still syncs both ways; control characters do not")
    func humanNodeNames() throws {
        #expect(NodeName.isValid("Van 7") && NodeName.isValid("Fourgon n° 7") && NodeName.isValid(String(repeating: "v", count: 64)))
        #expect(!NodeName.isValid("") && !NodeName.isValid("van\n7") && !NodeName.isValid("van\u{7F}"))
        #expect(!NodeName.isValid("van\u{85}") && !NodeName.isValid(String(repeating: "v", count: 65)))
        let van = try DaemonProcess(arguments: ["--node", "Van 7"])
        defer { van.removeFiles() }
        let hq = try DaemonProcess(arguments: ["--node", "HQ é"])
        defer { hq.removeFiles() }
        try appendEvents(van, 2, prefix: "job/van")
        try appendEvents(hq, 3, prefix: "job/hq")
        let pulled = try sync(van, "unix://\(hq.socketPath)")
        #expect(pulled["error"] is NSNull, "\(pulled)")
        #expect(pulled["received"] as? Int == 3 && pulled["sent"] as? Int == 2)
        #expect(try status(hq)["events"] as? Int == 5)
    }

    @Test("past sync_session_max_dead_letters the rest of the batch is refused: too_many_invalid")
    func tooManyInvalid() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-session-max-dead-letters", "20"])
        defer { daemon.removeFiles() }
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            // A good batch first, acknowledged: it stays.
            try channel.write(try peer.batch([peer.event(peer.id(1), "job/first", status: "assigned")]))
            _ = try channel.read()
            var events = [peer.event(peer.id(2), "job/a", status: "assigned")]
            for n in 3..<63 {
                events.append(
                    (peer.id(UInt64(n)), #"{"entity":"job/\#(n)","kind":"teleport","origin":"\#(peer.node)"}"#))
            }
            events.append(peer.event(peer.id(63), "job/b", status: "assigned"))
            try channel.write(try peer.batch(events))
            _ = try? channel.read()
        }
        let outcome = try sync(daemon, peer.url)
        peer.finish()
        #expect(error(outcome).reason == "too_many_invalid", "\(outcome)")
        #expect(error(outcome).message.contains("sync_session_max_dead_letters"))
        // The first batch and the valid event before the invalid ones are kept; of the 60
        // invalid events, 20 are dead letters; the rest of the batch (40 and job/b) was refused.
        #expect(try status(daemon)["events"] as? Int == 2)
        let letters = try daemon.client().call("dead_letters", #"{"limit":1000}"#)["dead_letters"] as! [[String: Any]]
        #expect(letters.count == 20)
        #expect(letters.allSatisfy { $0["peer_node"] as? String == peer.node.description })
        #expect(letters.allSatisfy { $0["peer"] as? String == peer.url })
        try goodPeerSyncs(daemon)
    }

    @Test("batches handed to the writer together share sync_session_max_dead_letters: no more are added")
    func deadLettersOfBatchesInFlight() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-session-max-dead-letters", "20"])
        defer { daemon.removeFiles() }
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            // A window's worth of batches at once, acks not waited for: the receiver reads
            // the next while the writer has the first. Each is a valid event and then 10
            // invalid ones.
            for batch in 0..<UInt64(SyncSession.window) {
                let first = batch * 11 + 1
                var events = [peer.event(peer.id(first), "job/valid-\(batch)", status: "assigned")]
                for n in (first + 1)...(first + 10) {
                    events.append((peer.id(n), #"{"entity":"job/\#(n)","kind":"teleport","origin":"\#(peer.node)"}"#))
                }
                try channel.write(try peer.batch(events))
            }
            while (try? channel.read()) != nil {}
        }
        let outcome = try sync(daemon, peer.url)
        peer.finish()
        #expect(error(outcome).reason == "too_many_invalid", "\(outcome)")
        // The first batch makes 10 dead letters, the second the 10 left, and the rest of
        // the session is refused: the third batch's valid event is not stored, whether or
        // not the writer had it before the second was settled.
        let letters = try daemon.client().call("dead_letters", #"{"limit":1000}"#)["dead_letters"] as! [[String: Any]]
        #expect(letters.count == 20)
        #expect(try status(daemon)["events"] as? Int == 2)
        try goodPeerSyncs(daemon)
    }

    @Test("batches sent without waiting are each acknowledged once committed, in order")
    func acksOfBatchesInFlight() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let acks = Mutex<[Messages.Ack]>([])
        let sizes = [3, 1, 4, 1, 5, 9]
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            var next: UInt64 = 1
            var sent = 0
            var acked = 0
            // Up to a window of batches unacknowledged, as a sender keeps them.
            while acked < sizes.count {
                while sent < sizes.count, sent - acked < SyncSession.window {
                    var events: [(ULID, String)] = []
                    for _ in 0..<sizes[sent] {
                        events.append(peer.event(peer.id(next), "job/\(next)", status: "assigned"))
                        next += 1
                    }
                    try channel.write(try peer.batch(events))
                    sent += 1
                }
                let frame = try channel.read()
                guard frame.kind == .ack else { return }
                let ack = try Messages.decode(Messages.Ack.self, frame.payload, frame: "ack")
                acks.withLock { $0.append(ack) }
                acked += 1
            }
            try channel.write(
                Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: sizes.reduce(0, +), reconciled: 0))))
        }
        let outcome = try sync(daemon, peer.url)
        peer.finish()
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(acks.withLock { $0.map(\.received) } == sizes)
        #expect(try status(daemon)["events"] as? Int == sizes.reduce(0, +))
    }
}
