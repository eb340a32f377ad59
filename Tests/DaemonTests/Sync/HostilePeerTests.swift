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

/// A peer that answers the daemon's session with whatever the test scripts: a captive
/// portal, random bytes, another protocol version, damaged batches, invalid events, a
/// clock days ahead, silence.
final class ScriptedPeer: @unchecked Sendable {
    let path: String
    let listener: UnixListener
    let node = ULID(timestamp: 1_600_000_000_000, random: (7, 7))
    private let done = DispatchSemaphore(value: 0)

    /// `script` gets the accepted connection once the daemon's preamble and hello are read
    /// (when `handshake`), or at once.
    init(handshake: Bool, script: @escaping @Sendable (ScriptedPeer, FrameChannel) throws -> Void) throws {
        path =
            FileManager.default.temporaryDirectory.appendingPathComponent("peer-\(UUID().uuidString.prefix(8)).sock")
            .path
        listener = try UnixListener.bind(path: path)
        DispatchQueue.global().async { [self] in
            defer { done.signal() }
            guard let connection = try? listener.accept(timeout: 30) else { return }
            let channel = FrameChannel(connection: connection, timeoutSeconds: 30)
            do {
                if handshake {
                    _ = try channel.readPreamble()
                    _ = try channel.read()  // the daemon's hello
                }
                try script(self, channel)
            } catch {}
            connection.close()
        }
    }

    var url: String { "unix://\(path)" }

    func finish() {
        _ = done.wait(timeout: .now() + 30)
        listener.close()
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Our preamble and a hello holding nothing, then the daemon's batches (acknowledged)
    /// up to its done: the daemon now waits for ours.
    func answerHello(_ channel: FrameChannel) throws {
        try channel.writePreamble()
        try channel.write(
            Frame(
                kind: .hello,
                payload: Messages.encode(
                    Messages.Hello(
                        protocolVersion: 1, node: node.description, name: "scripted", vector: [:], ranges: nil))))
        while true {
            let frame = try channel.read()
            if frame.kind == .done { return }
            try channel.write(
                Frame(kind: .ack, payload: Messages.encode(Messages.Ack(received: 0, skipped: 0, deadLetters: 0))))
        }
    }

    func batch(_ events: [(ULID, String)]) throws -> Frame {
        let replicated = events.map { ReplicatedEvent(id: $0.0, json: Array($0.1.utf8)) }
        return Frame(kind: .batch, payload: try BatchCodec.encode(replicated, compressor: Compressor()))
    }

    func event(_ id: ULID, _ entity: String, status: String) -> (ULID, String) {
        (id, #"{"entity":"\#(entity)","kind":"status","origin":"\#(node)","status":"\#(status)"}"#)
    }

    func id(_ offset: UInt64, at base: UInt64 = 1_600_000_001_000) -> ULID {
        ULID(timestamp: base + offset, random: (0, offset))
    }
}

@Suite("Hostile peers")
struct HostilePeerTests {
    /// Runs `sync` against the scripted peer; the peer's entry of the answer.
    func sync(_ daemon: DaemonProcess, _ peer: ScriptedPeer) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"\#(peer.url)"}"#)
        peer.finish()
        return (result["peers"] as! [[String: Any]])[0]
    }

    func reason(_ outcome: [String: Any]) -> String? { (outcome["error"] as? [String: Any])?["reason"] as? String }

    func events(_ daemon: DaemonProcess) throws -> Int { try daemon.client().call("status")["events"] as! Int }

    @Test(
        "garbage instead of the protocol ends the session with a clear error that describes it, never quotes it, and changes nothing",
        arguments: [
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<!DOCTYPE html><html><body>Sign in to Hotel WiFi</body></html>",
            "<html><head><title>Captive portal</title></head></html>\n",
            "220 mail.example.com ESMTP Postfix\r\n",
        ])
    func garbage(text: String) throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        _ = try daemon.client().call(
            "append", eventsParams([#"{"entity":"job/1","kind":"status","status":"assigned"}"#]))
        let peer = try ScriptedPeer(handshake: false) { _, channel in
            _ = try? channel.connection.write(Array(text.utf8))
            Thread.sleep(forTimeInterval: 0.2)
        }
        let outcome = try sync(daemon, peer)
        #expect(reason(outcome) == "not_evstore")
        // The socket may be another service's: its bytes reach no message.
        let message = (outcome["error"] as? [String: Any])?["message"] as? String ?? ""
        #expect(message.contains("evstore sync protocol"), "\(message)")
        let sent = Array(text.utf8)
        let quoted = (0...(sent.count - 16)).first { start in
            message.utf8.firstRange(of: sent[start..<start + 16]) != nil
        }
        #expect(quoted == nil, "\(message) quotes what the peer sent")
        #expect(try events(daemon) == 1)
    }

    @Test("random bytes end the session; the daemon serves on", arguments: [1, 2, 3] as [UInt64])
    func randomBytes(seed: UInt64) throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        var rng = SeededGenerator(seed: seed)
        let bytes = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let peer = try ScriptedPeer(handshake: false) { _, channel in _ = try? channel.connection.write(bytes) }
        let outcome = try sync(daemon, peer)
        #expect(["not_evstore", "closed"].contains(reason(outcome)))
        #expect(try events(daemon) == 0)
    }

    @Test("a peer speaking another protocol version is a terminal failure: status shows it terminal, with the reason")
    func wrongVersion() throws {
        let daemon = try DaemonProcess(arguments: [
            "--sync-interval-s", "3600", "--backoff-base-s", "3600", "--backoff-cap-s", "3600",
        ])
        defer { daemon.removeFiles() }
        let peer = try ScriptedPeer(handshake: true) { _, channel in
            // A version past every one this node speaks (1 to 2): no version in common.
            try channel.connection.write(Array("EVSYNC/3\n".utf8))
            Thread.sleep(forTimeInterval: 0.2)
        }
        // Adding the peer starts its first session at once, in the background.
        let client = try daemon.client()
        _ = try client.call("peers.add", #"{"name":"newer","url":"\#(peer.url)"}"#)
        peer.finish()
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline {
            let peers = try client.call("status")["peers"] as? [[String: Any]] ?? []
            if peers.first?["failures"] as? Int ?? 0 > 0 { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        // One failure is enough: a mismatch does not mend itself by retrying.
        let status = try client.call("status")
        let shown = try #require((status["peers"] as? [[String: Any]])?.first { $0["name"] as? String == "newer" })
        #expect(shown["state"] as? String == "terminal", "\(shown)")
        #expect(shown["failures"] as? Int == 1, "\(shown)")
        let error = shown["last_error"] as? [String: Any]
        #expect(error?["reason"] as? String == "protocol_mismatch", "\(shown)")
        #expect((error?["message"] as? String)?.isEmpty == false, "\(shown)")
        #expect((status["needs_attention"] as? [String: Any])?["failing_peers"] as? Int == 1)
        let attention = try client.call("attention")["peers"] as? [[String: Any]] ?? []
        #expect(attention.map { $0["name"] as? String } == ["newer"])
        #expect(attention.first?["state"] as? String == "terminal")
    }

    @Test("a batch cut short commits nothing of it; batches acknowledged before it stay")
    func truncated() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            try channel.write(try peer.batch([peer.event(peer.id(1), "job/a", status: "assigned")]))
            _ = try channel.read()  // its ack
            let cut = try peer.batch((2..<50).map { peer.event(peer.id($0), "job/b\($0)", status: "assigned") })
                .encoded()
            try channel.connection.write(Array(cut.prefix(cut.count / 2)))
            channel.connection.shutdown()
        }
        let outcome = try sync(daemon, peer)
        #expect(reason(outcome) == "closed")
        #expect(try events(daemon) == 1)
    }

    @Test("a batch that fails its checksum or does not decompress commits nothing of it")
    func corrupt() throws {
        for damage in ["checksum", "zstd"] {
            let daemon = try DaemonProcess()
            defer { daemon.removeFiles() }
            let peer = try ScriptedPeer(handshake: true) { peer, channel in
                try peer.answerHello(channel)
                var frame = try peer.batch((1..<40).map { peer.event(peer.id($0), "job/c\($0)", status: "assigned") })
                if damage == "zstd" {
                    // A valid checksum over a zstd frame that is not one (its magic number broken).
                    frame.payload[5] ^= 0xFF
                    try channel.write(frame)
                } else {
                    var bytes = frame.encoded()
                    bytes[bytes.count - 5] ^= 0x01
                    try channel.connection.write(bytes)
                }
                _ = try? channel.read()
            }
            let outcome = try sync(daemon, peer)
            #expect(reason(outcome) == "corrupt_batch", "\(damage): \(outcome)")
            #expect(try events(daemon) == 0)
        }
    }

    @Test(
        "invalid events become dead letters with the reason, once each, and never block the valid ones behind them; one over max_event_bytes is stored"
    )
    func invalidEvents() throws {
        let daemon = try DaemonProcess(arguments: ["--max-event-bytes", "1024"])
        defer { daemon.removeFiles() }
        // The peer sends the same batch in two sessions, as it would while the invalid
        // events are the last of their origin.
        for session in 0..<2 {
            let peer = try ScriptedPeer(handshake: true) { peer, channel in
                try peer.answerHello(channel)
                var events = [peer.event(peer.id(1), "job/1", status: "assigned")]
                events.append((peer.id(2), #"{"entity":"job/2","kind":"teleport","origin":"\#(peer.node)"}"#))
                events.append((peer.id(3), "<html>not an event</html>"))
                // Larger than this node's max_event_bytes, though the peer took it: held to
                // the protocol's limit, it is stored.
                let big = String(repeating: "x", count: 2000)
                events.append(
                    (
                        peer.id(4),
                        #"{"entity":"job/4","kind":"edit","fields":{"notes":"\#(big)"},"origin":"\#(peer.node)"}"#
                    ))
                events.append(peer.event(peer.id(5), "job/3", status: "done"))
                try channel.write(try peer.batch(events))
                _ = try channel.read()
                try channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 5, reconciled: 0))))
            }
            let outcome = try sync(daemon, peer)
            #expect(outcome["error"] is NSNull)
            #expect(outcome["received"] as? Int == (session == 0 ? 3 : 0))
            #expect(outcome["dead_letters"] as? Int == (session == 0 ? 2 : 0))
            #expect(try events(daemon) == 3)
            let letters = try daemon.client().call("dead_letters")["dead_letters"] as! [[String: Any]]
            #expect(letters.count == 2)
            #expect(letters.allSatisfy { ($0["reason"] as? String)?.hasPrefix("invalid_event") == true })
            if session == 0 { #expect(letters.allSatisfy { ($0["peer"] as? String) == peer.url }) }
            let status = try daemon.client().call("status")
            #expect((status["needs_attention"] as? [String: Any])?["dead_letters"] as? Int == 2)
        }
    }

    @Test("a peer whose clock is days ahead: its events are kept, the skew reported, our clock not dragged")
    func clockAhead() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let now = UInt64(Date().timeIntervalSince1970 * 1000)
        let ahead = now + 3 * 86_400_000
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            try channel.write(try peer.batch([peer.event(peer.id(1, at: ahead), "job/future", status: "assigned")]))
            _ = try channel.read()
            try channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 1, reconciled: 0))))
        }
        let outcome = try sync(daemon, peer)
        #expect(outcome["error"] is NSNull)
        #expect(outcome["received"] as? Int == 1)
        let client = try daemon.client()
        let skewed = (try client.call("status")["clock"] as? [String: Any])?["skewed_origins"] as? [String: Int]
        #expect((skewed?[peer.node.description] ?? 0) > 2 * 86_400_000)
        let appended = try client.call(
            "append", eventsParams([#"{"entity":"job/future","kind":"status","status":"done"}"#]))
        let id = ULID((appended["ids"] as! [String])[0])!
        #expect(id.timestamp < now + 3_600_000)  // local time, not the peer's
        // Causal context, not id order, decides: our later status supersedes the peer's.
        let state = try client.call("get", #"{"entity":"job/future"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "done")
    }

    @Test("a peer that goes silent ends the session after sync_timeout_s; the daemon serves on")
    func silent() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-timeout-s", "1"])
        defer { daemon.removeFiles() }
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            Thread.sleep(forTimeInterval: 3)
        }
        let started = Date()
        let outcome = try sync(daemon, peer)
        #expect(reason(outcome) == "timeout")
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(try events(daemon) == 0)
    }
}
