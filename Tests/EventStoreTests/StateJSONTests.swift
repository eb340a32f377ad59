import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// `get` writes its answer straight from the projection record when it can
/// (`EventLog.transcodedState`); these check that it writes the very bytes the decoded
/// state writes, for states folded through the store from random events, and that it
/// declines whatever it does not read as the decoding does.
@Suite("State JSON from the record")
struct StateJSONTests {
    @Test("the record's transcoded JSON equals the decoded state's", arguments: 1...12)
    func randomStates(seed: UInt64) throws {
        let store = try TempStore()
        var scenario = Scenario(seed: seed)
        var rng = SeededGenerator(seed: seed &* 6_364_136_223_846_793_005)
        var totals = Coverage()
        for batch in scenario.events().shuffled(using: &rng).chunked(Int.random(in: 5...40, using: &rng)) {
            let result = try store.log.ingest(batch.map { EventCodec.encodeStored($0) })
            #expect(result.deadLettered.isEmpty, "\(result.deadLettered.map(\.reason))")
            totals.add(try compareEveryRecord(store.log))
        }
        try store.check()
        // The fast path answered, and the comparison met what it must render.
        #expect(totals.transcoded > 0)
        #expect(totals.conflicts > 0)
    }

    @Test("every kind of state the generator makes is met across the seeds")
    func coverage() throws {
        var totals = Coverage()
        for seed in UInt64(100)...107 {
            let store = try TempStore()
            var scenario = Scenario(seed: seed)
            _ = try store.log.ingest(scenario.events().map { EventCodec.encodeStored($0) })
            totals.add(try compareEveryRecord(store.log))
        }
        #expect(totals.transcoded > 20)
        #expect(totals.conflicts > 0)
        #expect(totals.statusConflicts > 0)
        #expect(totals.deleted > 0)
        #expect(totals.sets > 0)
        #expect(totals.tableHistories > 0, "no history long enough for status_history: the fallback is not met")
    }

    @Test("the field workload's states")
    func fieldWorkload() throws {
        let store = try TempStore()
        for chunk in workload(seed: 18, count: 3_000, jobs: 60).chunked(250) {
            _ = try store.log.append(Array(chunk))
        }
        let coverage = try compareEveryRecord(store.log)
        #expect(coverage.transcoded + coverage.tableHistories == 60)
        #expect(coverage.transcoded > 0)
        #expect(try store.log.canonicalState(of: entity("job/J18-0")) != nil)
    }

    /// Names the ingest would refuse (quotes, controls, non-ASCII) still render alike: the
    /// fold does not check them, and the writer escapes whatever it is given.
    @Test("names and statuses that need escaping", arguments: 1...6)
    func escaping(seed: UInt64) throws {
        let store = try TempStore()
        var scenario = Scenario(seed: seed)
        scenario.fieldNames = ["a\"b", "tab\there", "back\\slash", "ünï", "nl\n", "\u{1}", "😀"]
        scenario.setNames = ["p\"s", "é"]
        let events = scenario.events()
        var byEntity: [EntityKey: [Event]] = [:]
        for event in events { byEntity[event.entity, default: []].append(event) }
        try store.log.environment.read { txn throws in
            for (entity, events) in byEntity {
                let state = Projection.fold(entity, events)
                let history = Projection.statusHistory(entity, events)
                let inline = history.count <= EventLog.inlineHistoryLimit ? history : nil
                let rev = UInt64.random(in: 0...UInt64.max, using: &scenario.rng)
                let record = EventLog.projectionRecord(state, rev: rev, history: inline).record
                let fast = EventLog.transcodedState(record, entity: entity)
                guard inline != nil else {
                    #expect(fast == nil)
                    continue
                }
                let slow = try store.log.decodedCanonicalState(
                    ProjectionRecord(bytes: record), entity: entity, txn: txn)
                #expect(fast == slow, "\(text(fast)) != \(text(slow))")
            }
        }
    }

    /// A long name of control characters in conflict is written twice at six times its
    /// bytes: more than the first guess at the answer's size, so it is written again with
    /// room for any state.
    @Test("an answer larger than the first guess")
    func outgrowsTheGuess() throws {
        let store = try TempStore()
        let name = String(repeating: "\u{1}", count: 200)
        let job = entity("job/wide")
        let origins = [ULID(high: 0x0123_4567 << 16, low: 1), ULID(high: 0x0123_4567 << 16, low: 2)]
        let events = origins.enumerated().map { index, origin in
            Event(
                id: ULID(high: (1_700_000_000_000 + UInt64(index)) << 16, low: UInt64(index)), origin: origin,
                entity: job, body: .edit(fields: [FieldChange(name: name, value: .string("v\(index)"))], base: []))
        }
        let state = Projection.fold(job, events)
        #expect(state.fields.first?.heads.count == 2)
        let record = EventLog.projectionRecord(state, rev: 7, history: []).record
        let fast = try #require(EventLog.transcodedState(record, entity: job))
        #expect(fast.count > 4 * record.count + 256)
        try store.log.environment.read { txn throws in
            #expect(try fast == store.log.decodedCanonicalState(ProjectionRecord(bytes: record), entity: job, txn: txn))
        }
    }

    /// A flipped, dropped or added byte: wherever decoding throws, the fast path declines;
    /// wherever both answer, they agree.
    @Test("corrupt records are declined, not misread", arguments: 1...4)
    func corruptRecords(seed: UInt64) throws {
        let store = try TempStore()
        var scenario = Scenario(seed: seed)
        _ = try store.log.ingest(scenario.events().map { EventCodec.encodeStored($0) })
        var rng = SeededGenerator(seed: seed &+ 99)
        var declined = 0
        try store.log.environment.read { txn throws in
            try txn.withCursor(store.log.tables.projections) { cursor in
                var item = try cursor.first()
                while let current = item {
                    let entity = EntityKey(validated: current.key)
                    for _ in 0..<60 {
                        // The record as folded: the stored one is compressed.
                        var record = try store.log.expanded(current.value, entity: entity, txn: txn).bytes
                        damage(&record, using: &rng)
                        let fast = EventLog.transcodedState(record, entity: entity)
                        guard
                            let decoded = try? EventLog.decodeProjection(
                                ProjectionRecord(bytes: record), entity: entity
                            ).1
                        else {
                            #expect(fast == nil, "a record that does not decode was read: \(text(fast))")
                            if fast == nil { declined += 1 }
                            continue
                        }
                        // States no fold makes, which rendering the decoded state would trap on.
                        if decoded.fields.contains(where: \.heads.isEmpty)
                            || decoded.sets.contains(where: { $0.elements.contains(where: \.adds.isEmpty) })
                        {
                            #expect(fast == nil)
                            continue
                        }
                        let slow = try? store.log.decodedCanonicalState(
                            ProjectionRecord(bytes: record), entity: entity, txn: txn)
                        if let fast { #expect(fast == slow, "\(text(fast)) != \(text(slow))") }
                    }
                    item = try cursor.next()
                }
            }
        }
        #expect(declined > 0)
    }
}

/// What a comparison of a store's records met.
private struct Coverage {
    var transcoded = 0
    var tableHistories = 0
    var conflicts = 0
    var statusConflicts = 0
    var deleted = 0
    var sets = 0

    mutating func add(_ other: Coverage) {
        transcoded += other.transcoded
        tableHistories += other.tableHistories
        conflicts += other.conflicts
        statusConflicts += other.statusConflicts
        deleted += other.deleted
        sets += other.sets
    }
}

/// Compares, for every projection record of the store, the fast path's bytes with the
/// decoded state's, and expects the fast path to decline exactly the records whose
/// history is in `status_history`.
private func compareEveryRecord(
    _ log: EventLog, sourceLocation: SourceLocation = #_sourceLocation
) throws -> Coverage {
    var coverage = Coverage()
    try log.environment.read { txn throws in
        try txn.withCursor(log.tables.projections) { cursor in
            var item = try cursor.first()
            while let current = item {
                let entity = EntityKey(validated: current.key)
                let record = try log.expanded(current.value, entity: entity, txn: txn)
                let slow = try log.decodedCanonicalState(record, entity: entity, txn: txn)
                let inline = try EventLog.projectionHistory(record, entity: entity) != nil
                if let fast = EventLog.transcodedState(record.bytes, entity: entity) {
                    #expect(fast == slow, "\(entity): \(text(fast)) != \(text(slow))", sourceLocation: sourceLocation)
                    coverage.transcoded += 1
                } else {
                    #expect(
                        !inline, "\(entity): the fast path declined a record it reads", sourceLocation: sourceLocation)
                }
                if !inline { coverage.tableHistories += 1 }
                let state = try EventLog.decodeProjection(record, entity: entity).1
                if state.fields.contains(where: { $0.heads.count > 1 }) { coverage.conflicts += 1 }
                if state.hasStatusConflict { coverage.statusConflicts += 1 }
                if state.isDeleted { coverage.deleted += 1 }
                if state.sets.contains(where: { $0.elements.count > 1 }) { coverage.sets += 1 }
                item = try cursor.next()
            }
        }
    }
    return coverage
}

private func text(_ bytes: [UInt8]?) -> String {
    bytes.map { String(decoding: $0, as: UTF8.self) } ?? "nil"
}

/// Entities edited by several nodes that see each other's events late, so registers and
/// statuses get concurrent heads; deletes and restores, sets, values of every JSON kind
/// and text with escapes and non-ASCII characters.
private struct Scenario {
    var rng: SeededGenerator
    var fieldNames = ["address", "phone", "notes", "a.b", "Z_9", "n-1"]
    var setNames = ["parts", "tags"]
    let statuses = [
        "assigned", "en route", "on_site", "dône ✓", "say \"hi\"", "back\\slash", "done", "待機", "🚚",
    ]
    let values = [
        "null", "0", "-7", "123456789012345678", "1.5", "-2.5e-3", "1E+21", "true", "false", "\"\"",
        "\"12 Main St\"", "\"héllo \\\"q\\\" \\\\ \\n \\u0001 😀\"", "[]", "{}", "[1,[2,[3]],{\"k\":null}]",
        "{\"b\":[1,{\"c\":\"d\"}],\"a\":\"x\",\"é\":0.25}",
    ]
    let elements = ["\"valve-3\"", "\"gasket\"", "7", "{\"b\":1,\"a\":[2]}", "\"ü\"", "null", "[true]"]

    init(seed: UInt64) { rng = SeededGenerator(seed: seed) }

    /// Every event made, in the order made.
    mutating func events() -> [Event] {
        let nodes = (0..<Int.random(in: 2...6, using: &rng)).map {
            ULID(high: 0x0123_4567 << 16 | UInt64($0), low: UInt64($0) &* 0x9E37_79B9)
        }
        let entities = (0..<Int.random(in: 4...9, using: &rng)).map { index in
            EntityKey(validated: Array("job/\(["J", "ü", "a\"b\\c", "x/y"][index % 4])-\(index)".utf8))
        }
        // What each node knows of each entity, and its clock.
        var known: [[[Event]]] = Array(repeating: Array(repeating: [], count: entities.count), count: nodes.count)
        var clocks = nodes.map { _ in UInt64(1_700_000_000_000) }
        var counters = nodes.map { _ in UInt64(0) }
        var all: [Event] = []
        var made = Set<ULID>()
        for (index, entity) in entities.enumerated() {
            // Some entities see a few events, some many (histories past the inline limit).
            for _ in 0..<Int.random(in: 1...90, using: &rng) {
                let node = Int.random(in: 0..<nodes.count, using: &rng)
                if Int.random(in: 0..<5, using: &rng) == 0 {
                    // Catches up with everything the others made.
                    known[node][index] = all.filter { $0.entity == entity }
                }
                let state = Projection.fold(entity, known[node][index])
                clocks[node] += UInt64.random(in: 0...3, using: &rng)
                counters[node] += 1
                var id = ULID(high: clocks[node] << 16 | UInt64(node), low: counters[node])
                if let top = known[node][index].map(\.id).max(), id <= top {
                    id = ULID(high: top.high, low: top.low &+ 1)
                }
                while !made.insert(id).inserted { id = ULID(high: id.high, low: id.low &+ 1) }
                let event = Event(id: id, origin: nodes[node], entity: entity, body: body(state))
                known[node][index].append(event)
                all.append(event)
            }
        }
        return all
    }

    mutating func body(_ state: EntityState) -> EventBody {
        if state.isDeleted, Int.random(in: 0..<3, using: &rng) > 0 { return .restore(base: state.liveDeletes) }
        switch Int.random(in: 0..<23, using: &rng) {
        case 20..<23:
            let amount = [1, -2, 40, Int64.max, Int64.min].randomElement(using: &rng)!
            return .incr(counter: ["used", "b.c"].randomElement(using: &rng)!, amount: amount)
        case 0..<8:
            var chosen = Array(fieldNames.shuffled(using: &rng).prefix(Int.random(in: 1...3, using: &rng)))
            chosen.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            let changes = chosen.map { FieldChange(name: $0, value: json(values.randomElement(using: &rng)!)) }
            let base = chosen.compactMap { name -> FieldBase? in
                let heads = state.heads(ofField: name)
                return heads.isEmpty ? nil : FieldBase(field: name, heads: heads)
            }
            return .edit(fields: changes, base: base)
        case 8..<13:
            return .status(statuses.randomElement(using: &rng)!, base: state.statusHeadIDs)
        case 13..<16:
            return .add(set: setNames.randomElement(using: &rng)!, element: json(elements.randomElement(using: &rng)!))
        case 16..<19:
            let set = setNames.randomElement(using: &rng)!
            let element = json(elements.randomElement(using: &rng)!)
            return .remove(set: set, element: element, observed: state.liveAdds(set: set, element: element))
        default:
            return .delete
        }
    }

    private func json(_ text: String) -> JSONBytes { try! JSONBytes(parsing: text) }
}

extension Array {
    fileprivate func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}
