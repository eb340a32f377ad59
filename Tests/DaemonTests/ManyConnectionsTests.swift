import Foundation
import Synchronization
import TestSupport
import Testing
import UnixSocket

/// The event loop against a real daemon: thousands of connections held at once, and a
/// client that sends without ever reading. Each asserts the bound while it runs.
@Suite("Many connections")
struct ManyConnectionsTests {
    /// Raises this process's descriptor limit to at least `count` (its children, the
    /// daemon among them, inherit it); false when it cannot.
    static func raiseDescriptorLimit(to count: Int) -> Bool {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return false }
        if limit.rlim_cur >= rlim_t(count) { return true }
        limit.rlim_cur = rlim_t(count)
        if limit.rlim_max < rlim_t(count) { limit.rlim_max = rlim_t(count) }
        return setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0
    }

    /// A line of the daemon's /proc status (`Threads`, `VmRSS`), as its number.
    static func status(_ daemon: DaemonProcess, _ field: String) -> Int {
        let text =
            (try? String(contentsOfFile: "/proc/\(daemon.process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? 0
    }

    static let held = 2000
    static let workers = 8

    @Test(
        "2,000 connections held while 8 clients append and get: every request answered, none refused; one more past max_connections gets an unavailable line; the daemon runs < 64 threads, RSS < 150 MB",
        .enabled(if: raiseDescriptorLimit(to: 2 * held + 1000)))
    func thousandsOfConnections() throws {
        let limit = ManyConnectionsTests.held + ManyConnectionsTests.workers
        // Two loops, each owning half the connections.
        let daemon = try DaemonProcess(arguments: ["--max-connections", "\(limit)", "--event-loops", "2"])
        defer { daemon.removeFiles() }
        // The probe that saw the daemon start is let go before the count matters.
        let settle = try daemon.client()
        _ = try settle.call("status")
        settle.connection.close()
        Thread.sleep(forTimeInterval: 0.5)

        // 8 clients append to and read their own entity until told to stop.
        let stop = Atomic<Bool>(false)
        let failures = Mutex<[String]>([])
        let rounds = Atomic<Int>(0)
        let group = DispatchGroup()
        var workers: [RPCClient] = []
        for _ in 0..<ManyConnectionsTests.workers {
            let client = try daemon.client()
            _ = try client.call("status")
            workers.append(client)
        }
        for (index, client) in workers.enumerated() {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                var round = 0
                while round < 20 || !stop.load(ordering: .relaxed) {
                    round += 1
                    do {
                        let entity = "job/w\(index)"
                        let appended = try client.call(
                            "append", eventsParams([#"{"entity":"\#(entity)","kind":"edit","fields":{"n":\#(round)}}"#])
                        )
                        let state = try client.call("get", #"{"entity":"\#(entity)"}"#)
                        // It reads its own write.
                        let version = (appended["versions"] as? [String: String])?[entity]
                        if version == nil || state["version"] as? String != version {
                            failures.withLock { $0.append("worker \(index): round \(round) read \(state)") }
                        }
                        rounds.add(1, ordering: .relaxed)
                    } catch {
                        failures.withLock { $0.append("worker \(index): \(error)") }
                        return
                    }
                }
            }
        }

        // 2,000 connections, each answered while they are all open.
        var held: [RPCClient] = []
        for _ in 0..<ManyConnectionsTests.held {
            let client = try daemon.client()
            try client.connection.setTimeouts(read: 60, write: 60)
            held.append(client)
        }
        for (index, client) in held.enumerated() {
            try client.send(#"{"jsonrpc":"2.0","id":\#(index),"method":"status"}"#)
        }
        var refused = 0
        for (index, client) in held.enumerated() {
            let response = try client.readJSON()
            if response["result"] == nil || response["id"] as? Int != index { refused += 1 }
        }
        #expect(refused == 0, "\(refused) of the held connections were not answered")
        let threads = ManyConnectionsTests.status(daemon, "Threads")
        let rss = ManyConnectionsTests.status(daemon, "VmRSS") / 1024
        print("with \(held.count + workers.count) connections open: \(threads) threads, RSS \(rss) MB")
        #expect(threads > 0 && threads < 64, "the daemon runs \(threads) threads with \(held.count) connections open")
        #expect(!memoryBoundsApply || rss < 150, "the daemon's RSS is \(rss) MB with \(held.count) connections open")

        // One more is past max_connections: told so, and closed.
        let extra = try daemon.client()
        try extra.connection.setTimeouts(read: 15, write: 15)
        let refusal = try extra.readJSON()
        let error = refusal["error"] as? [String: Any]
        let message = error?["message"] as? String
        #expect((error?["data"] as? [String: Any])?["reason"] as? String == "unavailable")
        #expect(message?.contains("max_connections") == true, "\(refusal)")

        stop.store(true, ordering: .relaxed)
        #expect(group.wait(timeout: .now() + 120) == .success)
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 }.prefix(3))")
        #expect(rounds.load(ordering: .relaxed) >= 20 * ManyConnectionsTests.workers)
        // Every held connection is still served.
        for client in held.prefix(200) { _ = try client.call("status") }
        held.removeAll()
        workers.removeAll()
        try daemon.stop()
    }

    @Test(
        "a client writing 100 MiB of requests and reading none is cut off with a logged reason (max_unanswered_bytes); another is answered meanwhile and after; RSS < 400 MB"
    )
    func writerThatNeverReads() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let other = try daemon.client()
        // An entity of 6 MB: its answers pass max_queued_response_bytes after a dozen gets.
        let pad = String(repeating: "v", count: 60_000)
        let events = (0..<100).map { #"{"entity":"big/1","kind":"edit","fields":{"f\#($0)":"\#(pad)"}}"# }
        _ = try other.call("append", eventsParams(events))

        let attacker = try UnixConnection.connect(to: daemon.socketPath)
        try attacker.setTimeouts(read: 30, write: 30)
        // `get` lines padded with blanks to 64 KiB: 1,600 of them make 100 MiB.
        let start = Array(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"big/1"}"#.utf8)
        let line = start + [UInt8](repeating: 0x20, count: 64 * 1024 - start.count - 2) + Array("}\n".utf8)
        let sent = Atomic<Int>(0)
        let failure = Mutex<String?>(nil)
        let failureCode = Atomic<Int32>(0)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            defer { done.signal() }
            for _ in 0..<1600 {
                do {
                    try attacker.write(line)
                } catch {
                    failure.withLock { $0 = "\(error)" }
                    failureCode.store((error as? SocketError)?.code ?? 0, ordering: .relaxed)
                    return
                }
                sent.add(line.count, ordering: .relaxed)
            }
        }
        var peak = 0
        var answered = 0
        let deadline = Date().addingTimeInterval(60)
        var finished = false
        while !finished, Date() < deadline {
            finished = done.wait(timeout: .now() + 0.1) == .success
            peak = max(peak, ManyConnectionsTests.status(daemon, "VmRSS") / 1024)
            _ = try other.call("status")
            answered += 1
        }
        #expect(finished, "the attacker's writes neither finished nor failed in 60 s")
        #expect(failure.withLock { $0 } != nil, "all 100 MiB were taken: \(sent.load(ordering: .relaxed)) bytes")
        #expect(sent.load(ordering: .relaxed) < 100 << 20)
        // Closed by the daemon, not a write that timed out waiting.
        let code = failureCode.load(ordering: .relaxed)
        #expect(code == ECONNRESET || code == EPIPE, "\(failure.withLock { $0 } ?? "")")
        #expect(!memoryBoundsApply || peak < 400, "the daemon's RSS reached \(peak) MB")
        #expect(answered > 0)
        print(
            "attacker: \(sent.load(ordering: .relaxed)) bytes sent, then \(failure.withLock { $0 } ?? "-"); peak RSS \(peak) MB; \(answered) answers to the other client"
        )
        #expect(
            daemon.stderr.contains("cut off connection") && daemon.stderr.contains("max_unanswered_bytes"),
            "\(daemon.stderr.suffix(2000))")
        attacker.close()
        _ = try other.call("get", #"{"entity":"big/1"}"#)
        _ = try daemon.client().call("status")
        try daemon.stop()
    }

    @Test("12 watches catching up from the start whose clients read nothing: other clients are answered meanwhile")
    func stalledCatchUps() throws {
        let daemon = try DaemonProcess(arguments: ["--watch-queue-events", "10"])
        defer { daemon.removeFiles() }
        let other = try daemon.client()
        try other.connection.setTimeouts(read: 20, write: 20)
        // 2 MB of events: far more than a socket's buffer, so each replay must wait.
        let pad = String(repeating: "w", count: 10_000)
        let events = (0..<200).map { #"{"entity":"doc/\#($0)","kind":"edit","fields":{"body":"\#(pad)"}}"# }
        _ = try other.call("append", eventsParams(events))
        var watchers: [RPCClient] = []
        for _ in 0..<12 {
            let watcher = try daemon.client()
            try watcher.send(#"{"jsonrpc":"2.0","id":1,"method":"watch","params":{"after":0}}"#)
            watchers.append(watcher)
        }
        Thread.sleep(forTimeInterval: 0.5)
        // More than the request threads wait on their readers: others' requests still run.
        for _ in 0..<5 {
            _ = try other.call("status")
            _ = try other.call("get", #"{"entity":"doc/1"}"#)
        }
        _ = try daemon.client().call("status")
        // A watcher that reads gets its whole replay (once the others have left, should it
        // have waited for a catch-up thread behind them).
        let reader = watchers.removeFirst()
        for watcher in watchers { watcher.connection.close() }
        #expect(try reader.readJSON()["result"] != nil)
        for _ in 0..<200 { #expect(try reader.readJSON()["method"] as? String == "event") }
        watchers.removeAll()
        try daemon.stop()
    }

    @Test("a client that sends appends and closes at once, without reading: the appends are stored")
    func sendAndLeave() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        for index in 0..<20 {
            let connection = try UnixConnection.connect(to: daemon.socketPath)
            let lines = (0..<5).map {
                #"{"jsonrpc":"2.0","id":\#($0),"method":"append","params":{"events":[{"entity":"job/\#(index)-\#($0)","kind":"delete"}]}}"#
            }
            try connection.write(Array((lines.joined(separator: "\n") + "\n").utf8))
            connection.close()
        }
        let client = try daemon.client()
        let deadline = Date().addingTimeInterval(15)
        var stored = 0
        repeat {
            stored = try client.call("status")["events"] as? Int ?? -1
            if stored == 100 { break }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        #expect(stored == 100)
        try daemon.stop()
    }
}
