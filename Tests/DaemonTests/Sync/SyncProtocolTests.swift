import EventStore
import Foundation
import Projections
import TestSupport
import Testing
import UnixSocket

@testable import Daemon
@testable import Replication
@testable import Server
@testable import Writer

@Suite("Sync protocol pieces")
struct SyncProtocolTests {
    @Test("CRC-32C of the check string is 0xE3069283, from the processor's instruction and from the tables")
    func crc() {
        #if arch(x86_64)
            // x86-64 processors have had SSE 4.2 since 2008: the instruction is used.
            #expect(CRC32C.usesHardware)
        #endif
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8]()) == 0)
        // Eight bytes a step gives what one bit at a time gives, at every length and
        // alignment, for arrays, slices and other sequences.
        func bitwise(_ bytes: some Sequence<UInt8>) -> UInt32 {
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes {
                crc ^= UInt32(byte)
                for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            }
            return crc ^ 0xFFFF_FFFF
        }
        var generator = SystemRandomNumberGenerator()
        let random = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &generator) }
        for length in [0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 4095] {
            for start in 0..<9 {
                let slice = random[start..<min(random.count, start + length)]
                #expect(CRC32C.checksum(slice) == bitwise(slice), "length \(length) from \(start)")
                #expect(CRC32C.checksum(Array(slice)) == bitwise(slice))
                #expect(CRC32C.checksum(slice.lazy.map { $0 }) == bitwise(slice))
                // The tables (other processors) give it too, whichever form this one uses.
                #expect(CRC32C.tableChecksum(Array(slice)) == bitwise(slice))
                // A frame built in place is the frame encoded whole.
                var inPlace = Frame.beginEncoding(.chunk, capacity: slice.count)
                inPlace.append(contentsOf: slice)
                Frame.endEncoding(&inPlace)
                #expect(inPlace == Frame(kind: .chunk, payload: Array(slice)).encoded())
            }
        }
    }

    @Test("the fingerprint's worked example in docs/sync.md")
    func fingerprintExample() {
        let id = ULID(high: 0x01a2_2cf9_639f_269e, low: 0xf2a7_4de4_52e6_b438)
        let fingerprint = Fingerprint([id])
        #expect(fingerprint.count == 1)
        #expect(fingerprint.hash == "bf8ae7f23857c634ac7659c0fca36b24")
        #expect(Fingerprint().hash == String(repeating: "0", count: 32))
        // Order-free and additive over disjoint parts.
        let ids = (0..<100).map { ULID(timestamp: 1_700_000_000_000 + UInt64($0), random: (0, UInt64($0))) }
        #expect(Fingerprint(ids) == Fingerprint(ids.reversed()))
        #expect(Fingerprint(ids) != Fingerprint(ids.dropLast()))
    }

    @Test("the byte-by-byte example in docs/sync.md: its hellos and done encode to the lengths and CRCs given")
    func byteByByteExample() {
        func frame(_ message: some Encodable) -> (Int, String) {
            let payload = Messages.encode(message)
            return (payload.count, String(CRC32C.checksum(payload), radix: 16))
        }
        let hq = "01M8KW1D5YHQ2P7S0C3R9T4V6B"
        let van = "01M8KX60XQ9QZ6TBERPGCC148Z"
        let b1 = Array(
            #"{"by":"dispatch","entity":"job/42","fields":{"address":"12 Main St"},"kind":"edit","origin":"01M8KW1D5YHQ2P7S0C3R9T4V6B"}"#
                .utf8)
        var initiator = Messages.Hello(
            protocolVersion: 1, node: van, name: "van-7",
            vector: [hq: "01M8PFPD3QH4QX4FR84G98PBSK", van: "01M8PG52BB2R00K6AGV0VFCXEC"], ranges: nil,
            clock: 1_796_051_831_433, deadLetters: [])
        initiator.protocols = [1, 2]
        initiator.capabilities = Frame.capabilities
        #expect(frame(initiator) == (317, "63124f28"))
        var responder = Messages.Hello(
            protocolVersion: 2, node: hq, name: "hq", vector: [hq: "01M8PGE6TQJMRNV7E9Z0C1HT0H"],
            ranges: [
                Messages.WireRange(
                    origin: hq, through: "01M8PFPD3QH4QX4FR84G98PBSK", count: 1,
                    hash: "bf8ae7f23857c634ac7659c0fca36b24")
            ], clock: 1_796_051_831_438, deadLetters: [])
        responder.protocols = [1, 2]
        responder.capabilities = Frame.capabilities
        let b1ID = ULID("01M8PFJRWZ4TFF59TDWH9EDD1R")!
        #expect(EventLog.contentHash(b1) == "780fb6938c7b1c18cd70decc6a97e2b1")
        let window = DivergenceLedger.digest([(b1ID, EventLog.contentHash(b1))])
        #expect(window == "73ec725a5bb4483c92cfce6ec0ecf09c")
        responder.windows = [
            Messages.WireRange(
                origin: hq, after: nil, through: b1ID.description, count: 1, hash: window, ids: nil)
        ]
        responder.checks = []
        #expect(frame(responder) == (553, "7a4f5afe"))
        #expect(frame(Messages.Done(sent: 4, reconciled: 2, divergent: [], recheck: [])) == (53, "f6be1f42"))
        #expect(frame(Messages.Done(sent: 1, reconciled: 0)) == (25, "d9a05f5e"))
    }

    /// A channel pair: what one side writes, the other reads.
    func channels(timeout: Double = 5) throws -> (FrameChannel, FrameChannel, UnixConnection) {
        let (a, b) = try UnixConnection.pair()
        return (
            FrameChannel(connection: a, timeoutSeconds: timeout), FrameChannel(connection: b, timeoutSeconds: timeout),
            b
        )
    }

    @Test("frames round-trip with their checksum; a flipped bit, a cut frame and an unknown type are refused")
    func frames() throws {
        let (writer, reader, readerSocket) = try channels()
        try writer.writePreamble()
        try writer.write(Frame(kind: .hello, payload: Array(#"{"x":1}"#.utf8)))
        try writer.write(Frame(kind: .done, payload: []))
        #expect(try reader.readPreamble() == 1)
        #expect(try reader.read() == Frame(kind: .hello, payload: Array(#"{"x":1}"#.utf8)))
        #expect(try reader.read() == Frame(kind: .done, payload: []))
        readerSocket.close()

        var damaged = Frame(kind: .batch, payload: Array(repeating: 7, count: 100)).encoded()
        damaged[50] ^= 0x10
        let (w2, r2, _) = try channels()
        try w2.connection.write(damaged)
        do {
            _ = try r2.read()
            Issue.record("a damaged frame was read")
        } catch {
            #expect(error.reason == .corruptBatch)
        }

        let (w3, r3, _) = try channels()
        try w3.connection.write(
            Array(Frame(kind: .batch, payload: Array(repeating: 1, count: 100)).encoded().prefix(60)))
        w3.connection.shutdown()
        do {
            _ = try r3.read()
            Issue.record("a cut frame was read")
        } catch {
            #expect(error.reason == .closed)
            #expect(error.message.contains("in the middle of a frame"))
        }

        let (w4, r4, _) = try channels()
        try w4.connection.write([0x5A, 0, 0, 0, 0, 0, 0, 0, 0])
        do {
            _ = try r4.read()
            Issue.record("an unknown frame type was read")
        } catch {
            #expect(error.reason == .protocolError)
        }
    }

    @Test(
        "a peer that answers with anything but the preamble is not evstore, described by its size, never quoted",
        arguments: [
            "HTTP/1.1 302 Found\r\nLocation: http://portal.example/login\r\n\r\n",
            "<!DOCTYPE html><html><body>Welcome to Airport WiFi</body></html>",
            "SSH-2.0-OpenSSH_9.2\r\n",
            "EVSYNC",
        ])
    func garbagePreamble(text: String) throws {
        let (w, r, _) = try channels(timeout: 0.5)
        try w.connection.write(Array(text.utf8))
        w.connection.shutdown()
        do {
            _ = try r.readPreamble()
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.reason == .notEvstore)
            #expect(!error.message.contains(String(text.prefix(6))), "\(error.message)")
            #expect(error.message.contains("bytes that are not a preamble"), "\(error.message)")
        }
    }

    @Test("random bytes are not a preamble", arguments: [1, 2, 3, 4, 5] as [UInt64])
    func randomPreamble(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let bytes = (0..<200).map { _ in UInt8.random(in: 0...255, using: &rng) }
        let (w, r, _) = try channels(timeout: 0.5)
        try w.connection.write(bytes)
        do {
            _ = try r.readPreamble()
            Issue.record("accepted random bytes")
        } catch {
            #expect(error.reason == .notEvstore)
        }
    }

    @Test("a silent peer ends the read with a timeout")
    func silence() throws {
        let (w, r, _) = try channels(timeout: 0.3)
        defer { withExtendedLifetime(w) {} }
        let started = Date()
        do {
            _ = try r.readPreamble()
            Issue.record("read from a silent peer")
        } catch {
            #expect(error.reason == .timeout)
        }
        #expect(Date().timeIntervalSince(started) < 5)
    }

    @Test("batches round-trip; a count that does not match the records is corrupt")
    func batches() throws {
        let events = (0..<50).map { index in
            ReplicatedEvent(
                id: ULID(timestamp: 1_700_000_000_000 + UInt64(index), random: (0, UInt64(index))),
                json: Array(#"{"entity":"job/\#(index)","kind":"delete","origin":"01HZZZZZZZZZZZZZZZZZZZZZZZ"}"#.utf8))
        }
        let payload = try BatchCodec.encode(events, compressor: Compressor())
        #expect(try BatchCodec.decode(payload, decompressor: Decompressor(), maxEventBytes: 65536) == events)
        var lying = payload
        lying[3] = 49
        #expect(throws: SyncError.self) {
            try BatchCodec.decode(lying, decompressor: Decompressor(), maxEventBytes: 65536)
        }
        var broken = payload
        broken[broken.count - 3] ^= 0xFF
        #expect(throws: SyncError.self) {
            try BatchCodec.decode(broken, decompressor: Decompressor(), maxEventBytes: 65536)
        }
        #expect(throws: SyncError.self) {
            try BatchCodec.decode([0, 0], decompressor: Decompressor(), maxEventBytes: 65536)
        }
    }

    @Test(
        "peer URLs parse into their three forms",
        arguments: [
            ("unix:///run/evstore/evstored.sock", PeerURL.unix(path: "/run/evstore/evstored.sock")),
            (
                "exec:evctl --socket '/tmp/a b.sock' sync-serve",
                .exec(arguments: ["evctl", "--socket", "/tmp/a b.sock", "sync-serve"])
            ),
            ("ssh://field@van-7", .ssh(user: "field", host: "van-7", port: nil, socket: nil)),
            (
                "ssh://field@10.0.0.7:2222/run/evstore/evstored.sock",
                .ssh(user: "field", host: "10.0.0.7", port: 2222, socket: "/run/evstore/evstored.sock")
            ),
            ("ssh://gateway", .ssh(user: nil, host: "gateway", port: nil, socket: nil)),
        ] as [(String, PeerURL)])
    func urls(text: String, expected: PeerURL) throws {
        #expect(try PeerURL(text) == expected)
    }

    @Test(
        "bad peer URLs are refused with the forms that work",
        arguments: [
            "http://example.com", "unix://relative.sock", "exec:", "exec:'open", "ssh://", "ssh://u@h:99999",
            "ssh://-oProxyCommand=x", "field-2",
        ])
    func badURLs(text: String) {
        do {
            _ = try PeerURL(text)
            Issue.record("accepted \(text)")
        } catch {
            #expect(error.reason == .invalidPeer)
            #expect(error.message.contains("unix://"))
        }
    }

    @Test("the ssh command runs evctl sync-serve on the host, with the socket quoted for the remote shell")
    func sshCommand() throws {
        let url = try PeerURL("ssh://field@van-7:2222/run/my dir/evstored.sock")
        #expect(
            url.command(ssh: ["ssh", "-i", "/k"]) == [
                "ssh", "-i", "/k", "-o", "BatchMode=yes", "-p", "2222", "field@van-7",
                "evctl --socket '/run/my dir/evstored.sock' sync-serve",
            ])
    }

    @Test(
        "backoff: doubling from the base, ±50 % jitter, never past the cap; failing after 8, terminal at once; a success resets"
    )
    func backoff() {
        var clock: UInt64 = 1_000_000
        var schedule = PeerSchedule(nextAttempt: clock)
        let refused = SyncError(.unreachable, "refused")
        var delays: [UInt64] = []
        for failure in 1...10 {
            // jitter 0.5 is the nominal delay; 0 and 1 its bounds
            schedule.failed(refused, at: clock, base: 2, cap: 600, jitter: 0.5)
            delays.append(schedule.nextAttempt - clock)
            #expect(schedule.state == (failure >= 8 ? .failing : .retrying))
            #expect(schedule.needsAttention == (failure >= 8))
            clock = schedule.nextAttempt
        }
        #expect(delays == [2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000, 512000, 600_000])
        #expect(PeerSchedule.backoff(failures: 3, base: 2, cap: 600, jitter: 0) == 4)
        #expect(PeerSchedule.backoff(failures: 3, base: 2, cap: 600, jitter: 1) == 12)
        #expect(PeerSchedule.backoff(failures: 40, base: 2, cap: 600, jitter: 1) == 600)
        #expect(PeerSchedule.backoff(failures: 40, base: 2, cap: 600, jitter: 0) == 300)
        for _ in 0..<1000 {
            let wait = PeerSchedule.backoff(
                failures: Int.random(in: 1...80), base: 2, cap: 600, jitter: Double.random(in: 0..<1))
            #expect(wait <= 600)
        }
        #expect(schedule.failingSince == 1_000_000)
        #expect(PeerSchedule.backoff(failures: 1000, base: 2, cap: 600, jitter: 0.5) == 600)

        // The network came back: tried now, the backoff starts over, the failures still count.
        let cut = schedule.networkReturned(at: clock - 100_000, base: 2, cap: 600)
        #expect(cut)
        #expect(schedule.nextAttempt == clock - 100_000)
        #expect(schedule.state == .failing)
        schedule.failed(refused, at: clock, base: 2, cap: 600, jitter: 0.5)
        #expect(schedule.nextAttempt == clock + 2000)
        #expect(schedule.failures == 11)
        clock = schedule.nextAttempt

        schedule.succeeded(at: clock, interval: 30)
        #expect(schedule.state == .ok)
        #expect(schedule.failingSince == nil)
        #expect(schedule.failures == 0)
        #expect(schedule.lastSuccess == clock)
        #expect(schedule.nextAttempt == clock + 30_000)

        schedule.failed(SyncError(.protocolMismatch, "v2"), at: clock, base: 2, cap: 600, jitter: 0.5)
        #expect(schedule.state == .terminal)
        #expect(schedule.needsAttention)
        #expect(schedule.nextAttempt == clock + 2000)
    }

    /// Ids held in memory, for the reconciler alone.
    struct MemorySource: IDSource {
        var ids: [ULID: [ULID]]
        func ids(origin: ULID, after: ULID?, through: ULID?) -> [ULID] {
            (ids[origin] ?? []).filter { id in after.map { id > $0 } ?? true && through.map { id <= $0 } ?? true }
        }
        func fingerprint(origin: ULID, after: ULID?, through: ULID?) -> Fingerprint {
            Fingerprint(ids(origin: origin, after: after, through: through))
        }
        func held(_ wanted: [ULID]) -> [ULID] {
            let all = Set(ids.values.joined())
            return wanted.filter { all.contains($0) }
        }
    }

    @Test("needs naming ids this node does not hold are ignored, and the ids kept are capped")
    func needsAreBounded() throws {
        let origin = ULID(timestamp: 1000, random: (0, 0))
        let held = (1...50).map { ULID(timestamp: 2_000_000 + $0, random: (0, $0)) }
        var reconciler = Reconciler(source: MemorySource(ids: [origin: held]), maxIDs: 20)
        // A peer inventing ids: none is kept.
        try reconciler.take(needs: (1...10_000).map { ULID(timestamp: 3_000_000 + $0, random: (1, $0)) })
        #expect(reconciler.theyLack.isEmpty)
        #expect(!reconciler.overflowed)
        try reconciler.take(needs: Array(held.prefix(15)))
        #expect(reconciler.theyLack.count == 15)
        #expect(!reconciler.overflowed)
        // More than the cap: 20 kept, the rest left for a later session.
        try reconciler.take(needs: held)
        #expect(reconciler.theyLack.count == 20)
        #expect(reconciler.overflowed)
    }

    @Test("past its deadline the reconciler stops answering")
    func reconcilerStopsAtTheDeadline() throws {
        let origin = ULID(timestamp: 1000, random: (0, 0))
        let held = (1...200).map { ULID(timestamp: 2_000_000 + $0, random: (0, $0)) }
        var reconciler = Reconciler(source: MemorySource(ids: [origin: held]))
        let range = IDRange(
            origin: origin, after: nil, through: held.last!, content: .fingerprint(Fingerprint(held.prefix(3))))
        let answered = try reconciler.respond(to: [range, range])
        #expect(!answered.ranges.isEmpty)
        let late = try reconciler.respond(to: [range, range], until: .now - .seconds(1))
        #expect(late.ranges.isEmpty && late.needs.isEmpty)
    }

    @Test(
        "reconciliation finds exactly the ids each side lacks in the common range", arguments: Array(1...30) as [UInt64]
    )
    func reconciliation(seed: UInt64) throws {
        try reconcile(seed: seed, budget: 2 << 20)
    }

    @Test(
        "with a small reply budget, ranges over it come back unsplit and later rounds settle them",
        arguments: Array(31...40) as [UInt64])
    func reconciliationInSmallReplies(seed: UInt64) throws {
        try reconcile(seed: seed, budget: 2_000)
    }

    func reconcile(seed: UInt64, budget: Int) throws {
        var rng = SeededGenerator(seed: seed)
        let origins = (0..<3).map { ULID(timestamp: 1000 + UInt64($0), random: (0, 0)) }
        var a: [ULID: [ULID]] = [:]
        var b: [ULID: [ULID]] = [:]
        for origin in origins {
            let count = Int.random(in: 0..<3000, using: &rng)
            var t: UInt64 = 2_000_000
            let all = (0..<count).map { _ in
                t += UInt64.random(in: 1...5, using: &rng)
                return ULID(timestamp: t, random: (UInt16.random(in: 0...UInt16.max, using: &rng), rng.next()))
            }
            // Each side misses some: none, a few, a run, or most.
            func keep(_ mode: Int) -> [ULID] {
                switch mode {
                case 0: all
                case 1: all.filter { _ in Int.random(in: 0..<100, using: &rng) != 0 }
                case 2:
                    all.enumerated().filter { !(count / 3..<count / 2).contains($0.offset) }.map(\.element)
                default: all.filter { _ in Int.random(in: 0..<10, using: &rng) == 0 }
                }
            }
            a[origin] = keep(Int.random(in: 0..<4, using: &rng))
            b[origin] = keep(Int.random(in: 0..<4, using: &rng))
        }
        let sourceA = MemorySource(ids: a)
        let sourceB = MemorySource(ids: b)
        let vectorA = a.compactMapValues(\.last)
        let vectorB = b.compactMapValues(\.last)
        var ra = Reconciler(source: sourceA, replyBudget: budget)
        var rb = Reconciler(source: sourceB, replyBudget: budget)
        var incoming = try rb.opening(mine: vectorB, theirs: vectorA)
        var turnA = true
        var rounds = 0
        while !incoming.isEmpty, rounds < 1000 {
            rounds += 1
            if turnA {
                let (reply, needs) = try ra.respond(to: incoming)
                try rb.take(needs: needs)
                incoming = reply
            } else {
                let (reply, needs) = try rb.respond(to: incoming)
                try ra.take(needs: needs)
                incoming = reply
            }
            turnA.toggle()
        }
        #expect(rounds < (budget < 10_000 ? 400 : 12))
        for origin in origins {
            guard let lastA = vectorA[origin], let lastB = vectorB[origin] else { continue }
            let through = min(lastA, lastB)
            let inA = Set(sourceA.ids(origin: origin, after: nil, through: through))
            let inB = Set(sourceB.ids(origin: origin, after: nil, through: through))
            #expect(
                ra.theyLack.filter { origins.contains(origin) && $0 <= through && inA.contains($0) }.isSuperset(
                    of: inA.subtracting(inB)))
            #expect(rb.theyLack.filter { inB.contains($0) }.isSuperset(of: inB.subtracting(inA)))
        }
        // Nothing either side already holds is named.
        for id in ra.theyLack { #expect(!b.values.contains { $0.contains(id) }) }
        for id in rb.theyLack { #expect(!a.values.contains { $0.contains(id) }) }
    }
}
