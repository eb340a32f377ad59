import Foundation
import Synchronization
import TestSupport
import Testing
import UnixSocket

/// A 3G link with packet loss: a node ("van") and its hq, each in a network namespace of
/// its own, joined by a link of 300 ms one-way delay, 5 % loss and 1 Mbit/s each way;
/// the van syncs with hq over ssh:// through an sshd in hq's namespace.
///
/// The link is Tests/Helpers/lossy-link.py (netem's delay, loss and rate in user space,
/// between two tun devices), so it works on kernels built without sch_netem.
///
/// EVSTORE_DEGRADED_EVENTS sets how many events the van holds (4,000 by default, so the
/// suite stays within about a minute; `make torture` runs 20,000).
@Suite("A degraded link", .serialized)
struct DegradedLinkTests {
    static let events = Int(ProcessInfo.processInfo.environment["EVSTORE_DEGRADED_EVENTS"] ?? "") ?? 4000

    static let usable =
        NetworkNamespace.usable && FileManager.default.isExecutableFile(atPath: "/usr/sbin/sshd")
        && FileManager.default.fileExists(atPath: "/dev/net/tun")
        && FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")

    static let reason: Comment =
        "needs root, ip, sshd, python3 and /dev/net/tun (network namespaces with a lossy link between them)"

    static let vanAddress = "10.77.0.1"
    static let hqAddress = "10.77.0.2"

    /// The two namespaces and the lossy link between them (device `lk0` in each).
    final class Link {
        let van: NetworkNamespace
        let hq: NetworkNamespace
        let emulator = Process()
        let output = Pipe()

        /// `rate` in bits per second each way.
        init(rate: Int = 1_000_000) throws {
            van = try NetworkNamespace(prefix: "evvan")
            hq = try NetworkNamespace(prefix: "evhq")
            do {
                let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                    .deletingLastPathComponent().appendingPathComponent("Helpers/lossy-link.py").path
                emulator.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
                emulator.arguments = [
                    script, van.name, "lk0", hq.name, "lk0", "--delay", "0.3", "--loss", "0.05", "--rate", String(rate),
                ]
                emulator.standardOutput = output
                emulator.standardError = output
                try emulator.run()
                let ready = output.fileHandleForReading.availableData
                guard String(decoding: ready, as: UTF8.self).contains("ready") else {
                    throw DaemonError("lossy-link.py: \(String(decoding: ready, as: UTF8.self))")
                }
                for (namespace, address) in [(van, DegradedLinkTests.vanAddress), (hq, DegradedLinkTests.hqAddress)] {
                    try namespace.run(["link", "set", "lo", "up"])
                    try namespace.run(["addr", "add", "\(address)/24", "dev", "lk0"])
                    try namespace.run(["link", "set", "lk0", "up"])
                }
            } catch {
                stop()
                throw error
            }
        }

        /// Cuts the link, or brings it back: the emulator drops what it holds in flight and
        /// everything after, and the van's device goes down (or the reverse).
        func set(up: Bool) throws {
            if up {
                try van.run(["link", "set", "lk0", "up"])
                kill(emulator.processIdentifier, SIGUSR2)
            } else {
                kill(emulator.processIdentifier, SIGUSR1)
                try van.run(["link", "set", "lk0", "down"])
            }
        }

        /// Stops the emulator and deletes the namespaces; what the emulator counted.
        @discardableResult
        func stop() -> String {
            var counts = ""
            if emulator.isRunning {
                emulator.terminate()
                reap(emulator)
                if emulator.isRunning {
                    kill(emulator.processIdentifier, SIGKILL)
                    reap(emulator)
                }
                counts = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
            }
            van.delete()
            hq.delete()
            return counts
        }
    }

    /// One session's outcome from `sync`.
    struct Session {
        var sent: Int
        var bytesSent: Int
        var bytesReceived: Int
        var error: String?
    }

    func sync(_ daemon: DaemonProcess, _ url: String) throws -> Session {
        let client = try daemon.client()
        try client.connection.setTimeouts(read: 900, write: 60)
        let result = try client.call("sync", #"{"peer":"\#(url)"}"#)
        let outcome = (result["peers"] as! [[String: Any]])[0]
        let error = outcome["error"] as? [String: Any]
        return Session(
            sent: outcome["sent"] as? Int ?? 0, bytesSent: outcome["bytes_sent"] as? Int ?? 0,
            bytesReceived: outcome["bytes_received"] as? Int ?? 0,
            error: error.map { "\($0["reason"] ?? "?"): \($0["message"] ?? "")" })
    }

    func status(_ daemon: DaemonProcess) throws -> [String: Any] { try daemon.client().call("status") }

    /// The van with the field workload, hq empty, and sshd in hq's namespace.
    func setUp(_ link: Link, hqArguments: [String] = []) throws -> (
        van: DaemonProcess, hq: DaemonProcess, server: TransportTests.SSHServer, url: String, events: Int
    ) {
        let evctl = try builtBinary("evctl")
        let server = try TransportTests.SSHServer(
            evctlDirectory: evctl.deletingLastPathComponent().path, listenAddress: DegradedLinkTests.hqAddress,
            launcher: link.hq.launcher)
        let hq = try DaemonProcess(arguments: ["--node", "hq"] + hqArguments, launcher: link.hq.launcher)
        let van = try DaemonProcess(
            arguments: [
                "--node", "van",
                "--ssh-command", server.sshCommand(key: "client_key") + " -o ServerAliveInterval=5",
            ], launcher: link.van.launcher)
        let lines = try ReplicationTests().workloads(replicas: 2, events: DegradedLinkTests.events, seed: 17)[0]
        try ReplicationTests().load(van, Array(lines.prefix(DegradedLinkTests.events)))
        let events = try status(van)["events"] as! Int
        let url = "ssh://root@\(DegradedLinkTests.hqAddress):\(server.port)\(hq.socketPath)"
        return (van, hq, server, url, events)
    }

    @Test(
        "the field workload reaches hq over ssh through 300 ms, 5 % loss and 1 Mbit/s; the digests are equal",
        .enabled(if: DegradedLinkTests.usable, DegradedLinkTests.reason), .timeLimit(.minutes(30)))
    func converges() throws {
        let link = try Link()
        var counts = ""
        defer {
            counts = link.stop()
            print("link: \(counts)")
        }
        let (van, hq, server, url, events) = try setUp(link)
        defer {
            van.removeFiles()
            hq.removeFiles()
            server.stop()
        }
        let started = Date()
        var sessions: [Session] = []
        repeat {
            sessions.append(try sync(van, url))
        } while sessions.last!.error != nil && sessions.count < 5
        let seconds = Date().timeIntervalSince(started)
        print(
            "degraded link: \(events) events in \(String(format: "%.1f", seconds)) s, \(sessions.count) session(s), "
                + "\(sessions.map(\.bytesSent).reduce(0, +)) bytes sent, \(sessions.map(\.bytesReceived).reduce(0, +)) received; "
                + "errors: \(sessions.compactMap(\.error))")
        #expect(sessions.last?.error == nil, "\(sessions)")
        #expect(sessions.map(\.sent).reduce(0, +) == events)
        let ours = try status(van)
        let theirs = try status(hq)
        #expect(theirs["events"] as? Int == events)
        #expect(theirs["digest"] as? String == ours["digest"] as? String)
    }

    @Test(
        "a session cut by taking the link down mid-stream: the next one sends exactly what hq still lacks",
        .enabled(if: DegradedLinkTests.usable, DegradedLinkTests.reason), .timeLimit(.minutes(30)))
    func resumesAfterCut() throws {
        // A tenth of the other test's rate: the stream lasts seconds, longer than hq may
        // lag behind in committing what it has received on a loaded or sanitized build, so
        // a cut made once hq holds at most half still finds the rest on the wire.
        let link = try Link(rate: 100_000)
        defer { print("link: \(link.stop())") }
        // hq gives up on a silent session after 8 s, so the cut session is over on both
        // sides before the link comes back.
        let (van, hq, server, url, events) = try setUp(link, hqArguments: ["--sync-timeout-s", "8"])
        defer {
            van.removeFiles()
            hq.removeFiles()
            server.stop()
        }
        // Sessions in the background until one fails after the cut or all is sent; the
        // link goes down once hq has committed a batch and while at least half is still
        // to come.
        let first = Mutex<[Session]>([])
        let cutDone = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            while let session = try? sync(van, url) {
                first.withLock { $0.append(session) }
                if session.error == nil || cutDone.load(ordering: .relaxed) || first.withLock({ $0.count }) >= 10 {
                    break
                }
            }
            done.signal()
        }
        var heldAtCut = 0
        let deadline = Date().addingTimeInterval(600)
        while Date() < deadline, done.wait(timeout: .now()) == .timedOut {
            heldAtCut = try status(hq)["events"] as? Int ?? 0
            if heldAtCut > 0 && heldAtCut <= events / 2 { break }
            Thread.sleep(forTimeInterval: 0.02)
        }
        try #require(
            heldAtCut > 0 && heldAtCut <= events / 2, "the cut missed the session: hq held \(heldAtCut) of \(events)")
        try link.set(up: false)
        cutDone.store(true, ordering: .relaxed)
        let cutAt = Date()
        #expect(done.wait(timeout: .now() + 120) == .success, "the cut session did not end")
        let before = first.withLock { $0 }
        let cut = try #require(before.last)
        print(
            "cut session ended \(String(format: "%.1f", Date().timeIntervalSince(cutAt))) s after the link went down: \(cut); "
                + "\(before.count) session(s) before and through the cut")
        #expect(cut.error != nil)
        let held = try status(hq)["events"] as! Int
        #expect(held >= heldAtCut && held < events)

        // What the van's kernel still holds of the cut connection (a closed socket's unsent
        // bytes) would reach hq once the link is back; hq's end of that session must be
        // gone first, or it commits those batches while the next session runs.
        let gone = Date().addingTimeInterval(60)
        let ended = "failed: timeout: the peer sent nothing for 8 s"
        while Date() < gone, !hq.stderr.contains(ended) {
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(hq.stderr.contains(ended), "\(hq.stderr)")
        let settled = try status(hq)["events"] as! Int
        #expect(settled == held)
        try link.set(up: true)
        // Each session after the cut sends only what hq lacks as it starts: all of it for the
        // one that completes. (One that fails under load on the slow link is retried.)
        var resumed: [Session] = []
        var lackedAtLast = events - settled
        repeat {
            lackedAtLast = events - (try status(hq)["events"] as! Int)
            let session = try sync(van, url)
            #expect(session.sent <= lackedAtLast, "\(session) when hq lacked \(lackedAtLast)")
            resumed.append(session)
        } while resumed.last!.error != nil && resumed.count < 5
        #expect(resumed.last?.error == nil, "\(resumed)")
        #expect(resumed.last?.sent == lackedAtLast)
        let resent = resumed.map(\.sent).reduce(0, +)
        print(
            "cut at \(held) of \(events) held by hq: the sessions through the cut sent \(before.map(\.sent).reduce(0, +)), "
                + "the \(resumed.count) after it sent \(resent) "
                + "(\(before.map(\.sent).reduce(0, +) + resent - events) sent twice: in flight at the cut, never committed); "
                + "bytes sent \((before + resumed).map(\.bytesSent).reduce(0, +))")
        // Nothing hq held is sent again.
        #expect(resumed.count > 1 || resent == events - settled)
        #expect(try status(hq)["events"] as? Int == events)
        #expect(try status(hq)["digest"] as? String == status(van)["digest"] as? String)
    }
}
