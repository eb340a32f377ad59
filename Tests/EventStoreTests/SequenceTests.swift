import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// The commit sequence in one process: every stored event, whatever path stored it, takes
/// one seq, and a consumer resuming by seq sees each exactly once.
@Suite("Commit sequence")
struct SequenceTests {
    /// A consumer of `feed` that stops and resumes from its last seq.
    struct Consumer {
        var after: UInt64 = 0
        var seen: [SequencedEvent] = []

        mutating func read(_ log: EventLog, pageSize: Int, pages: Int) throws {
            for _ in 0..<pages {
                let page = try log.feed(after: after, limit: pageSize)
                seen += page.events
                // `next`, or the head once a page reached it: everything up to it was read.
                after = page.next ?? max(after, page.head)
                if page.next == nil { return }
            }
        }
    }

    @Test(
        "random appends, ingests of another log's events and imports interleaved; a consumer resuming by seq with random page sizes sees every stored event once, in the log's order",
        arguments: [UInt64(1), 2, 3])
    func consumerSeesEveryStoredEventOnce(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let node = try TempStore()
        let peer = try TempStore()
        let other = try TempStore()
        // Events made elsewhere before this node's: older ids than what it will append.
        _ = try peer.log.append(workload(seed: seed &+ 100, count: 300, jobs: 20, actor: "peer"))
        _ = try other.log.append(workload(seed: seed &+ 200, count: 200, jobs: 20, actor: "other"))
        let peerEvents = try allStoredEvents(peer.log).shuffled(using: &rng)
        let otherEvents = try allStoredEvents(other.log)  // id order: an import needs it per origin
        var peerNext = 0
        var otherNext = 0
        let local = workload(seed: seed, count: 600, jobs: 30)
        var localNext = 0
        var consumer = Consumer()
        while localNext < local.count || peerNext < peerEvents.count || otherNext < otherEvents.count {
            switch Int.random(in: 0..<4, using: &rng) {
            case 0 where localNext < local.count:
                let count = min(Int.random(in: 1...40, using: &rng), local.count - localNext)
                _ = try node.log.append(Array(local[localNext..<localNext + count]))
                localNext += count
            case 1 where peerNext < peerEvents.count:
                let count = min(Int.random(in: 1...60, using: &rng), peerEvents.count - peerNext)
                _ = try node.log.ingest(Array(peerEvents[peerNext..<peerNext + count]), from: "peer")
                peerNext += count
            case 2 where otherNext < otherEvents.count:
                let count = min(Int.random(in: 1...50, using: &rng), otherEvents.count - otherNext)
                _ = try node.log.importEvents(Array(otherEvents[otherNext..<otherNext + count]))
                otherNext += count
            case 3:
                try consumer.read(
                    node.log, pageSize: Int.random(in: 1...97, using: &rng), pages: Int.random(in: 1...5, using: &rng))
            default:
                continue
            }
        }
        // A rebuild keeps the sequence; a reopen resumes it.
        try node.log.rebuild()
        try node.reopen()
        _ = try node.log.append(workload(seed: seed &+ 300, count: 5, jobs: 3))
        try consumer.read(node.log, pageSize: 50, pages: 10_000)

        let log = try node.log.feed(after: 0, limit: 100_000, scanLimit: 100_000)
        #expect(consumer.seen == log.events)
        #expect(Set(consumer.seen.map(\.event.id)).count == consumer.seen.count, "an event seen twice")
        let stored = try node.log.statistics().events
        #expect(consumer.seen.count == stored && stored == 300 + 200 + 600 + 5)
        #expect(log.events.map(\.seq) == Array(1...UInt64(stored)))
        try node.check()
    }

    @Test("a failed group gives back no seq, and seqs are never reused after a reopen")
    func seqsStayDenseAndMonotonic() throws {
        let store = try TempStore()
        let results = try store.log.appendGroups([
            try inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":1}}"#),
            try inputs(#"{"entity":"job/2","kind":"restore"}"#),  // not deleted: fails
            try inputs(#"{"entity":"job/3","kind":"delete"}"#),
        ])
        #expect(try results[0].get().revs[entity("job/1")] == 1)
        #expect(try results[2].get().revs[entity("job/3")] == 2)
        try store.reopen()
        #expect(store.log.sequenceHead == 2)
        let next = try store.log.append(inputs(#"{"entity":"job/1","kind":"edit","fields":{"a":2}}"#))
        #expect(next.revs[entity("job/1")] == 3)
        let filtered = try store.log.feed(after: 0, limit: 10, filter: FeedFilter(entity: entity("job/1")))
        #expect(filtered.events.map(\.seq) == [1, 3] && filtered.next == nil && filtered.head == 3)
        let typed = try store.log.feed(after: 1, limit: 1, filter: FeedFilter(type: "job"))
        #expect(typed.events.map(\.seq) == [2] && typed.next == 2)
        try store.check()
    }
}
