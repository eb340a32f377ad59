import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// Durable consumers in one process: named cursors over the commit sequence that only move
/// forward, never past the head, bounded in number, kept across a reopen.
@Suite("Durable consumers")
struct ConsumerTests {
    @Test("an ack creates a consumer, moves it forward only, never past the head; the same seq again is a no-op")
    func acknowledgementsOnlyMoveForward() throws {
        let store = try TempStore()
        #expect(try store.log.consumers().isEmpty)
        _ = try store.log.append(workload(seed: 1, count: 10))
        let created = try store.log.ackConsumer("bridge", seq: 0)
        #expect(created.name == "bridge" && created.seq == 0)
        #expect(try store.log.ackConsumer("bridge", seq: 4).seq == 4)
        #expect(try store.log.ackConsumer("bridge", seq: 4).seq == 4)
        #expect(throws: EventStoreError.self) { try store.log.ackConsumer("bridge", seq: 3) }
        do {
            _ = try store.log.ackConsumer("bridge", seq: 3)
        } catch {
            #expect(error.reason == .conflict && error.message.contains("up to seq 4"), "\(error)")
        }
        do {
            _ = try store.log.ackConsumer("bridge", seq: 11)
            Issue.record("an ack past the head was taken")
        } catch {
            #expect(error.reason == .invalidParams && error.message.contains("head (10)"), "\(error)")
        }
        #expect(try store.log.ackConsumer("bridge", seq: 10).seq == 10)
        #expect(try store.log.consumer(named: "bridge")?.seq == 10)
        // What was refused changed nothing.
        #expect(try store.log.consumers().map(\.name) == ["bridge"])
        try store.check()
    }

    @Test(
        "names are 1 to 64 of A-Z a-z 0-9 . _ -",
        arguments: ["", "a b", "näme", "x/y", String(repeating: "n", count: 65)])
    func badNamesAreRefused(name: String) throws {
        let store = try TempStore()
        do {
            _ = try store.log.ackConsumer(name, seq: 0)
            Issue.record("the name \(name) was taken")
        } catch {
            #expect(error.reason == .invalidParams)
        }
        #expect(try store.log.consumers().isEmpty)
        #expect(try store.log.ackConsumer(String(repeating: "n", count: 64), seq: 0).seq == 0)
        #expect(try store.log.ackConsumer("A.b_c-9", seq: 0).seq == 0)
    }

    @Test("past max consumers a new one is refused, an existing one still acks; a removed one frees its place")
    func theNumberOfConsumersIsBounded() throws {
        let store = try TempStore()
        _ = try store.log.append(workload(seed: 2, count: 3))
        for index in 0..<3 { _ = try store.log.ackConsumer("c\(index)", seq: 0, maxConsumers: 3) }
        do {
            _ = try store.log.ackConsumer("c3", seq: 0, maxConsumers: 3)
            Issue.record("a fourth consumer was kept")
        } catch {
            #expect(error.reason == .tooManyConsumers && error.message.contains("max_consumers"), "\(error)")
        }
        #expect(try store.log.ackConsumer("c1", seq: 2, maxConsumers: 3).seq == 2)
        #expect(try store.log.removeConsumer("c0"))
        #expect(try !store.log.removeConsumer("c0"))
        #expect(try store.log.ackConsumer("c3", seq: 1, maxConsumers: 3).seq == 1)
        #expect(try store.log.consumers().map(\.name) == ["c1", "c2", "c3"])
    }

    @Test("an ack in the commit that stored the events may name their seqs; consumers survive a reopen")
    func acksGroupCommittedWithAppendsAndKept() throws {
        let store = try TempStore()
        let result = try store.log.commit([
            AppendJob(workload(seed: 3, count: 5)), AckConsumerJob("late", seq: 5, maxConsumers: 8),
            AckConsumerJob("early", seq: 6, maxConsumers: 8),
        ])
        guard let late = result.outcomes[1].output(as: Consumer.self) else {
            Issue.record("\(result.outcomes[1])")
            return
        }
        #expect(late.seq == 5)
        guard case .failure(let error) = result.outcomes[2] else {
            Issue.record("an ack past the head was taken: \(result.outcomes[2])")
            return
        }
        #expect(error.reason == .invalidParams)
        try store.reopen()
        #expect(try store.log.consumers() == [late])
        #expect(store.log.sequenceHead == 5)
        try store.check()
    }

    @Test("the storage breakdown lists every table of the store, consumers included")
    func breakdownListsEveryTable() throws {
        let store = try TempStore()
        _ = try store.log.append(workload(seed: 4, count: 3))
        _ = try store.log.ackConsumer("bridge", seq: 2)
        let tables = try store.log.storageBreakdown().tables
        #expect(tables.map(\.name) == EventLog.tableLayout.map(\.name))
        #expect(Set(tables.map(\.name)).count == EventLog.Table.allCases.count)
        #expect(tables.first { $0.name == "consumers" }?.entries == 1)
        try store.check()
    }
}
