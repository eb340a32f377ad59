import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// A store that does not add up is refused at open with `corrupt`, a message naming its
/// `data.mdb` and what is wrong, and is left byte for byte as it was.
@Suite("Store refused at open")
struct StoreOpenRefusalTests {
    /// A closed store of `count` events; its directory.
    static func store(
        events count: Int = 300, _ configure: (inout StoreOptions) -> Void = { _ in },
        edit: (EventLog) throws -> Void = { _ in }
    ) throws -> TempStore {
        let store = try TempStore(configure)
        _ = try store.log.append(workload(seed: 23, count: count))
        try edit(store.log)
        store.log = nil
        return store
    }

    /// Opens the store and expects a refusal whose message names the data file and says
    /// `problem`; expects the data file unchanged by the attempt.
    static func expectRefused(
        _ store: TempStore, saying problem: String, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let file = store.directory + "/data.mdb"
        let before = try Data(contentsOf: URL(fileURLWithPath: file))
        do {
            _ = try EventLog.open(directory: store.directory, options: store.options)
            Issue.record("the store opened", sourceLocation: sourceLocation)
        } catch {
            #expect(error.reason == .corrupt, "\(error)", sourceLocation: sourceLocation)
            #expect(error.message.contains(file), "\(error.message)", sourceLocation: sourceLocation)
            #expect(error.message.contains(problem), "\(error.message)", sourceLocation: sourceLocation)
        }
        let after = try Data(contentsOf: URL(fileURLWithPath: file))
        #expect(after == before, "the refused open changed data.mdb", sourceLocation: sourceLocation)
    }

    static func put(_ log: EventLog, _ key: [UInt8], _ value: [UInt8]) throws {
        try log.environment.write { txn in try txn.put(log.tables.meta, key, value) }
    }

    // MARK: Item 12: the data file against its meta pages

    enum Cut: String, CaseIterable {
        case half, eightKiB, belowTwoPages, belowOneMeta
        func size(of file: Int) -> Int {
            switch self {
            case .half: file / 2
            case .eightKiB: 8192
            case .belowTwoPages: 4096 + 100
            case .belowOneMeta: 100
            }
        }
    }

    @Test("a data.mdb cut short is refused before it is mapped", arguments: Cut.allCases)
    func truncatedDataFile(cut: Cut) throws {
        let store = try StoreOpenRefusalTests.store()
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let file = store.directory + "/data.mdb"
        let size = try #require(try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
        #expect(size > 4 * 8192, "the store is large enough that each cut loses pages")
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        try handle.truncate(atOffset: UInt64(cut.size(of: size)))
        try handle.close()
        try StoreOpenRefusalTests.expectRefused(store, saying: "is truncated")
    }

    @Test("a data.mdb that is not LMDB's is refused")
    func notAnLMDBFile() throws {
        let store = try StoreOpenRefusalTests.store(events: 10)
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let file = store.directory + "/data.mdb"
        var bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        bytes[16] ^= 0xFF  // the first meta page's magic
        try bytes.write(to: URL(fileURLWithPath: file))
        try StoreOpenRefusalTests.expectRefused(store, saying: "not an LMDB data file")
    }

    @Test("the meta pages are read as LMDB wrote them")
    func metaPagesOfARealFile() throws {
        let store = try StoreOpenRefusalTests.store(events: 50)
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        let bytes = Array(try Data(contentsOf: URL(fileURLWithPath: store.directory + "/data.mdb")))
        let first = try MetaPage.parse(Array(bytes.prefix(MetaPage.headerBytes))).get()
        let second = try MetaPage.parse(Array(bytes[first.pageSize..<first.pageSize + MetaPage.headerBytes])).get()
        #expect(first.pageSize == 4096)
        let newer = first.transactionID > second.transactionID ? first : second
        #expect(Int(newer.lastPage + 1) * first.pageSize <= bytes.count)
        #expect(Int(newer.lastPage + 1) * first.pageSize > bytes.count - first.pageSize)
        #expect(MetaPage.parse(Array(bytes[100..<100 + MetaPage.headerBytes])) == .failure(.notMeta))
    }

    @Test("LMDB's damage codes are corruption, and reach callers as corrupt")
    func corruptionCodes() {
        for code in [LMDBError.corrupted, .pageNotFound, .invalid, .versionMismatch] {
            #expect(code.isCorruption, "\(code.name)")
            #expect(EventStoreError.from(code).reason == .corrupt, "\(code.name)")
        }
        for code in [LMDBError.mapFull, .noSpace, .ioError, .notFound, .readersFull] {
            #expect(!code.isCorruption, "\(code.name)")
        }
        #expect(EventStoreError.from(LMDBError.ioError).reason == .unavailable)
    }

    // MARK: Item 13: dictionaries

    @Test("a dictionary version the store has no dictionary for is refused")
    func missingDictionary() throws {
        let store = try StoreOpenRefusalTests.store(edit: { log in
            try StoreOpenRefusalTests.put(log, EventLog.Meta.dictionaryVersion, bigEndian(UInt32(99)))
        })
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try StoreOpenRefusalTests.expectRefused(store, saying: "dictionary 99 is missing")
    }

    @Test("a trained dictionary gone from the table is refused, and so is one above the current version")
    func dictionaryTableDisagreesWithMeta() throws {
        let configure: (inout StoreOptions) -> Void = {
            $0.dictionaryTrainingThreshold = 400
            $0.dictionaryCapacity = 8 * 1024
        }
        let gone = try StoreOpenRefusalTests.store(
            events: 500, configure,
            edit: { log in
                #expect(try log.statistics().dictionaryVersion == 1)
                try log.environment.write { txn in _ = try txn.delete(log.tables.dictionaries, bigEndian(UInt32(1))) }
            })
        defer { try? FileManager.default.removeItem(atPath: gone.directory) }
        try StoreOpenRefusalTests.expectRefused(gone, saying: "dictionary 1 is missing")

        let above = try StoreOpenRefusalTests.store(
            events: 500, configure,
            edit: { log in
                try StoreOpenRefusalTests.put(log, EventLog.Meta.dictionaryVersion, bigEndian(UInt32(0)))
            })
        defer { try? FileManager.default.removeItem(atPath: above.directory) }
        try StoreOpenRefusalTests.expectRefused(above, saying: "but the store holds dictionary 1")
    }

    // MARK: Item 14: seq, node id, format

    @Test("a sequence head no release reaches is refused", arguments: [UInt64.max, 1 << 63])
    func sequenceHeadAtTheEnd(head: UInt64) throws {
        let store = try StoreOpenRefusalTests.store(edit: { log in
            try StoreOpenRefusalTests.put(log, EventLog.Meta.sequenceHead, bigEndian(head))
        })
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try StoreOpenRefusalTests.expectRefused(store, saying: "commit sequence is at \(head)")
    }

    @Test("an append at the sequence's end is an error, not a trap, and stores nothing")
    func appendAtTheSequenceEnd() throws {
        let store = try TempStore()
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        _ = try store.log.append(workload(seed: 3, count: 10))
        // What open now refuses, made while the store is open.
        try StoreOpenRefusalTests.put(store.log, EventLog.Meta.sequenceHead, bigEndian(UInt64.max))
        store.log.committedSequence.store(UInt64.max, ordering: .releasing)
        do {
            _ = try store.log.append([InputEvent(entity: entity("job/x"), change: .status("assigned"))])
            Issue.record("an append took a seq past the end")
        } catch {
            #expect(error.reason == .corrupt)
            #expect(error.message.contains("commit sequence is at its end"))
        }
        #expect(try store.log.statistics().events == 10)
        #expect(store.log.sequenceHead == UInt64.max)
    }

    @Test("a node id of the wrong length is refused, not replaced", arguments: [0, 15, 17])
    func nodeIDOfTheWrongLength(length: Int) throws {
        let store = try StoreOpenRefusalTests.store(edit: { log in
            try StoreOpenRefusalTests.put(
                log, EventLog.Meta.nodeID, Array(log.nodeID.bytes.prefix(length)) + (length > 16 ? [7] : []))
        })
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try StoreOpenRefusalTests.expectRefused(store, saying: "node id is \(length) bytes")
    }

    @Test("format 0, which no release wrote, is refused rather than upgraded")
    func formatZero() throws {
        let store = try StoreOpenRefusalTests.store(edit: { log in
            try StoreOpenRefusalTests.put(log, EventLog.Meta.format, bigEndian(UInt32(0)))
        })
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try StoreOpenRefusalTests.expectRefused(store, saying: "format 0")
    }

    @Test("a format newer than this version is refused")
    func formatNewer() throws {
        let store = try StoreOpenRefusalTests.store(edit: { log in
            try StoreOpenRefusalTests.put(log, EventLog.Meta.format, bigEndian(EventLog.formatVersion + 1))
        })
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try StoreOpenRefusalTests.expectRefused(store, saying: "newer evstore (format \(EventLog.formatVersion + 1))")
    }

    @Test("a store that adds up opens after the checks, and a fresh one is made as before")
    func soundStoresOpen() throws {
        let store = try StoreOpenRefusalTests.store(events: 50)
        defer { try? FileManager.default.removeItem(atPath: store.directory) }
        try store.reopen()
        #expect(try store.log.statistics().events == 50)
        #expect(store.log.sequenceHead == 50)
        try store.check()
        // An empty data.mdb is a new environment to LMDB, and to the check.
        let empty = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-empty-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: empty) }
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: empty + "/data.mdb", contents: Data()))
        let fresh = try EventLog.open(directory: empty)
        #expect(try fresh.statistics().events == 0)
    }
}
