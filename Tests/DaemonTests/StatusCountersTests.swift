import Foundation
import Synchronization
import TestSupport
import Testing

@testable import Daemon
@testable import Server
@testable import Writer

@Suite("status counters and the types method")
struct StatusCountersTests {
    @Test("the append rate counts each second once and forgets what is older than a minute")
    func appendCounterWindow() {
        let start = ContinuousClock.now
        let counter = AppendCounter(start: start)
        func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }
        #expect(counter.snapshot(at: at(0)) == .init(eventsTotal: 0, requestsTotal: 0, receivedTotal: 0, perSecond: 0))
        counter.recordAppended(events: 30, requests: 2, at: at(0.2))
        // Within the first second, the second so far counts as a whole one.
        #expect(counter.snapshot(at: at(0.5)).perSecond == 30)
        counter.recordAppended(events: 10, requests: 1, at: at(9.5))
        // Ten seconds covered (0 to 9).
        #expect(counter.snapshot(at: at(9.9)).perSecond == 4)
        // A minute covered: 40 events in it.
        #expect(counter.snapshot(at: at(59.9)).perSecond == 40.0 / 60)
        // Second 0 has left the window; second 9 is still in.
        #expect(counter.snapshot(at: at(60.1)).perSecond == 10.0 / 60)
        // The same slot, reused 60 s later, starts from zero.
        counter.recordAppended(events: 6, requests: 1, at: at(69.2))
        #expect(counter.snapshot(at: at(69.5)).perSecond == 6.0 / 60)
        #expect(counter.snapshot(at: at(200)).perSecond == 0)
        counter.recordReceived(events: 7)
        let totals = counter.snapshot(at: at(200))
        #expect(totals.eventsTotal == 46 && totals.requestsTotal == 4 && totals.receivedTotal == 7)
    }

    @Test(
        "the daemon trains its first dictionary in the commit that makes it due, and the next as soon as one is due, not at the next of its five-second rounds"
    )
    func dictionaryTrainedWhenDue() throws {
        let daemon = try DaemonProcess(arguments: ["--dictionary-training-events", "2000"])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        // The maintenance thread's first round (a second after the start) finds nothing
        // due; its clock alone would not train again before five seconds have passed.
        Thread.sleep(forTimeInterval: 1.5)
        #expect(try client.call("status")["dictionary_version"] as? Int == 0)
        func append(rounds: Range<Int>) throws { try appendEdits(client, rounds: rounds) }
        // The first: trained by the writer after the commit that made it due, before it
        // answered the next request.
        try append(rounds: 0..<2)
        #expect(try client.call("status")["dictionary_version"] as? Int == 1, "no dictionary after the 2,000th event")
        // The next, at ten times as many events: on the maintenance thread, woken by the
        // commit that made it due rather than by its five-second round. Its log line says
        // which (the training's own time, seconds under the address sanitizer on a loaded
        // machine, says nothing about when it began).
        try append(rounds: 2..<20)
        let deadline = Date().addingTimeInterval(60)
        var version = 1
        while version == 1, Date() < deadline {
            version = try client.call("status")["dictionary_version"] as? Int ?? 0
            if version == 1 { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(version == 2, "no second dictionary a minute after the commit that made it due")
        let trained = daemon.stderr.split(separator: "\n").first {
            $0.contains("trained compression dictionary version 2 ")
        }
        #expect(
            trained?.contains("as soon as a commit made one due") == true,
            "the second dictionary was not trained as soon as it was due: \(trained ?? "no log line")")
    }

    @Test(
        "a store due for its first dictionary when the daemon starts (its threshold lowered since) is trained at the maintenance thread's first round, with nothing appended"
    )
    func dueAtStartIsTrained() throws {
        let first = try DaemonProcess(arguments: ["--dictionary-training-events", "1000000"])
        try appendEdits(try first.client(), rounds: 0..<1)
        #expect(try first.client().call("status")["dictionary_version"] as? Int == 0)
        #expect(try first.stop() == 0)
        let again = try DaemonProcess(root: first.root, arguments: ["--dictionary-training-events", "500"])
        defer { again.removeFiles() }
        let deadline = Date().addingTimeInterval(60)
        var version = 0
        while version == 0, Date() < deadline {
            version = try again.client().call("status")["dictionary_version"] as? Int ?? 0
            if version == 0 { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(version == 1, "no dictionary a minute after a start that found one due")
    }

    @Test("types lists the entity types held, sorted, from a store with ids holding '/' and prefix types")
    func typesMethod() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        #expect(try client.call("types")["types"] as? [String] == [])
        let entities = ["job/1", "job/a/b", "job2/x", "job-x/1/2", "site/depot/north", "a/1", "job/zz"]
        _ = try client.call(
            "append",
            eventsParams(entities.map { #"{"entity":"\#($0)","kind":"status","status":"new"}"# }))
        _ = try client.call("append", eventsParams([#"{"entity":"a/1","kind":"delete"}"#]))
        #expect(try client.call("types")["types"] as? [String] == ["a", "job", "job-x", "job2", "site"])
        let refused = try client.failure("types", #"{"type":"job"}"#)
        #expect(refused.reason == "invalid_params" && refused.code == -32602)
    }

    @Test("status counts appends, requests and received events, and says when the daemon started")
    func appendCounters() throws {
        let before = Date()
        let a = try DaemonProcess(arguments: ["--node", "a", "--sync-interval-s", "3600"])
        defer { a.removeFiles() }
        let b = try DaemonProcess(arguments: ["--node", "b", "--sync-interval-s", "3600"])
        defer { b.removeFiles() }
        let client = try a.client()
        var status = try client.call("status")
        let startedAt = try #require(status["started_at"] as? Int)
        #expect(Double(startedAt) >= (before.timeIntervalSince1970 * 1000).rounded(.down) - 1)
        #expect(Double(startedAt) <= Date().timeIntervalSince1970 * 1000)
        #expect(status["version"] as? String == Evstored.version)
        #expect(status["uptime_s"] is Int)
        var appends = try #require(status["appends"] as? [String: Any])
        #expect(appends["events_total"] as? Int == 0 && appends["requests_total"] as? Int == 0)
        #expect(appends["received_total"] as? Int == 0 && appends["per_second"] as? Double == 0)
        // The fields the spec names are all still there.
        for key in ["node", "events", "entities", "bytes", "digest", "clock", "needs_attention", "peers"] {
            #expect(status[key] != nil, "\(key)")
        }

        _ = try client.call(
            "append",
            eventsParams([
                #"{"entity":"job/1","kind":"status","status":"new","key":"k1"}"#,
                #"{"entity":"job/2","kind":"status","status":"new"}"#,
                #"{"entity":"job/3","kind":"status","status":"new"}"#,
            ]))
        // A repeated key appends nothing: the request counts, its event does not.
        _ = try client.call("append", eventsParams([#"{"entity":"job/1","kind":"status","status":"new","key":"k1"}"#]))
        // A refused append counts for nothing.
        _ = try client.failure("append", eventsParams([#"{"entity":"job/1","kind":"teleport"}"#]))
        status = try client.call("status")
        appends = try #require(status["appends"] as? [String: Any])
        #expect(appends["events_total"] as? Int == 3)
        #expect(appends["requests_total"] as? Int == 2)
        let rate = try #require(appends["per_second"] as? Double)
        #expect(rate > 0 && rate <= 3)
        #expect(appends["received_total"] as? Int == 0)

        // Events that arrive by sync count as received, not as appended; on the other side
        // nothing is received.
        _ = try b.client().call(
            "append",
            eventsParams([
                #"{"entity":"site/1","kind":"status","status":"up"}"#,
                #"{"entity":"site/2","kind":"status","status":"up"}"#,
            ]))
        let outcome = try client.call("sync", #"{"peer":"unix://\#(b.socketPath)"}"#)
        let session = try #require((outcome["peers"] as? [[String: Any]])?.first)
        #expect(session["received"] as? Int == 2 && session["sent"] as? Int == 3, "\(outcome)")
        appends = try #require(try client.call("status")["appends"] as? [String: Any])
        #expect(appends["events_total"] as? Int == 3 && appends["received_total"] as? Int == 2)
        let onB = try #require(try b.client().call("status")["appends"] as? [String: Any])
        #expect(onB["events_total"] as? Int == 2 && onB["requests_total"] as? Int == 1)
        #expect(onB["received_total"] as? Int == 3)
    }

    @Test(
        "the decompressed blocks kept for reads stay within block_cache_bytes while sixteen clients read at random, and a reload lowers the bound at once"
    )
    func blockCacheBoundedUnderManyReaders() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evbc-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        let bound = 96 << 10
        try #"{"block_cache_bytes":\#(bound)}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        // 7,000 events: some 110 blocks, several times what the bound holds.
        try appendEdits(client, rounds: 0..<7)
        let head = 7_000
        func cache() throws -> [String: Int] {
            try #require(try client.call("status")["block_cache"] as? [String: Int])
        }

        let failures = Mutex<[String]>([])
        let group = DispatchGroup()
        let readers = try (0..<16).map { _ in try daemon.client() }
        for (index, reader) in readers.enumerated() {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var random = SeededGenerator(seed: UInt64(index + 1))
                for _ in 0..<40 {
                    let after = Int(random.next() % UInt64(head - 10))
                    do {
                        let page = try reader.call("log", #"{"after":\#(after),"limit":10}"#)
                        let seqs = (page["events"] as? [[String: Any]] ?? []).compactMap { $0["seq"] as? Int }
                        if seqs != Array((after + 1)...(after + 10)) {
                            failures.withLock { $0.append("reader \(index) after \(after): \(seqs)") }
                        }
                    } catch {
                        failures.withLock { $0.append("reader \(index): \(error)") }
                        return
                    }
                }
            }
        }
        #expect(group.wait(timeout: .now() + 120) == .success)
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(3))")
        var kept = try cache()
        #expect(kept["max_bytes"] == bound)
        #expect(kept["bytes"]! > 0 && kept["bytes"]! <= bound, "\(kept)")
        #expect(kept["blocks"]! >= 1 && kept["misses"]! > kept["blocks"]!, "\(kept)")
        #expect(kept["hits"]! + kept["misses"]! >= 16 * 40, "each page read at least one block: \(kept)")

        // Lowered to none by a reload: emptied at once, and reads go on.
        try #"{"block_cache_bytes":0}"#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(20)
        while !daemon.stderr.contains("configuration reloaded"), Date() < deadline {
            Thread.sleep(forTimeInterval: 0.02)
        }
        kept = try cache()
        #expect(kept["max_bytes"] == 0 && kept["bytes"] == 0 && kept["blocks"] == 0, "\(kept)")
        let page = try client.call("log", #"{"after":100,"limit":3}"#)
        #expect((page["events"] as? [[String: Any]])?.compactMap { $0["seq"] as? Int } == [101, 102, 103])
        #expect(try cache()["blocks"] == 0)
    }

}

/// Appends `rounds` of 1,000 edits shaped like the field workload's, over 300 jobs.
private func appendEdits(_ client: RPCClient, rounds: Range<Int>) throws {
    let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
    for round in rounds {
        _ = try client.call(
            "append",
            eventsParams(
                (0..<1000).map { index in
                    let n = round * 1000 + index
                    return
                        #"{"entity":"job/\#(n % 300)","kind":"edit","fields":{"note":"visit \#(n) at site \#(n % 17)","status_hint":"\#(statuses[n % 5])","hours":\#(n % 9)}}"#
                }))
    }
}
