import Foundation
import Projections
import TestSupport
import Testing

@testable import EventStore

/// A store in a fresh temp directory. `check()` asserts the invariants every store must
/// keep — projections equal a rebuild from the log, the digest matches, every event is in
/// its entity's and origin's index — and teardown runs it for a test that did not, after
/// the test's last change; then the directory is deleted.
final class TempStore {
    let directory: String
    var log: EventLog!
    var options: StoreOptions
    /// Whether the store was checked since its last change through `TempStore` (a reopen).
    private var checked = false

    init(_ configure: (inout StoreOptions) -> Void = { _ in }) throws {
        directory =
            FileManager.default.temporaryDirectory.appendingPathComponent("evstore-test-\(UUID().uuidString)").path
        var options = StoreOptions()
        options.environment.initialMapSize = 4 << 20
        configure(&options)
        self.options = options
        log = try EventLog.open(directory: directory, options: options)
    }

    func reopen() throws {
        log = nil
        log = try EventLog.open(directory: directory, options: options)
        checked = false
    }

    /// For a test that writes tables directly, so the store is no longer a whole one: says
    /// why, and teardown does not check it.
    func writesTablesDirectly(because reason: String) {
        precondition(!reason.isEmpty)
        checked = true
    }

    func check(sourceLocation: SourceLocation = #_sourceLocation) throws {
        checked = true
        let report = try log.rebuild(verify: true)
        #expect(
            report.mismatched.isEmpty, "projections differ from a rebuild: \(report.mismatched)",
            sourceLocation: sourceLocation)
        #expect(!report.digestMismatch, "digest differs from a rebuild", sourceLocation: sourceLocation)
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
                    let state = try EventLog.decodeProjection(current.value, entity: entity).1
                    if let key = EventLog.statusKey(state) { expectedStatus.insert(key + [0xFF] + current.key) }
                    if state.hasConflicts { expectedConflicts[current.key] = EventLog.conflictRecord(state) }
                    if try EventLog.projectionHistory(current.value, entity: entity) == nil {
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

    deinit {
        // Writes after an explicit check are rare; a store never checked is checked here.
        if !checked, log != nil {
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

func input(_ text: String) throws -> InputEvent {
    try EventCodec.decodeInput(Array(text.utf8))
}

func inputs(_ lines: String...) throws -> [InputEvent] {
    try lines.map(input)
}

func entity(_ text: String) -> EntityKey { EntityKey(validated: Array(text.utf8)) }

/// The entity's state as `get` returns it, without its node-local `rev` (the last member),
/// so states of different stores compare.
func stateJSON(_ log: EventLog, _ name: String) throws -> String? {
    try log.canonicalState(of: entity(name)).map { json in
        let text = String(decoding: json, as: UTF8.self)
        guard let range = text.range(of: #","rev":"#, options: .backwards) else { return text }
        return String(text[..<range.lowerBound]) + "}"
    }
}

/// The workload's field-service events, generated in-process (same shape as fieldops.py).
func workload(seed: UInt64, count: Int, jobs: Int = 50, actor: String = "tech-0") -> [InputEvent] {
    var rng = SeededGenerator(seed: seed)
    let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
    let parts = ["valve-3", "gasket-12", "pump-seal", "filter-a", "fuse-10a"]
    var out: [InputEvent] = []
    let entities = (0..<jobs).map { "job/J\(seed)-\($0)" }
    while out.count < count {
        let e = entities.randomElement(using: &rng)!
        let line: String
        switch Int.random(in: 0..<10, using: &rng) {
        case 0..<4:
            line =
                #"{"entity":"\#(e)","kind":"edit","by":"\#(actor)","fields":{"address":"\#(Int.random(in: 1...480, using: &rng)) Main St","phone":"+1555\#(Int.random(in: 1_000_000...9_999_999, using: &rng))"}}"#
        case 4..<7:
            line =
                #"{"entity":"\#(e)","kind":"status","status":"\#(statuses.randomElement(using: &rng)!)","by":"\#(actor)"}"#
        case 7..<9:
            line = #"{"entity":"\#(e)","kind":"add","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
        default:
            line =
                #"{"entity":"\#(e)","kind":"remove","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
        }
        out.append(try! input(line))
    }
    return out
}

/// Every event of a store in its stored form, for feeding another store's `ingest`.
func allStoredEvents(_ log: EventLog) throws -> [[UInt8]] {
    var out: [[UInt8]] = []
    var after: ULID?
    while true {
        let page = try log.events(after: after, limit: 1000)
        out.append(contentsOf: page.events.map { EventCodec.encodeStored($0) })
        guard let next = page.next else { return out }
        after = next
    }
}

extension EventLog {
    /// Client batches group-committed as the daemon's writer commits them: one result each.
    func appendGroups(_ groups: [[InputEvent]]) throws(EventStoreError) -> [Result<AppendResult, EventStoreError>] {
        try commit(groups.map { AppendJob($0) }).outcomes.map { outcome in
            outcome.flatMap { committed in
                guard let appended = committed.output as? AppendResult else { return .failure(EventLog.noOutcome) }
                return .success(appended)
            }
        }
    }
}

extension Result where Success == Committed, Failure == EventStoreError {
    /// The output of a committed job, as `type`; nil on failure or another type.
    func output<T>(as type: T.Type) -> T? {
        guard case .success(let committed) = self else { return nil }
        return committed.output as? T
    }
}
