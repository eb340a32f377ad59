@testable import Daemon
import EventStore
import Foundation
@testable import Lifecycle
import Projections
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// A hostile node that connects to the daemon's socket and starts a sync session itself:
/// the daemon answers as responder.
struct IncomingPeer {
    let channel: FrameChannel
    static let node = ULID(timestamp: 1_600_000_000_000, random: (9, 9))

    /// Connected, with nothing sent yet.
    init(_ daemon: DaemonProcess, timeout: Double = 10) throws {
        channel = FrameChannel(connection: try UnixConnection.connect(to: daemon.socketPath), timeoutSeconds: timeout)
    }

    /// Our preamble and a hello holding nothing; the daemon's preamble and hello read.
    func handshake() throws {
        try channel.writePreamble()
        try channel.write(
            Frame(
                kind: .hello,
                payload: Messages.encode(
                    Messages.Hello(
                        protocolVersion: 1, node: IncomingPeer.node.description, name: "incoming", vector: [:],
                        ranges: nil))))
        _ = try channel.readPreamble()
        let hello = try channel.read()
        #expect(hello.kind == .hello)
    }

    /// The reason and message of the error frame the daemon sends next.
    func failure() throws -> Messages.Failure {
        let frame = try channel.read()
        guard frame.kind == .error else { throw DaemonError("the daemon sent a \(frame.kind) frame, not an error") }
        return try Messages.decode(Messages.Failure.self, frame.payload, frame: "error")
    }

    func close() { channel.connection.close() }
}

/// What /proc says of a process: resident memory and its peak, CPU time.
struct ProcessFigures {
    let pid: Int32

    /// A `kB` line of /proc/PID/status, in bytes.
    func status(_ key: String) -> Int {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        for line in text.split(separator: "\n") where line.hasPrefix(key + ":") {
            return (Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0) * 1024
        }
        return 0
    }

    var rss: Int { status("VmRSS") }
    /// The peak of `rss` since the process started.
    var peakRSS: Int { status("VmHWM") }

    /// utime + stime from /proc/PID/stat, in seconds.
    var cpuSeconds: Double {
        let text = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        // The fields after the command name, which is in parentheses and may hold spaces.
        guard let close = text.lastIndex(of: ")") else { return 0 }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // Fields 14 and 15 of the whole line are the 12th and 13th after the name.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

@Suite("Incoming sessions")
struct IncomingSessionTests {
    static let mib = 1 << 20

    @Test(
        "a frame header announcing more than its kind's limit ends the session before the payload is read",
        arguments: [
            (Frame.Kind.hello, 64 << 20), (.reconcile, 9 << 20), (.done, 1 << 20), (.batch, (64 << 20) + 1),
        ] as [(Frame.Kind, Int)])
    func oversizedHeader(kind: Frame.Kind, length: Int) throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let figures = ProcessFigures(pid: daemon.process.processIdentifier)
        let peakBefore = figures.peakRSS
        let peer = try IncomingPeer(daemon)
        defer { peer.close() }
        try peer.channel.writePreamble()
        if kind != .hello {
            try peer.channel.write(
                Frame(
                    kind: .hello,
                    payload: Messages.encode(
                        Messages.Hello(
                            protocolVersion: 1, node: IncomingPeer.node.description, name: "incoming", vector: [:],
                            ranges: nil))))
        }
        var header: [UInt8] = [kind.rawValue]
        appendBigEndian(UInt32(length), to: &header)
        appendBigEndian(0, to: &header)
        try peer.channel.connection.write(header)
        _ = try peer.channel.readPreamble()
        if kind != .hello { _ = try peer.channel.read() }  // the daemon's hello
        // The refusal comes at once: the daemon does not wait for a byte of the payload.
        let failure = try peer.failure()
        #expect(failure.reason == "protocol")
        #expect(failure.message.contains("\(kind) frame of \(length) bytes"), "\(failure.message)")
        // What the peer goes on sending is not kept: the daemon has hung up.
        let chunk = [UInt8](repeating: 0x5A, count: IncomingSessionTests.mib)
        var sent = 0
        while sent < min(length, 64 << 20), (try? peer.channel.connection.write(chunk)) != nil { sent += chunk.count }
        #expect(sent < 16 << 20, "the daemon took \(sent) bytes of a refused frame")
        // Generous: the payload alone would be 64 MiB.
        #expect(!memoryBoundsApply || figures.peakRSS - peakBefore < 24 << 20, "peak RSS grew \(figures.peakRSS - peakBefore) bytes")
        #expect(try daemon.client().call("status")["events"] as? Int == 0)
    }

    /// A zstd frame of `blocks` RLE blocks of 128 KiB of zeros: 4 bytes a block, so 2 KB
    /// make 64 MiB. With `declared`, the frame header states the content size (and no
    /// decoder needs to find it out); without, it states a 128 KiB window.
    static func zerosFrame(blocks: Int, declared: Bool) -> [UInt8] {
        var frame: [UInt8] = [0x28, 0xB5, 0x2F, 0xFD]
        if declared {
            // Frame header descriptor: a 4-byte content size, single segment.
            frame.append(0xA0)
            let size = UInt32(blocks << 17)
            frame += [UInt8(size & 0xFF), UInt8((size >> 8) & 0xFF), UInt8((size >> 16) & 0xFF), UInt8(size >> 24)]
        } else {
            frame += [0x00, 0x38]  // no content size; window 2^(10 + 7)
        }
        for block in 0..<blocks {
            // Block header: size 128 KiB, type RLE (1), the last bit on the last block; then its byte.
            let header = UInt32(1 << 17) << 3 | 1 << 1 | (block == blocks - 1 ? 1 : 0)
            frame += [UInt8(header & 0xFF), UInt8((header >> 8) & 0xFF), UInt8(header >> 16), 0x00]
        }
        return frame
    }

    @Test(
        "a batch of 2 KB that expands to 64 MiB of zeros is refused at once, in little memory and CPU time",
        arguments: [true, false])
    func zerosBatch(declared: Bool) throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let figures = ProcessFigures(pid: daemon.process.processIdentifier)
        var payload: [UInt8] = []
        appendBigEndian(1000, to: &payload)
        payload += IncomingSessionTests.zerosFrame(blocks: 512, declared: declared)
        #expect(payload.count < 2100)
        // The frame is what it claims: zstd makes 64 MiB of zeros of it.
        #expect(
            try Decompressor(windowLogMax: 27).decompress(Array(payload[4...]), dictionary: nil, maxSize: 64 << 20)
                .count == 64 << 20)
        let peer = try IncomingPeer(daemon)
        defer { peer.close() }
        try peer.handshake()
        let peakBefore = figures.peakRSS
        let cpuBefore = figures.cpuSeconds
        try peer.channel.write(Frame(kind: .batch, payload: payload))
        let failure = try peer.failure()
        #expect(failure.reason == "corrupt_batch")
        #expect(failure.message.contains("more than the 1000 records it claims"), "\(failure.message)")
        let cpu = figures.cpuSeconds - cpuBefore
        let grown = figures.peakRSS - peakBefore
        // Decoding it whole took seconds and hundreds of megabytes; the bounds are generous
        // for a debug build on a loaded machine.
        // A sanitizer's runtime makes every instruction slower and every block bigger.
        #expect(cpu < (builtWithSanitizer ? 2.0 : 0.5), "the daemon spent \(cpu) s of CPU on the batch")
        #expect(!memoryBoundsApply || grown < 16 << 20, "peak RSS grew \(grown) bytes")
        #expect(try daemon.client().call("status")["events"] as? Int == 0)
    }

    @Test("sessions past max_incoming_sessions are refused as busy; those in progress finish; a good sync then works")
    func sessionCap() throws {
        let daemon = try DaemonProcess(arguments: ["--max-incoming-sessions", "2"])
        let other = try DaemonProcess(arguments: ["--node", "other"])
        defer {
            daemon.removeFiles()
            other.removeFiles()
        }
        let held = try (0..<2).map { _ in try IncomingPeer(daemon) }
        for peer in held { try peer.handshake() }
        let extra = try IncomingPeer(daemon)
        try extra.channel.writePreamble()
        _ = try extra.channel.readPreamble()
        let failure = try extra.failure()
        #expect(failure.reason == "busy")
        #expect(failure.message.contains("max_incoming_sessions"), "\(failure.message)")
        // The daemon hangs up on the refused one.
        var rest: [UInt8] = []
        #expect((try? extra.channel.connection.read(into: &rest, count: 1024)) ?? 0 == 0)
        extra.close()

        // A session in progress goes on to its end: our done, then the daemon's.
        try held[0].channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 0, reconciled: 0))))
        #expect(try held[0].channel.read().kind == .done)
        for peer in held { peer.close() }

        // A node's sync: refused as busy (and retried) until the held sessions have ended.
        _ = try other.client().call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"done"}"#]))
        let deadline = Date().addingTimeInterval(10)
        var outcome: [String: Any] = [:]
        repeat {
            let result = try other.client().call("sync", #"{"peer":"unix://\#(daemon.socketPath)"}"#)
            outcome = (result["peers"] as! [[String: Any]])[0]
            if outcome["error"] is NSNull { break }
            Thread.sleep(forTimeInterval: 0.1)
        } while Date() < deadline
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(try daemon.client().call("status")["events"] as? Int == 1)
    }

    @Test("a refused peer that keeps trickling bytes is hung up on within the timeout")
    func refusedTrickle() throws {
        let daemon = try DaemonProcess(arguments: ["--max-incoming-sessions", "1", "--sync-timeout-s", "2"])
        defer { daemon.removeFiles() }
        let held = try IncomingPeer(daemon)
        defer { held.close() }
        try held.handshake()
        let extra = try IncomingPeer(daemon)
        defer { extra.close() }
        try extra.channel.writePreamble()
        _ = try extra.channel.readPreamble()
        #expect(try extra.failure().reason == "busy")
        // One byte every 100 ms never lets a read time out; the daemon still hangs up.
        let started = Date()
        while Date().timeIntervalSince(started) < 15, (try? extra.channel.connection.write([0x00])) != nil {
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(Date().timeIntervalSince(started) < 10, "the refused connection was held")
    }

    @Test("a node refused as busy reports `busy`, which it retries")
    func busyOutcome() throws {
        let daemon = try DaemonProcess(arguments: ["--max-incoming-sessions", "1"])
        let other = try DaemonProcess(arguments: ["--node", "other"])
        defer {
            daemon.removeFiles()
            other.removeFiles()
        }
        let held = try IncomingPeer(daemon)
        defer { held.close() }
        try held.handshake()
        let result = try other.client().call("sync", #"{"peer":"unix://\#(daemon.socketPath)"}"#)
        let error = (result["peers"] as! [[String: Any]])[0]["error"] as? [String: Any]
        #expect(error?["reason"] as? String == "busy", "\(String(describing: error))")
        #expect(SyncError(.busy, "").isTerminal == false)
    }
}
