@testable import Daemon
import EventStore
import Foundation
import Logging
import Projections
@testable import Server
import StoreTestSupport
import Synchronization
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// The one writer: every write of the daemon runs on its thread, requests of every kind share
/// its commits, and watchers get what it committed from memory, in seq order.
@Suite struct WriterTests {
    static func input(_ text: String) throws -> InputEvent { try EventCodec.decodeInput(Array(text.utf8)) }

    static func edit(_ entity: String, _ value: Int) throws -> InputEvent {
        try input(#"{"entity":"\#(entity)","kind":"edit","fields":{"n":\#(value)}}"#)
    }

    /// `count` events made on a store of their own, in their stored form (id order).
    static func foreignEvents(_ count: Int, prefix: String) throws -> [[UInt8]] {
        let source = try TempStore()
        defer { source.remove() }
        for start in stride(from: 0, to: count, by: 50) {
            _ = try source.log.append(try (start..<min(count, start + 50)).map { try edit("job/\(prefix)\($0 % 7)", $0) })
        }
        var out: [[UInt8]] = []
        var after: ULID?
        while true {
            let page = try source.log.events(after: after, limit: 1000)
            out.append(contentsOf: page.events.map { EventCodec.encodeStored($0) })
            guard let next = page.next else { return out }
            after = next
        }
    }

    static func writer(_ store: TempStore, hub: WatchHub? = nil) -> Writer {
        let logger = Logger(label: "test", level: .error)
        return Writer(
            log: store.log, hub: hub ?? WatchHub(logger: logger, limits: WatchLimits(perConnection: 10, total: 10)),
            logger: logger)
    }

    @Test("appends, a replicated batch, an import and a peer record waiting together take one commit")
    func requestsOfEveryKindShareACommit() throws {
        let store = try TempStore()
        defer { store.remove() }
        let replicated = try WriterTests.foreignEvents(30, prefix: "r")
        let imported = try WriterTests.foreignEvents(20, prefix: "i")
        let writer = WriterTests.writer(store)
        let outcomes = Mutex<[Bool]>([])
        let finished = DispatchSemaphore(value: 0)
        let record: @Sendable (Bool) -> Void = { succeeded in
            outcomes.withLock { $0.append(succeeded) }
            finished.signal()
        }
        // Queued before the thread starts, so the writer finds them all waiting at once.
        for number in 0..<5 {
            writer.submit(AppendJob([try WriterTests.edit("job/local\(number)", number)]), from: number) {
                record((try? $0.get()) != nil)
            }
        }
        writer.submit(
            IngestJob(replicated.map { ReplicatedEvent(id: nil, json: $0) }, from: IngestPeer(name: "b"), maxDeadLetters: 10),
            from: -1
        ) { record((try? $0.get()) != nil) }
        writer.submit(ImportJob(imported), from: -2) { record((try? $0.get()) != nil) }
        writer.submit(PeerEntriesJob([PeerEntry(key: "peer/b", value: Array("unix:/b".utf8))]), from: -3) {
            record((try? $0.get()) != nil)
        }
        writer.start()
        for _ in 0..<8 { finished.wait() }
        writer.stop()
        let results = outcomes.withLock { $0 }
        #expect(results.count == 8)
        #expect(results.allSatisfy { $0 })
        #expect(writer.commits.load(ordering: .relaxed) == 1)
        #expect(writer.requests.load(ordering: .relaxed) == 8)
        #expect(store.log.sequenceHead == 55)
        #expect(try store.log.peerEntries().contains { $0.key == "peer/b" })
    }

    @Test("a sync session's batches and appends from 4 clients at once take fewer commits than requests")
    func replicatedBatchesAreGroupCommittedWithAppends() throws {
        let store = try TempStore()
        defer { store.remove() }
        let replicated = try WriterTests.foreignEvents(400, prefix: "r")
        let writer = WriterTests.writer(store)
        writer.start()
        let failures = Atomic<Int>(0)
        let group = DispatchGroup()
        for client in 0..<4 {
            group.enter()
            Thread {
                for number in 0..<50 {
                    let result = writer.appendAndWait(
                        [try! WriterTests.edit("job/c\(client)", number)], from: client)
                    if case .failure = result { failures.add(1, ordering: .relaxed) }
                }
                group.leave()
            }.start()
        }
        group.enter()
        Thread {
            for start in stride(from: 0, to: replicated.count, by: 10) {
                let batch = replicated[start..<start + 10].map { ReplicatedEvent(id: nil, json: $0) }
                if (try? writer.perform(IngestJob(batch, from: IngestPeer(name: "b")), from: -1)) == nil { failures.add(1, ordering: .relaxed) }
            }
            group.leave()
        }.start()
        #expect(group.wait(timeout: .now() + 60) == .success)
        writer.stop()
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(store.log.sequenceHead == 600)
        let requests = writer.requests.load(ordering: .relaxed)
        #expect(requests == 240)
        #expect(writer.commits.load(ordering: .relaxed) < requests)
    }

    @Test("once the writer runs, a write started on any other thread is refused; through the writer each succeeds")
    func everyWriteGoesThroughTheWriter() throws {
        let store = try TempStore()
        defer { store.remove() }
        let foreign = try WriterTests.foreignEvents(4, prefix: "f")
        let writer = WriterTests.writer(store)
        writer.start()
        func refused(_ body: () throws -> Void) -> Bool {
            do {
                try body()
                return false
            } catch let error as EventStoreError {
                return error.reason == .unavailable
            } catch {
                return false
            }
        }
        #expect(refused { _ = try store.log.append([try WriterTests.edit("job/1", 1)]) })
        #expect(refused { _ = try store.log.ingest([foreign[0]], from: "b") })
        #expect(refused { _ = try store.log.importEvents([foreign[1]]) })
        #expect(refused { try store.log.setPeerEntries([("peer/b", Array("unix:/b".utf8))]) })
        #expect(refused { _ = try store.log.rebuild() })
        #expect(refused { _ = try store.log.trainDictionary() })
        #expect(store.log.sequenceHead == 0)

        #expect(try writer.appendAndWait([try WriterTests.edit("job/1", 1)], from: 1).get().appended == 1)
        #expect(
            try writer.perform(IngestJob([ReplicatedEvent(id: nil, json: foreign[0])], from: IngestPeer(name: "b")), from: -1)
                .ingested.count == 1)
        #expect(try writer.perform(ImportJob([foreign[1]]), from: -2).imported.count == 1)
        try writer.perform(PeerEntriesJob([PeerEntry(key: "peer/b", value: Array("unix:/b".utf8))]), from: -3)
        #expect(try writer.rebuild(verify: true).mismatched.isEmpty)
        #expect(store.log.sequenceHead == 3)
        writer.stop()
        // The thread is gone: the store is its owner's again.
        _ = try store.log.append([try WriterTests.edit("job/2", 2)])
    }

    @Test("a watcher gets appended, replicated and imported events in seq order, each once, with no gap")
    func watcherSeesEveryKindInSeqOrder() throws {
        let store = try TempStore()
        defer { store.remove() }
        let replicated = try WriterTests.foreignEvents(200, prefix: "r")
        let imported = try WriterTests.foreignEvents(100, prefix: "i")
        let (server, client) = try UnixConnection.pair()
        defer {
            server.close()
            client.close()
        }
        let logger = Logger(label: "test", level: .error)
        let hub = WatchHub(logger: logger, limits: WatchLimits(perConnection: 10, total: 10))
        let writer = WriterTests.writer(store, hub: hub)
        writer.start()
        _ = try writer.appendAndWait([try WriterTests.edit("job/first", 0)], from: 9).get()
        let outbox = Outbox(socket: server, notificationLimit: 100_000)
        let subscription = Subscription(outbox: outbox, entity: nil, type: nil, after: 0)
        #expect(hub.admit(subscription) == nil)
        // Flushes what the watch is sent, as a connection's loop would, and reads it at the
        // other end.
        let flushed = startFlusher(outbox)
        let received = Mutex<[UInt8]>([])
        let drained = DispatchSemaphore(value: 0)
        Thread {
            var bytes: [UInt8] = []
            while let count = try? client.read(into: &bytes, count: 1 << 16), count > 0 {}
            received.withLock { $0 = bytes }
            drained.signal()
        }.start()

        let group = DispatchGroup()
        for client in 0..<3 {
            group.enter()
            Thread {
                for number in 0..<40 {
                    _ = writer.appendAndWait([try! WriterTests.edit("job/c\(client)", number)], from: client)
                }
                group.leave()
            }.start()
        }
        group.enter()
        Thread {
            for start in stride(from: 0, to: replicated.count, by: 20) {
                let batch = replicated[start..<start + 20].map { ReplicatedEvent(id: nil, json: $0) }
                _ = try? writer.perform(IngestJob(batch, from: IngestPeer(name: "b")), from: -1)
            }
            for start in stride(from: 0, to: imported.count, by: 25) {
                _ = try? writer.perform(ImportJob(Array(imported[start..<start + 25])), from: -2)
            }
            group.leave()
        }.start()
        // Joins while the writes run: catch-up from the start, then live.
        #expect(try hub.start(subscription, after: 0, log: store.log))
        #expect(group.wait(timeout: .now() + 60) == .success)
        writer.stop()
        let head = store.log.sequenceHead
        #expect(head == 1 + 120 + 200 + 100)
        outbox.finish()
        #expect(flushed.wait(timeout: .now() + 30) == .success)
        server.shutdown()
        #expect(drained.wait(timeout: .now() + 30) == .success)

        var seqs: [UInt64] = []
        var ids: [String] = []
        let lines = received.withLock { $0 }.split(separator: 0x0A)
        for line in lines {
            let object = try #require(try JSONSerialization.jsonObject(with: Data(line)) as? [String: Any])
            let event = try #require((object["params"] as? [String: Any])?["event"] as? [String: Any])
            seqs.append(try #require((event["seq"] as? NSNumber)?.uint64Value))
            ids.append(try #require(event["id"] as? String))
        }
        #expect(seqs == Array(1...head))
        let page = try store.log.feed(after: 0, limit: 10_000)
        #expect(ids == page.events.map { $0.event.id.description })
        hub.remove(subscription)
    }
}

extension Writer {
    /// An append through the writer, waited for, as a batch request makes it.
    func appendAndWait(_ events: [InputEvent], from source: Int) -> Result<AppendResult, EventStoreError> {
        Result { () throws(EventStoreError) in try perform(AppendJob(events), from: source) }
    }
}
