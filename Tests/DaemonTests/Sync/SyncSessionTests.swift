@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import StoreTestSupport
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// Sessions between stores in one process: what moves, convergence, and the holdings
/// version vectors cannot see.
@Suite("Sync sessions")
struct SyncSessionTests {
    func assertConverged(_ stores: [TempStore]) throws {
        let first = stores[0]
        let states = try first.states()
        let statistics = try first.log.statistics()
        let vector = try first.log.versionVector()
        for store in stores.dropFirst() {
            #expect(try store.log.versionVector() == vector)
            let other = try store.log.statistics()
            #expect(other.events == statistics.events)
            #expect(other.digest == statistics.digest)
            #expect(other.conflicts == statistics.conflicts)
            let otherStates = try store.states()
            #expect(otherStates.count == states.count)
            for (entity, state) in states where otherStates[entity] != state {
                Issue.record("\(entity) differs: \(state) vs \(otherStates[entity] ?? "absent")")
                break
            }
        }
    }

    @Test("two stores exchange what each lacks; a second session moves nothing", .timeLimit(.minutes(30)))
    func twoWay() throws {
        let a = try TempStore()
        let b = try TempStore()
        defer {
            a.remove()
            b.remove()
        }
        let work = replicaWorkloads(replicas: 2, eventsEach: 1500, seed: 1)
        try a.append(work[0])
        try b.append(work[1])
        let countA = try a.log.statistics().events
        let countB = try b.log.statistics().events
        #expect(try a.log.countAfter([:]) == countA)
        #expect(try a.log.fingerprint(origin: a.log.nodeID).count == countA)
        // An origin with a single event is stored without a page of duplicates.
        let single = try TempStore()
        defer { single.remove() }
        try single.append([#"{"entity":"job/1","kind":"delete"}"#])
        #expect(try single.log.ids(origin: single.log.nodeID).count == 1)
        #expect(try single.log.countAfter([:]) == 1)
        let (mine, theirs) = try syncPair(a.log, b.log)
        #expect(mine.sent == countA)
        #expect(mine.received == countB)
        #expect(theirs.received == countA)
        #expect(theirs.sent == countB)
        #expect(mine.peerNode == b.log.nodeID)
        try assertConverged([a, b])
        #expect(try a.log.statistics().conflicts > 0)  // the shared jobs were edited on both

        let (again, _) = try syncPair(b.log, a.log)
        #expect(again.sent == 0)
        #expect(again.received == 0)
        #expect(again.reconciledSent + again.reconciledReceived == 0)
    }

    @Test(
        "3 to 5 stores synced in random pairs until quiescent converge, whatever the order",
        .timeLimit(.minutes(30)), arguments: [(3, 11), (4, 12), (5, 13), (3, 14)] as [(Int, UInt64)])
    func convergence(replicas: Int, seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let stores = try (0..<replicas).map { _ in try TempStore() }
        defer { for store in stores { store.remove() } }
        let work = replicaWorkloads(replicas: replicas, eventsEach: 600, seed: seed)
        // Work arrives in rounds between random syncs, as on devices that meet now and then.
        for round in 0..<3 {
            for (index, store) in stores.enumerated() {
                let slice = work[index].count / 3
                try store.append(Array(work[index][(round * slice)..<((round + 1) * slice)]))
            }
            for _ in 0..<replicas {
                let i = Int.random(in: 0..<replicas, using: &rng)
                var j = Int.random(in: 0..<replicas, using: &rng)
                if i == j { j = (j + 1) % replicas }
                try syncPair(stores[i].log, stores[j].log)
            }
        }
        // Until quiescent: random pairs until a full pass moves nothing.
        var quiet = false
        var passes = 0
        while !quiet {
            quiet = true
            passes += 1
            for i in (0..<replicas).shuffled(using: &rng) {
                for j in (0..<replicas).shuffled(using: &rng) where i != j {
                    let (report, _) = try syncPair(stores[i].log, stores[j].log)
                    if report.sent + report.received > 0 { quiet = false }
                }
            }
            #expect(passes < 5)
        }
        try assertConverged(stores)
        for store in stores {
            let report = try store.log.rebuild(verify: true)
            #expect(report.mismatched.isEmpty && !report.digestMismatch)
        }
    }

    @Test("a store missing events in the middle of an origin's range gets exactly those", .timeLimit(.minutes(30)))
    func gap() throws {
        let a = try TempStore()
        let b = try TempStore()
        defer {
            a.remove()
            b.remove()
        }
        try a.append(replicaWorkloads(replicas: 1, eventsEach: 3000, seed: 5)[0])
        // b takes a's events with holes: a few missing here and there, and one long run.
        var all: [ReplicatedEvent] = []
        var after: ULID?
        while true {
            let page = try a.log.replicationEvents(origin: a.log.nodeID, after: after, limit: 1000, maxBytes: 1 << 30)
            all += page.events
            guard page.more, let last = page.events.last?.id else { break }
            after = last
        }
        var missing = Set([7, 99, 100, 1234, 2998])
        missing.formUnion(1500..<1900)
        let held = all.enumerated().filter { !missing.contains($0.offset) }.map(\.element)
        _ = try b.log.ingest(held, from: "test")
        #expect(try b.log.versionVector() == a.log.versionVector())  // the vectors cannot tell

        let (report, _) = try syncPair(b.log, a.log)
        #expect(report.received == all.count - held.count)
        #expect(report.reconciledReceived == all.count - held.count)
        #expect(report.sent == 0)
        try assertConverged([a, b])
    }

    @Test(
        "a gap larger than sync_reconcile_max_ids is filled over several sessions, each sending what it kept",
        .timeLimit(.minutes(30)))
    func gapBeyondTheIDCap() throws {
        let a = try TempStore()
        let b = try TempStore()
        defer {
            a.remove()
            b.remove()
        }
        try a.append(replicaWorkloads(replicas: 1, eventsEach: 1000, seed: 6)[0])
        let all = try a.log.replicationEvents(origin: a.log.nodeID, after: nil, limit: 10_000, maxBytes: 1 << 30).events
        // b holds the first and last events and misses the 405 between 300 and 705.
        _ = try b.log.ingest(all.enumerated().filter { !(300..<705).contains($0.offset) }.map(\.element), from: "test")
        var failures = 0
        while failures < 10 {
            do {
                let (report, _) = try syncPair(a.log, b.log, limits: SyncLimits(reconcileIDs: 150))
                #expect(report.reconciledSent == 105)
                break
            } catch let error as SyncError {
                #expect(error.reason == .sessionLimit)
                #expect(error.message.contains("sync_reconcile_max_ids"))
                failures += 1
            }
        }
        // 150, 150, then the last 105 in a session that succeeds.
        #expect(failures == 2)
        try assertConverged([a, b])
    }

    @Test(
        "a node restored from an old backup gets back what its peers kept, its own lost events included",
        .timeLimit(.minutes(30)))
    func restoredFromBackup() throws {
        let a = try TempStore()
        let b = try TempStore()
        let c = try TempStore()
        let backup = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evbak-\(UUID().uuidString.prefix(8))"
        ).path
        defer {
            for store in [a, b, c] { store.remove() }
            try? FileManager.default.removeItem(atPath: backup)
        }
        let work = replicaWorkloads(replicas: 3, eventsEach: 900, seed: 21)
        try a.append(Array(work[0][..<300]))
        try b.append(Array(work[1][..<300]))
        try c.append(Array(work[2][..<300]))
        try syncPair(a.log, b.log)
        try syncPair(b.log, c.log)
        try b.log.backup(to: backup)
        // b works on and syncs after the backup, then loses its disk.
        try b.append(Array(work[1][300..<600]))
        try a.append(Array(work[0][300..<600]))
        try syncPair(b.log, a.log)
        try syncPair(a.log, c.log)
        let lostOwn = try b.log.ids(origin: b.log.nodeID).count
        b.close()
        try FileManager.default.removeItem(atPath: b.directory)
        try FileManager.default.copyItem(atPath: backup, toPath: b.directory)
        try b.reopen()
        #expect(try b.log.ids(origin: b.log.nodeID).count < lostOwn)
        // Restored, b works again before it meets anyone: its new events sort after the lost ones.
        try b.append(Array(work[1][600...]))
        try c.append(Array(work[2][300...]))
        try syncPair(b.log, c.log)
        try syncPair(a.log, b.log)
        try syncPair(c.log, a.log)
        try syncPair(b.log, c.log)
        try assertConverged([a, b, c])
    }

    @Test(
        "fingerprints from an origin's running summary equal a scan, as events arrive in order, ahead and into gaps",
        arguments: [1, 2, 3] as [UInt64])
    func runningFingerprints(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let source = try TempStore()
        let store = try TempStore()
        defer {
            source.remove()
            store.remove()
        }
        try source.append(replicaWorkloads(replicas: 1, eventsEach: 2000, seed: seed)[0])
        let origin = source.log.nodeID
        let all = try source.log.replicationEvents(origin: origin, after: nil, limit: 100_000, maxBytes: 1 << 40).events
        // Arrival in chunks: mostly in order, some held back and delivered later (gaps filled).
        var pending = all
        var heldBack: [ReplicatedEvent] = []
        while !pending.isEmpty || !heldBack.isEmpty {
            var chunk: [ReplicatedEvent] = []
            if !pending.isEmpty {
                let take = min(pending.count, Int.random(in: 1...300, using: &rng))
                for event in pending.prefix(take) {
                    if Int.random(in: 0..<10, using: &rng) == 0 { heldBack.append(event) } else { chunk.append(event) }
                }
                pending.removeFirst(take)
            }
            if Int.random(in: 0..<3, using: &rng) == 0 || pending.isEmpty {
                chunk += heldBack
                heldBack = []
            }
            _ = try store.log.ingest(chunk, from: "test")
            let held = try store.log.ids(origin: origin)
            guard !held.isEmpty else { continue }
            for through in [held.last!, held[held.count / 2], held[0], all.last!.id!] {
                let scanned = Fingerprint(held.filter { $0 <= through })
                #expect(try store.log.fingerprint(origin: origin, through: through) == scanned)
            }
            #expect(try store.log.fingerprint(origin: origin) == Fingerprint(held))
        }
        #expect(try store.log.fingerprint(origin: origin) == source.log.fingerprint(origin: origin))
    }

    @Test("in one batch, an event that fails validation becomes a dead letter and the events around it are kept")
    func deadLetters() throws {
        let b = try TempStore()
        defer { b.remove() }
        let origin = ULID(timestamp: 1_700_000_000_000, random: (1, 1))
        let good = ULID(timestamp: 1_700_000_000_001, random: (1, 2))
        let bad = ULID(timestamp: 1_700_000_000_002, random: (1, 3))
        let after = ULID(timestamp: 1_700_000_000_003, random: (1, 4))
        func event(_ id: ULID, _ body: String) -> ReplicatedEvent {
            ReplicatedEvent(id: id, json: Array("{\(body),\"origin\":\"\(origin)\"}".utf8))
        }
        let result = try b.log.ingest([
            event(good, #""entity":"job/2","kind":"status","status":"assigned""#),
            event(bad, #""entity":"JOB/bad","kind":"status","status":"x""#),
            event(after, #""entity":"job/3","kind":"status","status":"done""#),
        ])
        #expect(result.ingested == [good, after])
        #expect(result.deadLettered.count == 1)
        #expect(result.deadLettered.first?.id == bad.description)
        #expect(try b.log.state(of: EntityKey(validated: Array("job/3".utf8))) != nil)
    }
}
