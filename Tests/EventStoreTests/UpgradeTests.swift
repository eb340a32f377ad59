import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// The stores 0.4.0 wrote (store format 2, `Tests/Fixtures/store-format-2`), opened by this
/// version: upgraded in place, and answering what 0.4.0 answered, plus the commit sequence.
@Suite struct UpgradeTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/store-format-2")

    /// A copy of the fixture's `data.mdb` in a temp directory (the fixture itself stays as
    /// 0.4.0 left it).
    static func copy(_ name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evstore-upgrade-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: fixtures.appendingPathComponent("\(name)/data.mdb").path, toPath: directory + "/data.mdb")
        return directory
    }

    static func lines(_ name: String, _ file: String) throws -> [[UInt8]] {
        let data = try Data(contentsOf: fixtures.appendingPathComponent("\(name)/\(file)"))
        return Array(data).split(separator: 0x0A).map(Array.init)
    }

    static func object(_ name: String, _ file: String) throws -> [String: Any] {
        let data = try Data(contentsOf: fixtures.appendingPathComponent("\(name)/\(file)"))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    /// `get`'s answer without the `rev` this version adds as its last member.
    static func withoutRev(_ json: [UInt8]) -> (state: [UInt8], rev: UInt64?) {
        let text = String(decoding: json, as: UTF8.self)
        guard let range = text.range(of: #","rev":"#, options: .backwards) else { return (json, nil) }
        let digits = text[range.upperBound...].dropLast()
        return (Array(text[..<range.lowerBound].utf8) + [UInt8(ascii: "}")], UInt64(digits))
    }

    @Test(arguments: ["a", "b"])
    func formatTwoStoreUpgradesAndAnswersAsBefore(name: String) throws {
        let directory = try UpgradeTests.copy(name)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = StoreOptions()
        options.maxEventBytes = 131_072
        var log: EventLog? = try EventLog.open(directory: directory, options: options)
        let format = try log!.reading { txn in try txn.get(log!.tables.meta, EventLog.Meta.format) }
        #expect(format == bigEndian(EventLog.formatVersion))

        // Every event, as 0.4.0's `log` gave them (id order), now with seqs 1...N in that order.
        let expectedLog = try UpgradeTests.lines(name, "log.ndjson")
        let feed = try log!.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(feed.next == nil)
        #expect(feed.head == UInt64(expectedLog.count))
        #expect(feed.events.map(\.seq) == Array(1...UInt64(expectedLog.count)))
        #expect(feed.events.map { EventCodec.encodeStored($0.event, includeID: true) } == expectedLog)
        let seqOfID = Dictionary(uniqueKeysWithValues: feed.events.map { ($0.event.id, $0.seq) })

        // Every entity's state, equal to 0.4.0's apart from the rev, which is the greatest
        // seq among its events.
        let states = try UpgradeTests.lines(name, "states.ndjson")
        for line in states {
            let entityText = try #require(
                (try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])?["entity"] as? String)
            let entity = entity(entityText)
            let got = try #require(try log!.canonicalState(of: entity))
            let (state, rev) = UpgradeTests.withoutRev(got)
            #expect(state == line, "state of \(entity)")
            let events = try log!.events(ofEntity: entity, limit: 100_000).events
            #expect(rev == events.compactMap { seqOfID[$0.id] }.max(), "rev of \(entity)")
            #expect(try log!.rev(of: entity) == rev)
        }

        // Counts and the digest, as 0.4.0's status reported them.
        let status = try UpgradeTests.object(name, "status.json")
        let statistics = try log!.statistics()
        #expect(statistics.events == status["events"] as? Int)
        #expect(statistics.entities == status["entities"] as? Int)
        #expect(statistics.entities == states.count)
        #expect(statistics.digest.description == status["digest"] as? String)
        let attention = try #require(status["needs_attention"] as? [String: Any])
        #expect(statistics.conflicts == attention["conflicts"] as? Int)
        #expect(statistics.deadLetters == attention["dead_letters"] as? Int)
        #expect(statistics.seq == UInt64(expectedLog.count))
        #expect(log!.sequenceHead == UInt64(expectedLog.count))

        // Dead letters, kept as they were.
        let expectedLetters = try #require(
            try UpgradeTests.object(name, "dead_letters.json")["dead_letters"] as? [[String: Any]])
        let letters = try log!.deadLetters(limit: 1000)
        #expect(letters.count == expectedLetters.count)
        for (letter, expected) in zip(letters, expectedLetters) {
            #expect(letter.key.description == expected["key"] as? String)
            #expect(letter.id == expected["id"] as? String)
            #expect(letter.origin == expected["origin"] as? String)
            #expect(letter.reason == expected["reason"] as? String)
            #expect(String(decoding: letter.raw, as: UTF8.self) == expected["raw"] as? String)
        }

        let report = try log!.rebuild(verify: true)
        #expect(report.mismatched.isEmpty)
        #expect(!report.digestMismatch)
        #expect(report.unsequenced == 0)
        #expect(report.events == expectedLog.count)

        // The upgrade is done once: reopened, the seqs stay, and the next event takes N + 1.
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        #expect(log!.sequenceHead == UInt64(expectedLog.count))
        let result = try log!.append([InputEvent(entity: entity("job/after-upgrade"), change: .delete)])
        #expect(result.revs[entity("job/after-upgrade")] == UInt64(expectedLog.count) + 1)
        #expect(try log!.feed(after: UInt64(expectedLog.count)).events.map(\.seq) == [UInt64(expectedLog.count) + 1])
        // The consumers table is new: empty after the upgrade, and it keeps what is acked.
        #expect(try log!.consumers().isEmpty)
        #expect(try log!.ackConsumer("hq", seq: UInt64(expectedLog.count)).seq == UInt64(expectedLog.count))
    }

    /// What the blocks and the index of ids cost per event, in the upgraded fixture store,
    /// in a store of 20,000 events appended in batches of 1 to 300, and in one of 3,000
    /// appended one event a commit (the last block topped up by each): printed, for the
    /// notes on storage.
    @Test func blockBytesPerEvent() throws {
        let directory = try UpgradeTests.copy("b")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = StoreOptions()
        options.maxEventBytes = 131_072
        let log = try EventLog.open(directory: directory, options: options)
        func perEvent(_ log: EventLog, _ table: String) throws -> Double {
            let found = try #require(try log.storageBreakdown().tables.first { $0.name == table })
            return Double(found.bytes) / Double(try log.statistics().events)
        }
        let upgraded = (try perEvent(log, "event_blocks"), try perEvent(log, "events"))
        print("event_blocks, events: \(upgraded) bytes per event in the upgraded fixture")

        func fresh(_ batches: (inout SystemRandomNumberGenerator) -> Int, total: Int) throws -> (Double, Double) {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
                "evstore-blocks-\(UUID().uuidString)"
            ).path
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let store = try EventLog.open(directory: directory)
            var generator = SystemRandomNumberGenerator()
            var appended = 0
            while appended < total {
                let count = min(batches(&generator), total - appended)
                _ = try store.append(
                    (0..<count).map {
                        InputEvent(entity: entity("job/\(appended + $0)"), change: .status("assigned"))
                    })
                appended += count
            }
            let feed = try store.feed(after: 0, limit: 100_000, scanLimit: 100_000)
            #expect(feed.events.count == total)
            #expect(feed.events.map(\.seq) == Array(1...UInt64(total)), "the feed's seqs are not 1 to \(total)")
            #expect(try store.rebuild(verify: true).unsequenced == 0)
            return (try perEvent(store, "event_blocks"), try perEvent(store, "events"))
        }
        let batched = try fresh({ Int.random(in: 1...300, using: &$0) }, total: 20_000)
        print("event_blocks, events: \(batched) bytes per event after batches of 1 to 300")
        let single = try fresh({ _ in 1 }, total: 3_000)
        print("event_blocks, events: \(single) bytes per event after 3,000 commits of one event")
        // One value per event took 91.6 bytes (and the sequence 16.4 more) in the field
        // workload; a block of these tiny status events takes under a third of that.
        #expect(batched.0 < 30 && single.0 < 30)
        #expect(upgraded.0 < 60)
    }

    static let formatThree = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/store-format-3-dev")

    /// A store of format 3 (development builds after 0.4.0: an entry per event in `seq`)
    /// is upgraded to blocks: the same seqs name the same events, revs stay, and the next
    /// event takes the next seq.
    @Test func formatThreeStoreKeepsItsSeqs() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evstore-upgrade3-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.copyItem(
            atPath: UpgradeTests.formatThree.appendingPathComponent("data.mdb").path, toPath: directory + "/data.mdb")
        var log: EventLog? = try EventLog.open(directory: directory)
        let format = try log!.reading { txn in try txn.get(log!.tables.meta, EventLog.Meta.format) }
        #expect(format == bigEndian(EventLog.formatVersion))

        let data = try Data(contentsOf: UpgradeTests.formatThree.appendingPathComponent("log.ndjson"))
        let expected = try Array(data).split(separator: 0x0A).map { line -> (UInt64, String) in
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            return (try #require((object["seq"] as? NSNumber)?.uint64Value), try #require(object["id"] as? String))
        }
        #expect(expected.count == 602)
        let feed = try log!.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(feed.events.map(\.seq) == expected.map(\.0))
        #expect(feed.events.map(\.event.id.description) == expected.map(\.1))
        #expect(feed.head == 602)
        // Resuming anywhere gives the rest, in the same order.
        for after in [0, 1, 125, 126, 127, 300, 601, 602] as [UInt64] {
            let page = try log!.feed(after: after, limit: 100_000, scanLimit: 100_000)
            #expect(page.events.map(\.seq) == expected.map(\.0).filter { $0 > after })
        }

        let revsData = try Data(contentsOf: UpgradeTests.formatThree.appendingPathComponent("revs.json"))
        let revs = try #require(try JSONSerialization.jsonObject(with: revsData) as? [String: Int])
        #expect(revs.count == 57)
        for (name, rev) in revs { #expect(try log!.rev(of: entity(name)) == UInt64(rev), "rev of \(name)") }
        let report = try log!.rebuild(verify: true)
        #expect(report.mismatched.isEmpty && !report.digestMismatch && report.unsequenced == 0)

        log = nil
        log = try EventLog.open(directory: directory)
        let result = try log!.append([InputEvent(entity: entity("job/after-upgrade"), change: .delete)])
        #expect(result.revs[entity("job/after-upgrade")] == 603)
        #expect(try log!.feed(after: 602).events.map(\.seq) == [603])
    }

    static let formatFour = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/store-format-4")

    /// A store of format 4 (`Tests/Fixtures/store-format-4`) opened by this version: the
    /// status histories move into the projection records and the origin index is written
    /// again, and every answer stays as format 4 gave it: each entity's state with its
    /// history and rev, the events with their seqs, counts and digest, the dead letter, the
    /// idempotency key. A fresh store that imports the same events answers the same.
    @Test func formatFourStoreUpgradesAndAnswersAsBefore() throws {
        let fixture = UpgradeTests.formatFour
        let directory = try FixtureStore.copy(fixture, name: "upgrade4")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var options = StoreOptions()
        options.maxEventBytes = 131_072
        var log: EventLog? = try EventLog.open(directory: directory, options: options)
        let format = try log!.reading { txn in try txn.get(log!.tables.meta, EventLog.Meta.format) }
        #expect(format == bigEndian(EventLog.formatVersion))
        // Every history here is short: each is in its entity's record now.
        #expect(try log!.reading { txn in try txn.stat(log!.tables.statusHistory).entries } == 0)

        // Every event with the seq format 4 gave it (the seq order is not the id order at the end).
        let expected = try FixtureStore.sequencedLog(fixture)
        #expect(expected.count == 609)
        let feed = try log!.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(feed.events.map(\.seq) == expected.map(\.seq))
        #expect(feed.events.map { EventCodec.encodeStored($0.event, includeID: true) } == expected.map(\.event))
        #expect(feed.events.map(\.event.id) != feed.events.map(\.event.id).sorted())

        // Every entity's state, history and rev, byte for byte.
        let entities = try FixtureStore.checkStates(fixture, log!)
        #expect(entities.count == 61)

        let status = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: fixture.appendingPathComponent("status.json")))
                as? [String: Any])
        let statistics = try log!.statistics()
        #expect(statistics.events == status["events"] as? Int)
        #expect(statistics.entities == status["entities"] as? Int)
        #expect(statistics.digest.description == status["digest"] as? String)
        #expect(statistics.conflicts == status["conflicts"] as? Int)
        #expect(statistics.deadLetters == status["dead_letters"] as? Int)
        #expect(statistics.seq == 609)
        #expect(try log!.deadLetters(limit: 100).map { $0.id ?? "" } == status["dead_letter_ids"] as? [String])
        let report = try log!.rebuild(verify: true)
        #expect(report.mismatched.isEmpty && !report.digestMismatch && report.unsequenced == 0)

        // A fresh store that imports the same events holds the same states and histories.
        let fresh = try TempStore { $0.maxEventBytes = 131_072 }
        let byID = try expected.map(\.event).sorted {
            try EventCodec.decodeStored($0).id < (try EventCodec.decodeStored($1).id)
        }
        #expect(try fresh.log.importEvents(byID).imported.count == 609)
        for entity in entities {
            let upgraded = try #require(try log!.canonicalState(of: entity))
            let imported = try #require(try fresh.log.canonicalState(of: entity))
            #expect(UpgradeTests.withoutRev(upgraded).state == UpgradeTests.withoutRev(imported).state, "\(entity)")
            #expect(try log!.statusHistory(of: entity) == (try fresh.log.statusHistory(of: entity)))
        }
        #expect(try fresh.log.statistics().digest == statistics.digest)

        // The key still names its first event; the next event takes seq 610, after a reopen too.
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        let keyed = InputEvent(entity: entity("job/fx4-keyed"), change: .status("assigned"), key: "fx4-key-1")
        let again = try log!.append([keyed])
        #expect(again.ids.map(\.description) == [try #require(status["idempotency_id"] as? String)])
        #expect(again.written.isEmpty)
        let result = try log!.append([InputEvent(entity: entity("job/fx4-gone"), change: .status("closed"))])
        #expect(result.revs[entity("job/fx4-gone")] == 610)
        #expect(try log!.statusHistory(of: entity("job/fx4-gone")).map(\.status) == ["open", "closed"])
        #expect(try log!.consumers().isEmpty)
        #expect(try log!.ackConsumer("hq", seq: 610).seq == 610)
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        #expect(try log!.consumer(named: "hq")?.seq == 610)
    }
}

/// The store format 5 wrote (`Tests/Fixtures/store-format-5`, with the blob it held beside
/// it), opened by this version: the upgrade to format 6 lists the blobs the stored events
/// name that the node does not hold, and everything else answers as format 5 gave it.
@Suite struct FormatFiveUpgradeTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/store-format-5")

    @Test func formatFiveStoreListsItsPendingBlobsAndAnswersAsBefore() throws {
        let fixture = FormatFiveUpgradeTests.fixture
        let directory = try FixtureStore.copy(fixture, name: "upgrade5")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let blobs = try BlobStore(directory: directory + "/blobs")
        var options = StoreOptions()
        options.maxEventBytes = 131_072
        options.blobPresent = { [blobs] hash in blobs.contains(hash) }
        let status = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: fixture.appendingPathComponent("status.json")))
                as? [String: Any])
        func hash(_ key: String) throws -> BlobHash {
            let text = try #require(status[key] as? String)
            return try #require(BlobHash(text))
        }
        let held = try hash("blob_held")
        let absent = try hash("blob_absent")
        let overwritten = try hash("blob_overwritten")
        #expect(blobs.contains(held) && !blobs.contains(absent) && !blobs.contains(overwritten))

        var log: EventLog? = try EventLog.open(directory: directory, options: options)
        let format = try log!.reading { txn in try txn.get(log!.tables.meta, EventLog.Meta.format) }
        #expect(format == bigEndian(EventLog.formatVersion))
        #expect(EventLog.formatVersion == 7)

        // Named by stored events and not held: the signature b made and the photo b
        // overwrote (still named by a stored event). The held one is not pending.
        let pending = try log!.pendingBlobs()
        #expect(Set(pending.map(\.hash)) == [absent, overwritten], "\(pending)")
        #expect(try log!.isPendingBlob(held) == nil)
        #expect(try log!.isPendingBlob(absent)?.size == UInt64("a signature a never receives".utf8.count))

        // Every event with its seq, every state byte for byte, counts and digest.
        let expected = try FixtureStore.sequencedLog(fixture)
        #expect(expected.count == status["events"] as? Int)
        let feed = try log!.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(feed.events.map(\.seq) == expected.map(\.seq))
        #expect(feed.events.map { EventCodec.encodeStored($0.event, includeID: true) } == expected.map(\.event))
        let entities = try FixtureStore.checkStates(fixture, log!)
        #expect(entities.count == status["entities"] as? Int)
        let statistics = try log!.statistics()
        #expect(statistics.events == status["events"] as? Int)
        #expect(statistics.entities == status["entities"] as? Int)
        #expect(statistics.digest.description == status["digest"] as? String)
        #expect(statistics.conflicts == status["conflicts"] as? Int)
        #expect(statistics.deadLetters == status["dead_letters"] as? Int)
        #expect(statistics.seq == UInt64(status["seq"] as? Int ?? 0))
        #expect(try log!.deadLetters(limit: 100).map { $0.id ?? "" } == status["dead_letter_ids"] as? [String])
        let report = try log!.rebuild(verify: true)
        #expect(report.mismatched.isEmpty && !report.digestMismatch && report.unsequenced == 0)

        // Once upgraded, the list is kept in the events' transactions: a new reference to
        // a blob not held is listed, and one that arrives is taken off by the writer's job.
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        #expect(Set(try log!.pendingBlobs().map(\.hash)) == [absent, overwritten])
        let keyed = InputEvent(entity: entity("job/fx5-keyed"), change: .status("assigned"), key: "fx5-key-1")
        #expect(try log!.append([keyed]).ids.map(\.description) == [try #require(status["idempotency_id"] as? String)])
        let seq = UInt64(try #require(status["seq"] as? Int))
        let next = try log!.append([InputEvent(entity: entity("job/fx5-after"), change: .status("open"))])
        #expect(next.revs[entity("job/fx5-after")] == seq + 1)
    }
}

/// The store format 6 wrote (`Tests/Fixtures/store-format-6`: each event a value of its
/// own, the sequence in `seq_blocks`), opened by this version: its events move into blocks
/// in the order of their seqs, `seq_blocks` goes, and everything answers as format 6 gave it.
@Suite struct FormatSixUpgradeTests {
    static let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/store-format-6")

    @Test func formatSixStoreMovesIntoBlocksAndAnswersAsBefore() throws {
        let fixture = FormatSixUpgradeTests.fixture
        let directory = try FixtureStore.copy(fixture, name: "upgrade6")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let blobs = try BlobStore(directory: directory + "/blobs")
        var options = StoreOptions()
        options.maxEventBytes = 131_072
        options.blobPresent = { [blobs] hash in blobs.contains(hash) }
        let status = try #require(
            try JSONSerialization.jsonObject(with: Data(contentsOf: fixture.appendingPathComponent("status.json")))
                as? [String: Any])
        #expect(status["format"] as? Int == 6)

        var log: EventLog? = try EventLog.open(directory: directory, options: options)
        #expect(log!.storedFormat == 6)
        let format = try log!.reading { txn in try txn.get(log!.tables.meta, EventLog.Meta.format) }
        #expect(format == bigEndian(EventLog.formatVersion))
        // `seq_blocks` is gone from the file, not only emptied.
        let names = try log!.reading { txn in
            try txn.withCursor(Database(rawValue: 1)) { cursor in
                var names: [String] = []
                var item = try cursor.first()
                while let current = item {
                    names.append(String(decoding: current.key, as: UTF8.self))
                    item = try cursor.next()
                }
                return names
            }
        }
        #expect(!names.contains("seq_blocks") && names.contains("event_blocks"), "\(names)")

        // Every event with its seq, in seq order; and each by its id.
        let expected = try FixtureStore.sequencedLog(fixture)
        #expect(expected.count == status["events"] as? Int)
        let feed = try log!.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(feed.events.map(\.seq) == expected.map(\.seq))
        #expect(feed.events.map { EventCodec.encodeStored($0.event, includeID: true) } == expected.map(\.event))
        for item in feed.events {
            #expect(try log!.event(item.event.id) == item.event)
        }
        for after in [0, 1, 63, 64, 65, 300, 613, 614] as [UInt64] {
            #expect(
                try log!.feed(after: after, limit: 100_000, scanLimit: 100_000).events.map(\.seq)
                    == expected.map(\.seq).filter { $0 > after })
        }

        // States, counts, digest, the dead letter, blobs, the consumer.
        try FixtureStore.checkStates(fixture, log!)
        let statistics = try log!.statistics()
        #expect(statistics.events == status["events"] as? Int)
        #expect(statistics.entities == status["entities"] as? Int)
        #expect(statistics.digest.description == status["digest"] as? String)
        #expect(statistics.conflicts == status["conflicts"] as? Int)
        #expect(statistics.deadLetters == status["dead_letters"] as? Int)
        #expect(statistics.seq == UInt64(status["seq"] as? Int ?? 0))
        #expect(try log!.deadLetters(limit: 100).map { $0.id ?? "" } == status["dead_letter_ids"] as? [String])
        #expect(try log!.pendingBlobs().map(\.hash.description).sorted() == status["blob_pending"] as? [String])
        #expect(
            try log!.reading { txn in try txn.stat(log!.tables.blobReferences).entries }
                == status["blob_references"] as? Int)
        #expect(try log!.consumer(named: "bridge")?.seq == UInt64(status["consumer_bridge"] as? Int ?? 0))
        let report = try log!.rebuild(verify: true)
        #expect(report.mismatched.isEmpty && !report.digestMismatch && report.unsequenced == 0, "\(report)")

        // Appends go on in blocks: the key's event, the next seq, after a reopen too.
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        let keyed = InputEvent(entity: entity("job/fx6-keyed"), change: .status("assigned"), key: "fx6-key-1")
        #expect(try log!.append([keyed]).ids.map(\.description) == [try #require(status["idempotency_id"] as? String)])
        let seq = UInt64(try #require(status["seq"] as? Int))
        let next = try log!.append([InputEvent(entity: entity("job/fx6-after"), change: .status("open"))])
        #expect(next.revs[entity("job/fx6-after")] == seq + 1)
        #expect(try log!.feed(after: seq).events.map(\.seq) == [seq + 1])
        #expect(try log!.rebuild(verify: true).unsequenced == 0)
    }
}

/// What the upgrade tests of formats 4 and later read of a fixture: a copy of its store (and
/// of the blobs beside it) in a temp directory, its log with each event's seq, its states.
enum FixtureStore {
    /// A copy of `fixture`'s `data.mdb` (and `blobs/`, when it has them) in a new temp directory.
    static func copy(_ fixture: URL, name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evstore-\(name)-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try FileManager.default.copyItem(
            atPath: fixture.appendingPathComponent("data.mdb").path, toPath: directory + "/data.mdb")
        let blobs = fixture.appendingPathComponent("blobs").path
        if FileManager.default.fileExists(atPath: blobs) {
            try FileManager.default.copyItem(atPath: blobs, toPath: directory + "/blobs")
        }
        return directory
    }

    /// `log.ndjson`: each line `{"seq":N,"event":...}`, in seq order.
    static func sequencedLog(_ fixture: URL) throws -> [(seq: UInt64, event: [UInt8])] {
        let lines = try Array(Data(contentsOf: fixture.appendingPathComponent("log.ndjson")))
            .split(separator: 0x0A).map(Array.init)
        let prefix = Array(#"{"seq":"#.utf8)
        return try lines.map { line -> (seq: UInt64, event: [UInt8]) in
            let text = String(decoding: line, as: UTF8.self)
            let marker = try #require(text.range(of: #","event":"#))
            let seq = try #require(
                UInt64(text[text.index(text.startIndex, offsetBy: prefix.count)..<marker.lowerBound]))
            return (seq, Array(text[marker.upperBound...].dropLast().utf8))
        }
    }

    /// Checks every state of `states.ndjson` against `log`, byte for byte; the entities.
    @discardableResult
    static func checkStates(_ fixture: URL, _ log: EventLog) throws -> [EntityKey] {
        let states = try Array(Data(contentsOf: fixture.appendingPathComponent("states.ndjson")))
            .split(separator: 0x0A).map(Array.init)
        var entities: [EntityKey] = []
        for line in states {
            let name = try #require(
                (try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])?["entity"] as? String)
            entities.append(entity(name))
            #expect(try log.canonicalState(of: entity(name)) == line, "state of \(name)")
        }
        return entities
    }
}
