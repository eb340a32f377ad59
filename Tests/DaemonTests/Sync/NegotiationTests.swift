import EventStore
import Foundation
import Projections
import TestSupport
import Testing
import UnixSocket

@testable import Daemon
@testable import Lifecycle
@testable import Replication
@testable import Server
@testable import Writer

/// Sync protocol 2: the hellos carry the versions and capabilities each side speaks, the
/// session runs the highest both have, and a node of protocol 1 only is served as 0.4
/// served it (PreviousReleaseTests runs the real 0.4.0 against this release).
@Suite("Protocol negotiation")
struct NegotiationTests {
    /// Sends `hello` after the preamble `version`; the daemon's preamble and first frame.
    static func open(_ daemon: DaemonProcess, preamble version: Int = 1, hello: Messages.Hello) throws -> (
        peer: IncomingPeer, frame: Frame
    ) {
        let peer = try IncomingPeer(daemon)
        try peer.channel.connection.write(Frame.preamble(version: version))
        try peer.channel.write(Frame(kind: .hello, payload: Messages.encode(hello)))
        _ = try peer.channel.readPreamble()
        return (peer, try peer.channel.read())
    }

    static func hello(protocol version: Int = 1, protocols: [Int]?, capabilities: [String]? = nil) -> Messages.Hello {
        var hello = Messages.Hello(
            protocolVersion: version, node: IncomingPeer.node.description, name: "negotiating", vector: [:],
            ranges: nil)
        hello.protocols = protocols
        hello.capabilities = capabilities
        return hello
    }

    @Test("two nodes of this release run protocol 2, and say so in sync's answer and the log")
    func currentNodes() throws {
        let a = try DaemonProcess(arguments: ["--node", "a"])
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer {
            a.removeFiles()
            b.removeFiles()
        }
        _ = try a.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new"}"#]))
        let result = try a.client().call("sync", #"{"peer":"unix://\#(b.socketPath)"}"#)
        let peer = (result["peers"] as? [[String: Any]])?.first ?? [:]
        #expect(peer["error"] is NSNull, "\(peer)")
        #expect(peer["protocol"] as? Int == 2, "\(peer)")
        #expect(peer["sent"] as? Int == 1)
        #expect(a.stderr.contains("protocol 2"), "\(a.stderr.suffix(800))")
        // The responder logs its side once its session thread is done, maybe after the
        // initiator's answer.
        let deadline = Date().addingTimeInterval(10)
        while !b.stderr.contains("protocol 2"), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(b.stderr.contains("protocol 2"), "\(b.stderr.suffix(800))")
    }

    @Test(
        "a hello without versions (a node of protocol 1) gets protocol 1 and the hello 0.4 sent, without the new members"
    )
    func protocolOneOnly() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let (peer, frame) = try NegotiationTests.open(daemon, hello: NegotiationTests.hello(protocols: nil))
        defer { peer.close() }
        #expect(frame.kind == .hello)
        let hello = try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello")
        #expect(hello.protocolVersion == 1)
        let text = String(decoding: frame.payload, as: UTF8.self)
        #expect(!text.contains("protocols") && !text.contains("capabilities"), "\(text)")
    }

    @Test("a peer speaking 1 to 3 with a capability this node lacks: the session runs 2, with no capability")
    func highestInCommon() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let (peer, frame) = try NegotiationTests.open(
            daemon, hello: NegotiationTests.hello(protocols: [1, 2, 3], capabilities: ["teleport"]))
        defer { peer.close() }
        let hello = try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello")
        #expect(hello.protocolVersion == 2)
        #expect(hello.protocols == Array(Frame.protocolVersions))
        #expect(hello.capabilities == Frame.capabilities)
    }

    @Test(
        "no version in common: a preamble of protocol 3, or a hello of 3 and 4 only, ends with protocol_mismatch naming both sides' versions"
    )
    func noVersionInCommon() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        // A preamble of 3: refused once the hello is read.
        let third = try IncomingPeer(daemon)
        defer { third.close() }
        try third.channel.connection.write(Frame.preamble(version: 3))
        try third.channel.write(
            Frame(kind: .hello, payload: Messages.encode(NegotiationTests.hello(protocol: 3, protocols: [3]))))
        _ = try third.channel.readPreamble()
        let refused = try third.failure()
        #expect(refused.reason == "protocol_mismatch", "\(refused)")
        #expect(refused.message.contains("1 to 2"), "\(refused.message)")

        let (later, frame) = try NegotiationTests.open(
            daemon, hello: NegotiationTests.hello(protocol: 1, protocols: [3, 4]))
        defer { later.close() }
        #expect(frame.kind == .error)
        let failure = try Messages.decode(Messages.Failure.self, frame.payload, frame: "error")
        #expect(failure.reason == "protocol_mismatch", "\(failure)")
        #expect(failure.message.contains("3 to 4") && failure.message.contains("1 to 2"), "\(failure.message)")
        _ = try daemon.client().call("status")
    }

    @Test(
        "a sender keeps 8 batches unacknowledged when both hellos name window8, 4 when they do not",
        arguments: [true, false])
    func sendWindow(wide: Bool) throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let batches = 12
        for part in 0..<batches {
            let lines = (0..<BatchCodec.maxEvents).map {
                #"{"entity":"job/\#(part)-\#($0)","kind":"status","status":"assigned"}"#
            }
            _ = try daemon.client().call("append", eventsParams(lines))
        }
        let (peer, frame) = try NegotiationTests.open(
            daemon,
            hello: NegotiationTests.hello(
                protocols: [1, 2], capabilities: wide ? [Frame.wideWindowCapability] : [Frame.verifyCapability]))
        defer { peer.close() }
        let hello = try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello")
        #expect(hello.capabilities?.contains(Frame.wideWindowCapability) == true)
        // This side holds nothing to send: its done, then the daemon's batches.
        try peer.channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 0, reconciled: 0))))
        func ack() throws {
            try peer.channel.write(
                Frame(
                    kind: .ack,
                    payload: Messages.encode(Messages.Ack(received: BatchCodec.maxEvents, skipped: 0, deadLetters: 0))))
        }
        // None acknowledged: the daemon sends its window, then waits.
        var unacknowledged = 0
        while true {
            if !peer.channel.hasBytesWaiting {
                Thread.sleep(forTimeInterval: 0.5)
                if !peer.channel.hasBytesWaiting { break }
            }
            let next = try peer.channel.read()
            try #require(next.kind == .batch, "the daemon sent a \(next.kind) frame")
            unacknowledged += 1
        }
        #expect(unacknowledged == (wide ? SyncSession.wideWindow : SyncSession.window))
        // Acknowledged, the rest follows, one batch for each ack.
        var received = unacknowledged
        for _ in 0..<unacknowledged { try ack() }
        while true {
            let next = try peer.channel.read()
            if next.kind == .done { break }
            try #require(next.kind == .batch, "the daemon sent a \(next.kind) frame")
            received += 1
            try ack()
        }
        #expect(received == batches)
    }

    @Test("every frame kind of protocol 1 is allowed from the start; the table names a limit for each")
    func frameTable() {
        for kind in [Frame.Kind.hello, .reconcile, .batch, .ack, .done, .error] {
            #expect(Frame.Agreement.first.allows(kind))
            #expect(kind.maxPayloadBytes > 0 && kind.maxPayloadBytes <= Frame.maxPayloadBytes)
        }
        #expect(Frame.Agreement(version: 2, capabilities: []).allows(.batch))
        // A capability's kinds only once both sides named it.
        for kind in [Frame.Kind.forward, .forwarded] {
            #expect(!Frame.Agreement.first.allows(kind) && !Frame.Agreement(version: 2, capabilities: []).allows(kind))
            #expect(Frame.Agreement(version: 2, capabilities: [Frame.forwardCapability]).allows(kind))
            #expect(kind.maxPayloadBytes > 0 && kind.maxPayloadBytes <= Frame.maxPayloadBytes)
        }
        for kind in [Frame.Kind.want, .manifest, .chunk, .blobsDone, .blobsKept] {
            #expect(!Frame.Agreement.first.allows(kind) && !Frame.Agreement(version: 2, capabilities: []).allows(kind))
            #expect(!Frame.Agreement(version: 2, capabilities: [Frame.forwardCapability]).allows(kind))
            #expect(Frame.Agreement(version: 2, capabilities: [Frame.blobsCapability]).allows(kind))
            #expect(kind.maxPayloadBytes > 0 && kind.maxPayloadBytes <= Frame.maxPayloadBytes)
        }
        // A manifest holds the hashes of a blob of 16 GiB, a chunk its header and 512 KiB.
        #expect(Frame.Kind.manifest.maxPayloadBytes == BlobManifest.headerBytes + 32 * BlobManifest.maxChunks)
        #expect(Frame.Kind.chunk.maxPayloadBytes == BlobChunk.headerBytes + BlobChunk.maxBytes)
    }

    @Test("a manifest is refused when its chunk size is not this node's or its hashes do not fit the blob's size")
    func manifestChecks() throws {
        let hash = BlobHash.of(Array("x".utf8))
        let good = BlobManifest.encode(
            hash, size: UInt64(BlobChunk.maxBytes) + 1,
            chunks: [[UInt8](repeating: 1, count: 32), [UInt8](repeating: 2, count: 32)])
        let (decoded, size, chunks) = try BlobManifest.decode(good)
        #expect(decoded == hash && size == UInt64(BlobChunk.maxBytes) + 1 && chunks.count == 2)
        // One hash short, a torn hash, another chunk size, a header cut short.
        #expect(throws: SyncError.self) { try BlobManifest.decode(Array(good.dropLast(32))) }
        #expect(throws: SyncError.self) { try BlobManifest.decode(Array(good.dropLast(5))) }
        var otherSize = good
        otherSize[42] ^= 1
        #expect(throws: SyncError.self) { try BlobManifest.decode(otherSize) }
        #expect(throws: SyncError.self) { try BlobManifest.decode(Array(good.prefix(40))) }
        // An empty blob has no chunk.
        #expect(try BlobManifest.decode(BlobManifest.encode(hash, size: 0, chunks: [])).2.isEmpty)
    }
}
