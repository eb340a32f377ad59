import EventStore
import Foundation
import Projections
import TestSupport
import Testing

@testable import Daemon

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

    @Test func syncStreamSeedsAndRegressions() {
        let seeds = FuzzInputs.files("Corpus", "sync-stream")
        #expect(seeds.count >= 6)
        for (name, bytes) in seeds + FuzzInputs.files("Regressions", "sync-stream") {
            do {
                let frames = try DaemonFuzzEntry.syncStream(bytes)
                #expect(name.hasPrefix("session"), "\(name) decoded \(frames) frames")
            } catch {
                #expect(!name.hasPrefix("session"), "\(name): \(error)")
                #expect(!"\(error)".isEmpty)
            }
        }
    }

    /// Writes the sync-stream seeds when EVSTORE_WRITE_FUZZ_SEEDS is set (see docs/fuzzing.md).
    @Test(.enabled(if: ProcessInfo.processInfo.environment["EVSTORE_WRITE_FUZZ_SEEDS"] != nil))
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
