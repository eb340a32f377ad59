import Foundation
import Projections
import Testing

@testable import EventStore

/// Writes `Tests/Fixtures/store-format-6` with the code of this commit (store format 6):
/// run only by hand, with EVSTORE_FORMAT6_FIXTURE naming the output directory and
/// EVSTORE_FORMAT6_WORKLOAD the prefix of `fieldops.py --events 300 --replicas 2
/// --overlap 0.3 --out-prefix PREFIX`.
@Suite struct FormatSixFixtureWriter {
    static let output = ProcessInfo.processInfo.environment["EVSTORE_FORMAT6_FIXTURE"]
    static let workload = ProcessInfo.processInfo.environment["EVSTORE_FORMAT6_WORKLOAD"]

    @Test(.enabled(if: output != nil && workload != nil))
    func writeFixture() throws {
        let out = try #require(FormatSixFixtureWriter.output)
        let prefix = try #require(FormatSixFixtureWriter.workload)
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-fx6-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: base) }
        var optionsB = StoreOptions()
        optionsB.maxEventBytes = 131_072
        // Node a keeps blobs beside its store, as the daemon does: the references its
        // events make are indexed, and those it lacks listed as pending.
        try FileManager.default.createDirectory(atPath: base + "/a", withIntermediateDirectories: true)
        let blobs = try BlobStore(directory: base + "/a/blobs")
        var optionsA = StoreOptions()
        optionsA.blobPresent = { [blobs] hash in blobs.contains(hash) }
        let a = try EventLog.open(directory: base + "/a", options: optionsA)
        let b = try EventLog.open(directory: base + "/b", options: optionsB)
        func inputs(_ replica: Int) throws -> [InputEvent] {
            let data = try Data(contentsOf: URL(fileURLWithPath: "\(prefix).\(replica).ndjson"))
            return try Array(data).split(separator: 0x0A).map { try EventCodec.decodeInput(Array($0)) }
        }
        func sync(_ from: EventLog, _ to: EventLog) throws {
            for origin in [from.nodeID, to.nodeID] {
                let page = try from.replicationEvents(origin: origin, after: nil, limit: 100_000, maxBytes: .max)
                _ = try to.ingest(page.events, from: "peer")
            }
        }
        let first = try inputs(0)
        for chunk in stride(from: 0, to: first.count, by: 50) {
            _ = try a.append(Array(first[chunk..<min(chunk + 50, first.count)]))
            if chunk == 200 { _ = try a.trainDictionary() }
        }
        _ = try b.append(try inputs(1))
        // An idempotency key (and its second use), a deleted and restored entity, a field
        // edited on both nodes before they sync (a conflict), a value too large for a's limit.
        let keyed = InputEvent(entity: entity("job/fx6-keyed"), change: .status("assigned"), key: "fx6-key-1")
        _ = try a.append([keyed])
        _ = try a.append([keyed])
        _ = try a.append([InputEvent(entity: entity("job/fx6-gone"), change: .status("open"))])
        _ = try a.append([InputEvent(entity: entity("job/fx6-gone"), change: .delete)])
        _ = try a.append([InputEvent(entity: entity("job/fx6-gone"), change: .restore)])
        for (log, value) in [(a, "\"north\""), (b, "\"south\"")] {
            _ = try log.append([
                InputEvent(
                    entity: entity("job/fx6-conflict"),
                    change: .edit([FieldChange(name: "address", value: try JSONBytes(parsing: value))]))
            ])
        }
        let large = String(repeating: "x", count: 70_000)
        _ = try b.append([
            InputEvent(
                entity: entity("job/fx6-large"),
                change: .edit([FieldChange(name: "notes", value: try JSONBytes(parsing: "\"\(large)\""))]))
        ])
        // Blob references: one to a blob a holds (its bytes go into the fixture's blobs
        // directory), one b makes to a blob a never gets, one as a set element, and one
        // overwritten by a plain value.
        let held = Array("the meter at 12 Main St reads 004711\n".utf8)
        let heldHash = try blobs.put(held, owner: 1).hash
        let absent = Array("a signature a never receives".utf8)
        let absentHash = BlobHash.of(absent)
        let gone = Array("a photo taken twice".utf8)
        func reference(_ hash: BlobHash, _ size: Int, _ type: String) throws -> JSONBytes {
            try JSONBytes(parsing: "{\"$blob\":\"\(hash)\",\"size\":\(size),\"type\":\"\(type)\"}")
        }
        _ = try a.append([
            InputEvent(
                entity: entity("job/fx6-photo"),
                change: .edit([FieldChange(name: "meter_photo", value: try reference(heldHash, held.count, "image/jpeg"))]))
        ])
        _ = try b.append([
            InputEvent(
                entity: entity("job/fx6-photo"),
                change: .edit([FieldChange(name: "signature", value: try reference(absentHash, absent.count, "image/png"))])),
            InputEvent(
                entity: entity("job/fx6-photo"),
                change: .add(set: "documents", element: try reference(heldHash, held.count, "image/jpeg"))),
            InputEvent(
                entity: entity("job/fx6-overwritten"),
                change: .edit([FieldChange(name: "photo", value: try reference(BlobHash.of(gone), gone.count, "image/jpeg"))])),
            InputEvent(
                entity: entity("job/fx6-overwritten"),
                change: .edit([FieldChange(name: "photo", value: try JSONBytes(parsing: "null"))])),
        ])
        try sync(a, b)
        try sync(b, a)
        // One more on each side, synced: the seq order then differs from the id order.
        _ = try b.append([InputEvent(entity: entity("job/fx6-late"), change: .status("open"))])
        _ = try a.append([InputEvent(entity: entity("job/fx6-own"), change: .status("open"))])
        try sync(b, a)
        // An event a peer sends that no version accepts (an unknown kind): a dead letter.
        let bad = Array(
            "{\"by\":\"tech-9\",\"entity\":\"job/fx6-bad\",\"kind\":\"teleport\",\"origin\":\"\(b.nodeID)\"}".utf8)
        let letter = try a.ingest([ReplicatedEvent(id: ULID(high: b.nodeID.high, low: b.nodeID.low &+ 12_345), json: bad)], from: "peer")
        #expect(letter.deadLettered.count == 1)

        // A durable consumer that has acknowledged part of the log.
        _ = try a.ackConsumer("bridge", seq: 100)

        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: base + "/copy")
        try a.backup(to: base + "/copy", compact: true)
        try? FileManager.default.removeItem(atPath: out + "/data.mdb")
        try FileManager.default.copyItem(atPath: base + "/copy/data.mdb", toPath: out + "/data.mdb")

        let blobFolder = out + "/blobs/sha256/" + String(heldHash.hex.prefix(2))
        try FileManager.default.createDirectory(atPath: blobFolder, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: blobFolder + "/" + heldHash.hex)
        try FileManager.default.copyItem(atPath: blobs.path(of: heldHash), toPath: blobFolder + "/" + heldHash.hex)

        let feed = try a.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        var log: [UInt8] = []
        var entities = Set<EntityKey>()
        for item in feed.events {
            log += Array("{\"seq\":\(item.seq),\"event\":".utf8) + EventCodec.encodeStored(item.event, includeID: true)
            log += Array("}\n".utf8)
            entities.insert(item.event.entity)
        }
        try Data(log).write(to: URL(fileURLWithPath: out + "/log.ndjson"))
        var states: [UInt8] = []
        for entity in entities.sorted(by: { $0.bytes.lexicographicallyPrecedes($1.bytes) }) {
            states += try #require(try a.canonicalState(of: entity)) + [0x0A]
        }
        try Data(states).write(to: URL(fileURLWithPath: out + "/states.ndjson"))
        let statistics = try a.statistics()
        let pending = try a.pendingBlobs().map(\.hash.description).sorted()
        let references = try a.reading { txn in try txn.stat(a.tables.blobReferences).entries }
        let letters = try a.deadLetters(limit: 1000)
        let status: [String: Any] = [
            "events": statistics.events, "entities": statistics.entities, "digest": statistics.digest.description,
            "conflicts": statistics.conflicts, "dead_letters": statistics.deadLetters, "seq": statistics.seq,
            "dead_letter_ids": letters.map { $0.id ?? "" }, "idempotency_key": "fx6-key-1", "blob_held": heldHash.description,
            "blob_absent": absentHash.description, "blob_overwritten": BlobHash.of(gone).description,
            "blob_pending": pending, "blob_references": references, "format": 6, "consumer_bridge": 100,
            "idempotency_id": try #require(try a.reading { txn in
                try txn.get(a.tables.keys, Array("fx6-key-1".utf8)).flatMap { ULID(bytes: $0) }
            }).description,
        ]
        try JSONSerialization.data(withJSONObject: status, options: [.prettyPrinted, .sortedKeys]).write(
            to: URL(fileURLWithPath: out + "/status.json"))
    }
}
