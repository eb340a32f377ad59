import Foundation
import TestSupport
import Testing
import UnixSocket

/// Local clients that try to exhaust the daemon: answers never read, huge batches, more
/// connections than it serves, idle and half-sent connections, over-long lines. Each runs
/// the attack against a real daemon and asserts the bound while it runs.
@Suite("Local client limits")
struct ClientLimitsTests {
    /// Polls `condition` every 50 ms until it holds or `timeout` seconds pass.
    func eventually(timeout: Double = 15, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    /// A raw connection whose reads give up after `timeout` seconds.
    func connect(_ daemon: DaemonProcess, timeout: Double = 15) throws -> RPCClient {
        let client = try daemon.client()
        try client.connection.setTimeouts(read: timeout, write: timeout)
        return client
    }

    /// The `data.reason` and message of an error response.
    func reason(_ response: [String: Any]) -> (reason: String?, message: String) {
        let error = response["error"] as? [String: Any]
        return ((error?["data"] as? [String: Any])?["reason"] as? String, error?["message"] as? String ?? "")
    }

    @Test(
        "a batch of 300 log pages of 10000 events, never read: RSS stays < 300 MB, others are answered, the batch past 16 MiB is too_large"
    )
    func batchAmplification() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let writer = try connect(daemon, timeout: 60)
        // 10,000 events of ~300 bytes in one append: each page of the batch is ~3 MB.
        let pad = String(repeating: "p", count: 200)
        let events = (0..<10_000).map { #"{"entity":"job/\#($0)","kind":"edit","fields":{"pad":"\#(pad)"}}"# }
        #expect(try writer.call("append", eventsParams(events))["appended"] as? Int == 10_000)

        let attacker = try connect(daemon, timeout: 60)
        let members = (0..<300).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"log","params":{"limit":10000}}"# }
        try attacker.send("[" + members.joined(separator: ",") + "]")
        var peak = 0
        for _ in 0..<20 {
            peak = max(peak, daemon.residentMegabytes)
            _ = try writer.call("status")
            Thread.sleep(forTimeInterval: 0.15)
        }
        peak = max(peak, daemon.residentMegabytes)
        #expect(!memoryBoundsApply || peak < 300, "the daemon's RSS reached \(peak) MB")
        // The batch is answered, one response per member: pages until the batch passed
        // max_batch_response_bytes, too_large after.
        let line = try #require(try attacker.readLine())
        let responses = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]])
        #expect(responses.count == 300)
        let pages = responses.prefix { $0["result"] != nil }.count
        #expect(pages >= 1 && pages < 300)
        for response in responses.dropFirst(pages) {
            let (reason, message) = reason(response)
            #expect(reason == "too_large")
            #expect(message.contains("max_batch_response_bytes"))
        }
        #expect(responses.map { $0["id"] as? Int } == (0..<300).map { $0 })
        try daemon.stop()
    }

    @Test(
        "a client that leaves during a batch of 300 log pages: the rest is not run (within 20 s the daemon uses < 0.25 s of CPU in a second)"
    )
    func goneClientStopsBatch() throws {
        // No byte cap to end the batch early: only the client's leaving may.
        let daemon = try DaemonProcess(arguments: ["--max-batch-response-bytes", "\(1 << 40)"])
        defer { daemon.removeFiles() }
        let writer = try connect(daemon, timeout: 60)
        let pad = String(repeating: "p", count: 200)
        let events = (0..<10_000).map { #"{"entity":"job/\#($0)","kind":"edit","fields":{"pad":"\#(pad)"}}"# }
        _ = try writer.call("append", eventsParams(events))
        let attacker = try connect(daemon)
        let members = (0..<300).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"log","params":{"limit":10000}}"# }
        try attacker.send("[" + members.joined(separator: ",") + "]")
        Thread.sleep(forTimeInterval: 0.3)
        attacker.connection.close()
        // The page being made when the client left is finished; then the daemon goes
        // quiet (the batch's 300 pages would keep it busy for minutes).
        var quiet = false
        let deadline = Date().addingTimeInterval(20)
        while !quiet, Date() < deadline {
            let before = daemon.cpuSeconds
            Thread.sleep(forTimeInterval: 1)
            quiet = daemon.cpuSeconds - before < 0.25
        }
        #expect(quiet, "the daemon kept working for a client that left")
        _ = try writer.call("status")
        try daemon.stop()
    }

    @Test("a log page ends at max_page_bytes with next, in seq order and in id order; paging reads each event once")
    func logPagesAreBoundedInBytes() throws {
        let daemon = try DaemonProcess(arguments: ["--max-page-bytes", "65536", "--max-event-bytes", "131072"])
        defer { daemon.removeFiles() }
        let client = try connect(daemon)
        let padding = String(repeating: "p", count: 30_000)
        let events = (1...6).map { #"{"entity":"doc/\#($0)","kind":"edit","fields":{"body":"\#(padding)"}}"# }
        _ = try client.call("append", eventsParams(events))
        for order in ["seq", "id"] {
            var seen: [String] = []
            var after: String? = nil
            var pages = 0
            repeat {
                var params = #"{"limit":100,"order":"\#(order)""#
                if let after { params += order == "seq" ? #","after":\#(after)"# : #","after":"\#(after)""# }
                let page = try client.call("log", params + "}")
                let found = page["events"] as! [[String: Any]]
                #expect(found.count == 2, "order \(order), page \(pages): \(found.count) events")
                seen += found.map { $0["id"] as! String }
                after = (page["next"] as? Int).map(String.init) ?? page["next"] as? String
                pages += 1
            } while after != nil && pages < 10
            #expect(pages == 3, "order \(order)")
            #expect(seen.count == 6 && Set(seen).count == 6 && seen == seen.sorted(), "order \(order)")
        }
        // One event larger than the budget still comes, alone.
        let big = String(repeating: "b", count: 60_000)
        _ = try client.call(
            "append", eventsParams([#"{"entity":"doc/big","kind":"edit","fields":{"a":"\#(big)","b":"\#(big.prefix(10_000))"}}"#]))
        let page = try client.call("log", #"{"entity":"doc/big"}"#)
        #expect((page["events"] as! [[String: Any]]).count == 1)
    }

    @Test("200 pipelined gets of a 6 MB entity, never read: RSS stays < 300 MB, others are answered, nothing is lost")
    func pipelinedAnswersWait() throws {
        // The default max_queued_response_bytes, 64 MiB: the answers would be 1.2 GB.
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let writer = try connect(daemon, timeout: 60)
        let pad = String(repeating: "v", count: 60_000)
        let events = (0..<100).map { #"{"entity":"big/1","kind":"edit","fields":{"f\#($0)":"\#(pad)"}}"# }
        _ = try writer.call("append", eventsParams(events))
        let baseline = daemon.openDescriptors

        let attacker = try connect(daemon, timeout: 60)
        let get = Array(#"{"jsonrpc":"2.0","id":1,"method":"get","params":{"entity":"big/1"}}"#.utf8) + [0x0A]
        try attacker.send(Array([[UInt8]](repeating: get, count: 200).joined()))
        var peak = 0
        for _ in 0..<25 {
            peak = max(peak, daemon.residentMegabytes)
            _ = try writer.call("status")
            Thread.sleep(forTimeInterval: 0.15)
        }
        peak = max(peak, daemon.residentMegabytes)
        #expect(!memoryBoundsApply || peak < 300, "the daemon's RSS reached \(peak) MB")
        // The answers wait for the client; none is dropped.
        for _ in 0..<3 {
            let response = try attacker.readJSON()
            #expect((response["result"] as? [String: Any])?["entity"] as? String == "big/1")
        }
        attacker.connection.close()
        #expect(
            eventually { daemon.openDescriptors <= baseline },
            "descriptors: \(daemon.openDescriptors), were \(baseline)")
        _ = try writer.call("status")
        try daemon.stop()
    }

    @Test("a batch longer than max_batch_requests gets one too_large error; one at the limit is answered")
    func batchTooLong() throws {
        let daemon = try DaemonProcess(arguments: ["--max-batch-requests", "10"])
        defer { daemon.removeFiles() }
        let client = try connect(daemon)
        func batch(_ count: Int) -> String {
            "[" + (0..<count).map { #"{"jsonrpc":"2.0","id":\#($0),"method":"status"}"# }.joined(separator: ",") + "]"
        }
        try client.send(batch(11))
        let refused = try client.readJSON()
        #expect(refused["id"] is NSNull)
        let (reason, message) = reason(refused)
        #expect(reason == "too_large")
        #expect(message.contains("11") && message.contains("max_batch_requests"), "\(message)")
        try client.send(batch(10))
        let line = try #require(try client.readLine())
        let answers = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]]
        #expect(answers?.count == 10 && answers?.allSatisfy { $0["result"] != nil } == true)
        try daemon.stop()
    }

    @Test(
        "max_connections: one more gets an unavailable error line and is closed; after some close, new ones are served; no descriptor leaks"
    )
    func connectionCap() throws {
        let daemon = try DaemonProcess(arguments: ["--max-connections", "5"])
        defer { daemon.removeFiles() }
        let baseline = daemon.settledDescriptors()
        // Five served connections (the probe that saw the daemon start may still count
        // for a moment, and then a sixth is refused: connect again).
        var clients: [RPCClient] = []
        func connectServed() -> Bool {
            guard let client = try? connect(daemon), answersStatus(client) else { return false }
            clients.append(client)
            return true
        }
        for _ in 0..<5 { #expect(eventually(connectServed)) }
        for _ in 0..<20 {
            let extra = try connect(daemon)
            let refused = try extra.readJSON()
            let (reason, message) = reason(refused)
            #expect(reason == "unavailable")
            #expect(message.contains("5") && message.contains("max_connections"), "\(message)")
            #expect(try extra.readLine() == nil, "the refused connection is closed")
        }
        for client in clients { _ = try client.call("status") }
        clients.removeFirst(2)
        // The two closed connections are let go asynchronously: new ones are served soon.
        for _ in 0..<2 { #expect(eventually(connectServed)) }
        #expect(clients.count == 5)
        clients.removeAll()
        #expect(
            eventually { daemon.openDescriptors <= baseline },
            "descriptors: \(daemon.openDescriptors), were \(baseline)")
        try daemon.stop()
    }

    @Test("an idle connection is closed after idle_timeout_s; a watching one and a busy one are not")
    func idleTimeout() throws {
        let daemon = try DaemonProcess(arguments: ["--idle-timeout-s", "1"])
        defer { daemon.removeFiles() }
        let idle = try connect(daemon)
        _ = try idle.call("status")
        let watcher = try connect(daemon)
        _ = try watcher.call("watch")
        let started = Date()
        #expect(try idle.readLine() == nil, "the idle connection is closed")
        #expect(Date().timeIntervalSince(started) < 12)
        // A connection that keeps asking stays, and so does the watch.
        let busy = try connect(daemon)
        for _ in 0..<8 {
            _ = try busy.call("status")
            Thread.sleep(forTimeInterval: 0.3)
        }
        _ = try watcher.call("status")
        let writer = try connect(daemon)
        _ = try writer.call("append", eventsParams([#"{"entity":"job/1","kind":"delete"}"#]))
        #expect(try watcher.readJSON()["method"] as? String == "event")
        withExtendedLifetime((watcher, busy, writer)) {}
        try daemon.stop()
    }

    @Test("a line begun and not finished within line_timeout_s gets a timeout error line and is closed")
    func lineTimeout() throws {
        let daemon = try DaemonProcess(arguments: ["--line-timeout-s", "1"])
        defer { daemon.removeFiles() }
        let baseline = daemon.settledDescriptors()
        let slow = try connect(daemon)
        try slow.send(Array(#"{"jsonrpc":"2.0","id":1,"method":"sta"#.utf8))
        let response = try slow.readJSON()
        let (reason, message) = reason(response)
        #expect(reason == "timeout")
        #expect(message.contains("line_timeout_s"), "\(message)")
        #expect(try slow.readLine() == nil)
        // Others were served meanwhile, and whole lines sent slowly are fine.
        let other = try connect(daemon)
        _ = try other.call("status")
        withExtendedLifetime(other) {}
        #expect(eventually { daemon.openDescriptors <= baseline + 1 })
        try daemon.stop()
    }

    @Test(
        "30 half-sent over-long lines (17 MiB each, 16 MiB limit): RSS < 200 MB once sent; descriptors return to baseline"
    )
    func overLongLines() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        let baseline = daemon.settledDescriptors()
        let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1 << 20)
        var attackers: [UnixConnection] = []
        for _ in 0..<30 {
            let connection = try UnixConnection.connect(to: daemon.socketPath)
            try connection.setTimeouts(read: 15, write: 15)
            try connection.write(Array(#"{"jsonrpc":"2.0","id":1,"method":"status","params":{"pad":""#.utf8))
            for _ in 0..<17 { try connection.write(chunk) }
            attackers.append(connection)
        }
        // The daemon has read them all (the writes returned): what it holds of them is gone.
        let client = try connect(daemon)
        _ = try client.call("status")
        Thread.sleep(forTimeInterval: 0.5)
        let rss = daemon.residentMegabytes
        #expect(!memoryBoundsApply || rss < 200, "the daemon's RSS is \(rss) MB")
        for connection in attackers { connection.close() }
        #expect(
            eventually { daemon.openDescriptors <= baseline + 1 },
            "descriptors: \(daemon.openDescriptors), were \(baseline)")
        _ = try client.call("status")
        try daemon.stop()
    }
}

/// Whether `client` is served: it answers `status` (a refused connection answers an
/// error with id null, or nothing).
private func answersStatus(_ client: RPCClient) -> Bool {
    guard (try? client.send(#"{"jsonrpc":"2.0","id":0,"method":"status"}"#)) != nil,
        let response = try? client.readJSON()
    else { return false }
    return response["result"] != nil
}

extension DaemonProcess {
    /// The daemon's resident memory (VmRSS), in MB.
    fileprivate var residentMegabytes: Int {
        let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) / 1024
    }

    /// The CPU time the daemon has used, user and system, in seconds.
    fileprivate var cpuSeconds: Double {
        let stat = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8)) ?? ""
        // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
        guard let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// How many descriptors the daemon has open.
    fileprivate var openDescriptors: Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(process.processIdentifier)/fd").count) ?? -1
    }

    /// The daemon's descriptors once it serves and has let its start-up probes go: one
    /// request answered on a connection then closed, and the count unchanged for 0.5 s
    /// (a slow build, under a sanitizer, opens its last ones well after the socket appears).
    fileprivate func settledDescriptors() -> Int {
        if let probe = try? client() {
            _ = answersStatus(probe)
            probe.connection.close()
        }
        var last = openDescriptors
        var steadySince = Date()
        let until = Date().addingTimeInterval(10)
        while Date() < until, Date().timeIntervalSince(steadySince) < 0.5 {
            Thread.sleep(forTimeInterval: 0.05)
            let now = openDescriptors
            if now != last { (last, steadySince) = (now, Date()) }
        }
        return last
    }
}

/// The daemon under a task or descriptor limit: run as a user of its own, so that
/// RLIMIT_NPROC (which root is exempt from) counts only its threads.
@Suite("Local client limits: threads and descriptors")
struct SystemLimitTests {
    /// A daemon run as `uid` under `prlimit` with `limits` (e.g. `--nproc=8:8`).
    final class LimitedDaemon {
        let root: String
        let socketPath: String
        let process = Process()

        init(root: String, uid: UInt32, limits: [String]) throws {
            self.root = root
            socketPath = root + "/evstored.sock"
            process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
            process.arguments =
                limits + ["--"] + asUser(uid, gid: uid)
                + [try builtBinary("evstored").path, "--data-dir", root + "/data", "--socket", socketPath]
            process.environment = ProcessInfo.processInfo.environment.filter {
                !$0.key.hasPrefix("EVSTORE_") && $0.key != "NOTIFY_SOCKET"
            }
            process.standardError = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            try process.run()
        }

        var pid: Int32 { process.processIdentifier }

        var threads: Int {
            let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
            let line = status.split(separator: "\n").first { $0.hasPrefix("Threads:") } ?? ""
            return Int(line.split(separator: "\t").last ?? "") ?? 0
        }

        var descriptors: Int { (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1 }

        func connect() throws -> RPCClient {
            let client = try RPCClient(path: socketPath)
            try client.connection.setTimeouts(read: 15, write: 15)
            return client
        }

        /// A connection that has been answered, once the daemon serves one.
        func served(timeout: Double = 20) -> RPCClient? {
            let deadline = Date().addingTimeInterval(timeout)
            while Date() < deadline {
                if let client = try? connect(), answersStatus(client) { return client }
                Thread.sleep(forTimeInterval: 0.05)
            }
            return nil
        }

        func kill() {
            Glibc.kill(pid, SIGKILL)
            reap(process)
        }
    }

    enum Limit: String, CaseIterable, CustomTestStringConvertible {
        case threads, descriptors
        var testDescription: String { rawValue }
        /// A uid no other process of the tests runs as (the cases run at once, and a task
        /// limit counts every process of its user).
        var uid: UInt32 { self == .threads ? 64_999 : 64_998 }
    }

    @Test(
        "under a task limit of the threads it runs with one connection, the daemon serves 50 more: no thread per connection",
        .enabled(if: canSwitchUsers && FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit")))
    func noThreadPerConnection() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let uid = Limit.threads.uid
        chown(root, uid, uid)
        let measure = try LimitedDaemon(root: root, uid: uid, limits: [])
        let probe = try #require(measure.served())
        Thread.sleep(forTimeInterval: 0.5)
        let used = measure.threads
        withExtendedLifetime(probe) {}
        measure.kill()

        let daemon = try LimitedDaemon(root: root, uid: uid, limits: ["--nproc=\(used):\(used)"])
        defer { daemon.kill() }
        var held = [try #require(daemon.served(), "the daemon serves one connection under --nproc=\(used)")]
        for _ in 0..<50 {
            let client = try daemon.connect()
            _ = try client.call("status")
            held.append(client)
        }
        #expect(daemon.threads <= used, "threads: \(daemon.threads)")
        for client in held { _ = try client.call("status") }
    }

    @Test(
        "under a descriptor limit, a connection the daemon cannot serve is sent an unavailable line and closed; nothing leaks; later ones are served",
        .enabled(if: canSwitchUsers && FileManager.default.isExecutableFile(atPath: "/usr/bin/prlimit")),
        arguments: [Limit.descriptors])
    func refusedAtSystemLimit(_ limit: Limit) throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        chown(root, limit.uid, limit.uid)
        // What the daemon uses with one connection open: its limit then.
        let measure = try LimitedDaemon(root: root, uid: limit.uid, limits: [])
        let probe = try #require(measure.served())
        Thread.sleep(forTimeInterval: 0.5)
        let used = limit == .threads ? measure.threads : measure.descriptors
        withExtendedLifetime(probe) {}
        measure.kill()

        let option = limit == .threads ? "--nproc=\(used):\(used)" : "--nofile=\(used):\(used)"
        let daemon = try LimitedDaemon(root: root, uid: limit.uid, limits: [option])
        defer { daemon.kill() }
        let served = try #require(daemon.served(), "the daemon serves one connection under \(option)")
        Thread.sleep(forTimeInterval: 0.5)
        let baseline = daemon.descriptors
        // (Should the daemon idle with less than it was measured with, a connection more
        // is served: it is kept open.)
        var held: [RPCClient] = []
        var refusals = 0
        while refusals < 10 && held.count < 3 {
            let client = try daemon.connect()
            // A refused connection may be closed before the request is sent: its error
            // line is read all the same.
            try? client.send(#"{"jsonrpc":"2.0","id":0,"method":"status"}"#)
            let response = try client.readJSON()
            if response["result"] != nil {
                held.append(client)
                continue
            }
            let error = response["error"] as? [String: Any]
            #expect((error?["data"] as? [String: Any])?["reason"] as? String == "unavailable")
            let message = error?["message"] as? String ?? ""
            #expect(message.contains(limit == .threads ? "thread" : "file descriptor"), "\(response)")
            // Closed: the end of the stream, or a reset (the request it sent was unread).
            do {
                #expect(try client.readLine() == nil)
            } catch let error as SocketError {
                #expect(error.code == ECONNRESET, "\(error)")
            }
            refusals += 1
        }
        #expect(refusals == 10)
        // Polled: the daemon closes a refused connection and takes its reserve descriptor
        // back on its own thread.
        let expected = baseline + held.count
        let until = Date().addingTimeInterval(5)
        while daemon.descriptors != expected, Date() < until { Thread.sleep(forTimeInterval: 0.05) }
        #expect(daemon.descriptors == expected, "no descriptor of a refused connection is left open: \(daemon.descriptors), not \(expected)")
        held.removeAll()
        // The connection that has what it needs is still served; once it ends, a new one is.
        _ = try served.call("status")
        served.connection.shutdown()
        #expect(daemon.served() != nil, "a new connection is served once the daemon has room")
        #expect(daemon.process.isRunning)
    }
}
