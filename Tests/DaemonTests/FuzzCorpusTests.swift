import EventStore
import Foundation
import FuzzEntries
import Projections
import TestSupport
import Testing

@testable import Daemon
@testable import Replication
@testable import Server
@testable import Writer

/// The request and sync-stream fuzzers' seeds and regressions (Fuzz/Corpus,
/// Fuzz/Regressions), replayed through the fuzzers' entry points: each input must end in an
/// answer or a clear error, never a crash. docs/fuzzing.md tells how to add a regression.
@Suite struct DaemonFuzzCorpusTests {
    @Test func requestSeedsAndRegressionsAreAnswered() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-fuzz-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let dispatcher = try FuzzDispatcher(directory: directory)
        defer { dispatcher.stop() }
        let seeds = FuzzInputs.files("Corpus", "request")
        #expect(seeds.count >= 20)
        var answered = 0
        for (name, line) in seeds + FuzzInputs.files("Regressions", "request") {
            let response = try dispatcher.respond(to: line)
            if !response.isEmpty { answered += 1 }
            let text = String(decoding: response, as: UTF8.self)
            #expect(response.isEmpty || text.hasPrefix("{\"jsonrpc\":\"2.0\"") || text.hasPrefix("["), "\(name)")
        }
        #expect(answered >= seeds.count - 2)
        // The seeds' appends went in and are readable.
        let status = String(
            decoding: try dispatcher.respond(to: Array(#"{"jsonrpc":"2.0","method":"status","id":1}"#.utf8)),
            as: UTF8.self)
        #expect(status.contains("\"events\":") && !status.contains("\"events\":0,"), "\(status)")
    }

    @Test func syncStreamSeedsAndRegressions() throws {
        // `make fuzz-seeds` sets it: the seeds are written afresh, then replayed as always.
        if ProcessInfo.processInfo.environment["EVSTORE_WRITE_FUZZ_SEEDS"] != nil { try writeSyncStreamSeeds() }
        let seeds = FuzzInputs.files("Corpus", "sync-stream")
        #expect(seeds.count >= 6)
        for (name, bytes) in seeds + FuzzInputs.files("Regressions", "sync-stream") {
            do {
                let frames = try DaemonFuzzEntry.syncStream(bytes)
                #expect(name.hasPrefix("session"), "\(name) decoded \(frames) frames")
            } catch {
                #expect(!name.hasPrefix("session"), "\(name): \(error)")
                #expect(!"\(error)".isEmpty)
                if let refusal = DaemonFuzzCorpusTests.hostileRefusals.first(where: { name.hasPrefix($0.key) }) {
                    #expect("\(error)".contains(refusal.value), "\(name): \(error)")
                }
            }
        }
    }

    /// The hostile peers' seeds and what their refusal says.
    static let hostileRefusals = [
        "bad-oversized-": "frames is",
        "bad-zeros-batch": "more than the 1000 records it claims",
        "bad-batch-extra-records": "more than the 1 records it claims",
        "bad-batch-record-too-long": "over the 16777216 of the largest event",
        "bad-dictionary-lengths": "is not two dictionaries behind their lengths",
    ]

    /// Writes the sync-stream seeds into Fuzz/Corpus/sync-stream: not a test of its own, run
    /// by `syncStreamSeedsAndRegressions` when EVSTORE_WRITE_FUZZ_SEEDS is set (`make
    /// fuzz-seeds`, docs/fuzzing.md).
    func writeSyncStreamSeeds() throws {
        let directory = FuzzInputs.directory.appendingPathComponent("Corpus/sync-stream")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let node = FuzzEntry.sampleOrigin
        let all = FuzzEntry.sampleEvents(count: 5).enumerated().map { index, json in
            (id: ULID(high: FuzzEntry.sampleID.high, low: UInt64(index + 1)), json: json)
        }
        var seeds: [(String, [UInt8])] = []
        for flags: UInt8 in [0, 1, 3] {
            for count in [0, 1, 5] {
                seeds.append(
                    (
                        "session-flags\(flags)-events\(count)",
                        DaemonFuzzEntry.sampleSyncStream(flags: flags, node: node, events: Array(all.prefix(count)))
                    ))
            }
        }
        // A wrong protocol version, a bad checksum, a cut frame.
        var wrongVersion = DaemonFuzzEntry.sampleSyncStream(flags: 0, node: node, events: [])
        wrongVersion[8] = UInt8(ascii: "7")
        seeds.append(("bad-version", wrongVersion))
        var corrupt = DaemonFuzzEntry.sampleSyncStream(flags: 0, node: node, events: Array(all.prefix(2)))
        corrupt[corrupt.count - 3] ^= 0x55
        seeds.append(("bad-checksum", corrupt))
        seeds.append(
            (
                "bad-truncated",
                Array(DaemonFuzzEntry.sampleSyncStream(flags: 1, node: node, events: Array(all.prefix(2))).dropLast(7))
            ))
        // What hostile peers sent: frame headers over their kind's limit (no payload follows),
        // 2 KB batches that expand to 64 MiB of zeros, records past the count or over the
        // largest event.
        let hello = Frame(
            kind: .hello,
            payload: Messages.encode(
                Messages.Hello(protocolVersion: 1, node: node.description, name: "fuzz", vector: [:], ranges: nil))
        ).encoded()
        func stream(_ frames: [UInt8]...) -> [UInt8] { [0] + Frame.preamble() + frames.joined() }
        func header(_ kind: Frame.Kind, _ length: Int) -> [UInt8] {
            var out = [kind.rawValue]
            appendBigEndian(UInt32(length), to: &out)
            appendBigEndian(0, to: &out)
            return out
        }
        seeds.append(("bad-oversized-hello", stream(header(.hello, 64 << 20))))
        seeds.append(("bad-oversized-reconcile", stream(hello, header(.reconcile, 9 << 20))))
        seeds.append(("bad-oversized-done", stream(hello, header(.done, 1 << 20))))
        for declared in [true, false] {
            var payload: [UInt8] = []
            appendBigEndian(1000, to: &payload)
            payload += IncomingSessionTests.zerosFrame(blocks: 512, declared: declared)
            seeds.append(
                (
                    "bad-zeros-batch\(declared ? "" : "-undeclared")",
                    stream(hello, Frame(kind: .batch, payload: payload).encoded())
                ))
        }
        let two = all.prefix(2).map { ReplicatedEvent(id: $0.id, json: $0.json) }
        var extra = try BatchCodec.encode(two, compressor: Compressor(level: 1))
        extra[3] = 1  // claims one record, holds two
        seeds.append(("bad-batch-extra-records", stream(hello, Frame(kind: .batch, payload: extra).encoded())))
        var long: [UInt8] = []
        all[0].id.append(to: &long)
        appendBigEndian(UInt32(StoreOptions.absoluteMaxEventBytes + 1), to: &long)
        long += all[0].json
        var longPayload: [UInt8] = []
        appendBigEndian(1, to: &longPayload)
        longPayload += try Compressor(level: 1).compress(long, dictionary: nil)
        seeds.append(("bad-batch-record-too-long", stream(hello, Frame(kind: .batch, payload: longPayload).encoded())))
        // A new node's first session: the peer's dictionaries, then done; and a dictionary
        // frame whose first length runs past its payload.
        let sample = try FuzzEntry.sampleDictionary().bytes
        let dictionaries = Frame(
            kind: .dictionary, payload: DictionaryFrame.encode(SharedDictionaries(events: sample, records: sample))
        ).encoded()
        let done = Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 0, reconciled: 0))).encoded()
        seeds.append(("session-dictionary", stream(hello, dictionaries, done)))
        var cut = DictionaryFrame.encode(SharedDictionaries(events: sample, records: nil))
        cut[2] = 0xFF
        seeds.append(("bad-dictionary-lengths", stream(hello, Frame(kind: .dictionary, payload: cut).encoded())))
        seeds += hostilePeerSeeds(node: node)
        for (name, bytes) in seeds {
            try Data(bytes).write(to: directory.appendingPathComponent(name))
        }
    }

    /// What the hostile peers of `SessionLimitTests` send, small enough for the fuzzer:
    /// reconcile frames full of needs for ids never seen, a hello whose name is not a node
    /// name, a batch of nothing but invalid events.
    func hostilePeerSeeds(node: ULID) -> [(String, [UInt8])] {
        func stream(_ frames: [Frame]) -> [UInt8] {
            [0] + Frame.preamble() + frames.flatMap { $0.encoded() }
        }
        func hello(name: String) -> Frame {
            let last = ULID(high: FuzzEntry.sampleID.high, low: 9)
            return Frame(
                kind: .hello,
                payload: Messages.encode(
                    Messages.Hello(
                        protocolVersion: Frame.protocolVersion, node: node.description, name: name,
                        vector: [node.description: last.description],
                        ranges: [
                            Messages.WireRange(
                                origin: node.description, after: nil, through: last.description, count: 3,
                                hash: String(repeating: "ab", count: 16), ids: nil)
                        ])))
        }
        var next: UInt64 = 100
        let needs = (0..<3).map { _ in
            let ids = (0..<40).map { _ in
                next += 1
                return ULID(high: FuzzEntry.sampleID.high, low: next).description
            }
            let range = Messages.WireRange(
                origin: node.description, after: nil, through: ULID(high: FuzzEntry.sampleID.high, low: 9).description,
                count: 3, hash: String(repeating: "cd", count: 16), ids: nil)
            return Frame(kind: .reconcile, payload: Messages.encode(Messages.Reconcile(ranges: [range], needs: ids)))
        }
        let invalid = (1...60).map { index in
            ReplicatedEvent(
                id: ULID(high: FuzzEntry.sampleID.high, low: UInt64(index)),
                json: Array(#"{"entity":"job/\#(index)","kind":"teleport","origin":"\#(node)"}"#.utf8))
        }
        let batch = Frame(
            kind: .batch, payload: (try? BatchCodec.encode(invalid, compressor: Compressor(level: 1))) ?? [])
        return [
            ("session-endless-needs", stream([hello(name: "needy")] + needs)),
            ("bad-hello-name", stream([hello(name: String(repeating: "x", count: 200))])),
            ("session-too-many-invalid", stream([hello(name: "invalid-1"), batch])),
        ]
    }
}
