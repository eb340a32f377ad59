import Foundation
import Projections
import Testing

@testable import EventStore

/// A store in a fresh temp directory. `check()` asserts the invariants every store must
/// keep — projections equal a rebuild from the log, the digest matches, every event is in
/// its entity's and origin's index — and teardown runs it whenever anything was committed
/// since the last check (or the store was never checked), so a test cannot skip it by
/// forgetting; then the directory is deleted.
public final class TempStore: @unchecked Sendable {
    public let directory: String
    public var log: EventLog!
    public var options: StoreOptions
    /// The last committed transaction when the store was last checked; nil when it never was.
    private var checkedAt: Int?
    /// Set by `writesTablesDirectly`: teardown does not check.
    private var exempt = false

    public init(_ configure: (inout StoreOptions) -> Void = { _ in }) throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("evstore-test-\(UUID().uuidString)").path
        var options = StoreOptions()
        options.environment.initialMapSize = 4 << 20
        configure(&options)
        self.options = options
        log = try EventLog.open(directory: directory, options: options)
    }

    public func reopen() throws {
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        checkedAt = nil
    }

    /// For a test that writes tables directly, so the store is no longer a whole one: says
    /// why, and teardown does not check it.
    public func writesTablesDirectly(because reason: String) {
        precondition(!reason.isEmpty)
        exempt = true
    }

    public func check(sourceLocation: SourceLocation = #_sourceLocation) throws {
        // The rebuild is itself a commit: the mark is taken after the checks.
        defer { checkedAt = log.environment.info().lastTransactionID }
        let report = try log.rebuild(verify: true)
        #expect(
            report.mismatched.isEmpty, "projections differ from a rebuild: \(report.mismatched)",
            sourceLocation: sourceLocation)
        #expect(!report.digestMismatch, "digest differs from a rebuild", sourceLocation: sourceLocation)
        #expect(report.unsequenced == 0, "the index and the blocks disagree", sourceLocation: sourceLocation)
        try checkBlocks(sourceLocation: sourceLocation)
        let stats = try log.statistics()
        #expect(report.events == stats.events, sourceLocation: sourceLocation)
        try checkSecondaryTables(sourceLocation: sourceLocation)
        var after: ULID?
        var seen = 0
        var byEntity: [EntityKey: [ULID]] = [:]
        while true {
            let page = try log.events(after: after, limit: 500)
            for event in page.events {
                seen += 1
                byEntity[event.entity, default: []].append(event.id)
            }
            guard let next = page.next else { break }
            after = next
        }
        #expect(seen == stats.events, sourceLocation: sourceLocation)
        for (entity, ids) in byEntity {
            let indexed = try log.events(ofEntity: entity, after: nil, limit: 1_000_000).events.map(\.id)
            #expect(
                indexed == ids, "the entity index of \(entity) disagrees with the log", sourceLocation: sourceLocation)
        }
        let vector = try log.versionVector()
        for (origin, last) in vector {
            #expect(try log.eventIDs(ofOrigin: origin, after: last, limit: 1).isEmpty, sourceLocation: sourceLocation)
        }
        try checkSequence(events: stats.events, sourceLocation: sourceLocation)
        // A consumer never acknowledged a seq the node has not given yet.
        for consumer in try log.consumers() {
            #expect(consumer.seq <= log.sequenceHead, "consumer \(consumer.name)", sourceLocation: sourceLocation)
        }
    }

    /// The blocks of events follow one another without overlap, those of `event_tail` after
    /// those of `event_blocks`; the tail's together hold fewer than `EventBlocks.maxEvents`
    /// events and at most `EventBlocks.maxRecordBytes` of records; and every block of
    /// `event_blocks` that the next one follows is full: it holds `maxEvents` events, or the
    /// next block's first event would have taken it past `maxRecordBytes`.
    func checkBlocks(sourceLocation: SourceLocation) throws {
        let log = self.log!
        var blocks: [(first: UInt64, count: Int, raw: Int, firstRecord: Int, tail: Bool)] = []
        try log.environment.read { txn throws in
            for (table, tail) in [(log.tables.blocks, false), (log.tables.blockTail, true)] {
                try txn.withCursor(table) { cursor in
                    var item = try cursor.first()
                    while let current = item {
                        let block = try log.decodeBlock(current, txn: txn)
                        blocks.append(
                            (
                                block.first, block.count, block.raw.count,
                                EventBlocks.recordHeaderBytes + block.payload(at: 0).count, tail
                            ))
                        item = try cursor.next()
                    }
                }
            }
        }
        let tail = blocks.filter(\.tail)
        #expect(
            tail.reduce(0) { $0 + $1.count } < EventBlocks.maxEvents
                && tail.reduce(0) { $0 + $1.raw } <= EventBlocks.maxRecordBytes,
            "the tail holds a full block's worth", sourceLocation: sourceLocation)
        for index in blocks.indices.dropLast() {
            let (block, next) = (blocks[index], blocks[index + 1])
            #expect(
                block.first + UInt64(block.count) <= next.first, "blocks overlap at \(next.first)",
                sourceLocation: sourceLocation)
            guard !block.tail, block.first + UInt64(block.count) == next.first else { continue }
            #expect(
                block.count == EventBlocks.maxEvents || block.raw + next.firstRecord > EventBlocks.maxRecordBytes,
                "the block of seq \(block.first) (\(block.count) events) is not full", sourceLocation: sourceLocation)
        }
    }

    /// Every stored event has exactly one seq, seqs strictly increase up to the head, and
    /// each entity's rev is the greatest seq among its events.
    func checkSequence(events: Int, sourceLocation: SourceLocation) throws {
        var after: UInt64 = 0
        var seen = Set<ULID>()
        var revs: [EntityKey: UInt64] = [:]
        var head: UInt64 = 0
        while true {
            let page = try log.feed(after: after, limit: 700)
            head = page.head
            for item in page.events {
                #expect(item.seq > after, "seqs go back", sourceLocation: sourceLocation)
                after = item.seq
                #expect(
                    seen.insert(item.event.id).inserted, "\(item.event.id) has two seqs", sourceLocation: sourceLocation
                )
                revs[item.event.entity] = item.seq
            }
            guard let next = page.next else { break }
            after = next
        }
        #expect(seen.count == events, "events without a seq", sourceLocation: sourceLocation)
        #expect(after <= head && head == log.sequenceHead, sourceLocation: sourceLocation)
        for (entity, rev) in revs {
            #expect(try log.rev(of: entity) == rev, "rev of \(entity)", sourceLocation: sourceLocation)
        }
    }

    /// The status index, the conflicts table and `status_history` (the entities whose record
    /// leaves their history to it) say exactly what the projections say.
    func checkSecondaryTables(sourceLocation: SourceLocation) throws {
        let tables = log.tables
        try log.environment.read { txn throws in
            var expectedStatus: Set<[UInt8]> = []
            var expectedConflicts: [[UInt8]: [UInt8]] = [:]
            var expectedHistories: Set<[UInt8]> = []
            try txn.withCursor(tables.projections) { cursor in
                var item = try cursor.first()
                while let current = item {
                    let entity = EntityKey(validated: current.key)
                    let record = try log.expanded(current.value, entity: entity, txn: txn)
                    let state = try EventLog.decodeProjection(record, entity: entity).1
                    if let key = EventLog.statusKey(state) { expectedStatus.insert(key + [0xFF] + current.key) }
                    if state.hasConflicts { expectedConflicts[current.key] = EventLog.conflictRecord(state) }
                    if try EventLog.projectionHistory(record, entity: entity) == nil {
                        expectedHistories.insert(current.key)
                    }
                    item = try cursor.next()
                }
            }
            var status: Set<[UInt8]> = []
            try txn.withCursor(tables.statusIndex) { cursor in
                var item = try cursor.first()
                while let current = item {
                    status.insert(current.key + [0xFF] + current.value)
                    item = try cursor.next()
                }
            }
            var conflicts: [[UInt8]: [UInt8]] = [:]
            try txn.withCursor(tables.conflicts) { cursor in
                var item = try cursor.first()
                while let current = item {
                    conflicts[current.key] = current.value
                    item = try cursor.next()
                }
            }
            var histories: Set<[UInt8]> = []
            try txn.withCursor(tables.statusHistory) { cursor in
                var item = try cursor.first()
                while let current = item {
                    histories.insert(current.key)
                    item = try cursor.nextNoDup()
                }
            }
            #expect(
                histories == expectedHistories, "status_history holds other entities than the projections leave to it",
                sourceLocation: sourceLocation)
            #expect(
                status == expectedStatus, "the status index disagrees with the projections",
                sourceLocation: sourceLocation)
            #expect(
                conflicts == expectedConflicts, "the conflicts table disagrees with the projections",
                sourceLocation: sourceLocation)
        }
    }

    /// A store opened with `options` as they are (no smaller first map).
    public convenience init(options: StoreOptions) throws {
        try self.init { $0 = options }
    }

    /// Closes the store; teardown then checks nothing.
    public func close() { log = nil }

    /// Closes the store and deletes its directory.
    public func remove() {
        log = nil
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit {
        // A store is checked here unless nothing was committed since its last check.
        if !exempt, let log, checkedAt != log.environment.info().lastTransactionID {
            do {
                try check()
            } catch {
                Issue.record("the store's check at teardown failed: \(error)")
            }
        }
        log = nil
        try? FileManager.default.removeItem(atPath: directory)
    }
}
