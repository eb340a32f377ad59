import EventStore
import Foundation
import Projections
import TestSupport
import Testing

/// `list` with `pending_for` on a large store, against a real daemon: a page for a peer that
/// never synced costs a page, not the store (it once decoded every event the peer lacked,
/// for every page: a minute of CPU on a million events).
@Suite("list with pending_for on a large store")
struct PendingPageTests {
    static let entities = 100_000

    /// `job/NNNNNN` of entity `index`, so that entity order is index order.
    static func name(_ index: Int) -> String { "job/" + String(String(1_000_000 + index).dropFirst()) }

    /// Every thousandth job is done, and every thousandth (half-way) deleted.
    static func isDone(_ index: Int) -> Bool { index % 1000 == 0 }
    static func isDeleted(_ index: Int) -> Bool { index % 1000 == 500 }

    /// A daemon over a store of `entities` jobs of one event each (plus the deletes): the
    /// shape that made every page decode every event. The store is written in process
    /// before the daemon opens it.
    static func largeStore() throws -> DaemonProcess {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evpend-\(UUID().uuidString.prefix(8))"
        )
        .path
        do {
            var options = StoreOptions()
            options.environment.durable = false
            let log = try EventLog.open(directory: root + "/data", options: options)
            for start in stride(from: 0, to: entities, by: 10_000) {
                var batch: [InputEvent] = []
                for index in start..<min(start + 10_000, entities) {
                    let status = isDone(index) ? "done" : "assigned"
                    batch.append(
                        try EventCodec.decodeInput(
                            Array(#"{"entity":"\#(name(index))","kind":"status","status":"\#(status)"}"#.utf8)))
                    if isDeleted(index) {
                        batch.append(
                            try EventCodec.decodeInput(Array(#"{"entity":"\#(name(index))","kind":"delete"}"#.utf8)))
                    }
                }
                _ = try log.append(batch)
            }
            try log.sync()
        }
        return try DaemonProcess(
            root: root,
            arguments: [
                "--node", "field", "--sync-interval-s", "3600", "--backoff-base-s", "3600", "--backoff-cap-s", "3600",
            ])
    }

    /// The CPU time the process has used (user and system), in seconds, from /proc/PID/stat.
    static func cpuSeconds(_ pid: Int32) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // The fields after the command name (in parentheses, which may hold spaces): state
        // is field 3, utime 14 and stime 15.
        let close = try #require(stat.range(of: ")", options: .backwards))
        let fields = stat[close.upperBound...].split(separator: " ")
        let user = try #require(Double(fields[11]))
        let system = try #require(Double(fields[12]))
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// One page of `list` for the peer `never`; the entities, `next`, and the wall and daemon
    /// CPU seconds it took.
    static func page(_ daemon: DaemonProcess, _ params: String) throws -> (
        entities: [String], next: String?, seconds: Double, cpu: Double
    ) {
        let client = try daemon.client()
        let cpu = try cpuSeconds(daemon.process.processIdentifier)
        let started = Date()
        let result = try client.call("list", #"{"pending_for":"never","# + params + "}")
        let seconds = Date().timeIntervalSince(started)
        let used = try cpuSeconds(daemon.process.processIdentifier) - cpu
        let entities = (result["entities"] as? [[String: Any]] ?? []).compactMap { $0["entity"] as? String }
        return (entities, result["next"] as? String, seconds, used)
    }

    @Test(
        "on 100,000 entities a page for a peer never synced is answered within 5 s using under 2 s of the daemon's CPU; paged to the end, exactly the entities it lacks"
    )
    func neverSyncedPeer() throws {
        let daemon = try PendingPageTests.largeStore()
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        _ = try client.call("peers.add", #"{"name":"never","url":"unix://\#(daemon.root)/nobody.sock"}"#)
        #expect(try client.call("status")["entities"] as? Int == PendingPageTests.entities)
        let live = (0..<PendingPageTests.entities).filter { !PendingPageTests.isDeleted($0) }

        // The first pages: what a page of list costs (the old code decoded all 100,100
        // events for each: about 6 s of CPU in a debug build).
        let first = try PendingPageTests.page(daemon, #""limit":100"#)
        #expect(first.seconds < 5, "answered in \(first.seconds) s")
        #expect(first.cpu < 2, "the daemon used \(first.cpu) s of CPU")
        #expect(first.entities == live.prefix(100).map(PendingPageTests.name))
        #expect(first.next == PendingPageTests.name(99))
        let second = try PendingPageTests.page(daemon, #""limit":100,"after":"\#(first.next ?? "")""#)
        #expect(second.seconds < 5 && second.cpu < 2, "\(second.seconds) s, \(second.cpu) s of CPU")
        #expect(second.entities == live.dropFirst(100).prefix(100).map(PendingPageTests.name))

        // A filter that keeps one entity in a thousand: each page scans a bounded number
        // of entities, so some hold fewer than the limit (even none) with a next to go on.
        var done: [String] = []
        var after: String?
        var shortPages = 0
        var pages = 0
        var slowest = (seconds: 0.0, cpu: 0.0)
        repeat {
            let page = try PendingPageTests.page(
                daemon, #""status":"done","limit":100"# + (after.map { #","after":"\#($0)""# } ?? ""))
            done += page.entities
            if page.next != nil, page.entities.count < 100 { shortPages += 1 }
            slowest = (max(slowest.seconds, page.seconds), max(slowest.cpu, page.cpu))
            after = page.next
            pages += 1
        } while after != nil && pages < 1000
        #expect(done == (0..<PendingPageTests.entities).filter(PendingPageTests.isDone).map(PendingPageTests.name))
        #expect(shortPages > 0, "\(pages) pages")
        #expect(slowest.seconds < 5 && slowest.cpu < 2, "slowest page: \(slowest)")

        // Every entity, 10,000 at a time: exactly the live ones, in order.
        var all: [String] = []
        after = nil
        pages = 0
        repeat {
            let page = try PendingPageTests.page(
                daemon, #""limit":10000"# + (after.map { #","after":"\#($0)""# } ?? ""))
            all += page.entities
            slowest = (max(slowest.seconds, page.seconds), max(slowest.cpu, page.cpu))
            after = page.next
            pages += 1
        } while after != nil && pages < 1000
        #expect(all == live.map(PendingPageTests.name))
        #expect(slowest.seconds < 5 && slowest.cpu < 2, "slowest page: \(slowest)")
        // The daemon still serves.
        #expect(
            try client.call("status")["events"] as? Int == PendingPageTests.entities + PendingPageTests.entities / 1000)
    }
}
