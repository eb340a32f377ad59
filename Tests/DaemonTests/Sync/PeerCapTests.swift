@testable import Daemon
import Foundation
@testable import Replication
@testable import Server
import Synchronization
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// A socket that accepts every connection, counts it and says nothing: a hung peer.
final class SilentPeer: @unchecked Sendable {
    let path: String
    let listener: UnixListener
    private let accepted = Mutex<[UnixConnection]>([])
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    init(path: String) throws {
        self.path = path
        listener = try UnixListener.bind(path: path, mode: 0o666)
        DispatchQueue.global().async { [self] in
            defer { done.signal() }
            while !stopping.load(ordering: .relaxed) {
                guard let connection = try? listener.accept(timeout: 0.1) else { continue }
                accepted.withLock { $0.append(connection) }
            }
        }
    }

    /// The connections accepted so far: the sessions the daemon started.
    var sessions: Int { accepted.withLock { $0.count } }

    func stop() {
        stopping.store(true, ordering: .relaxed)
        done.wait()
        for connection in accepted.withLock({ $0 }) { connection.close() }
        listener.close()
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Outgoing sessions are keyed by what they reach, wait for a slot without piling up
/// request threads, and the peers are capped (`max_peers`); "sync all" runs through the
/// bounded pool, never a thread per peer.
@Suite("Outgoing sessions: one per target, bounded waits, max_peers")
struct PeerCapTests {
    func temporaryRoot() throws -> String {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evcap-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root + "/peer", withIntermediateDirectories: true)
        return root
    }

    /// The threads of process `pid`, from /proc.
    func threads(of pid: Int32) -> Int {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []).count
    }

    @Test("every spelling of one socket, ssh host or command is one target; a socket that is not there yet too")
    func targets() throws {
        let root = try temporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let silent = try SilentPeer(path: root + "/peer/s.sock")
        defer { silent.stop() }
        try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: root + "/peer")
        let spellings = [
            "\(root)/peer/s.sock", "\(root)/peer/./s.sock", "/\(root)/peer/s.sock", "\(root)//peer/s.sock",
            "\(root)/peer/../peer/s.sock", "\(root)/./peer/./s.sock", "\(root)/link/s.sock", "\(root)/peer/.//s.sock",
        ]
        let targets = try Set(spellings.map { try PeerURL("unix://" + $0).target })
        #expect(targets.count == 1, "\(targets)")
        #expect(try PeerURL("unix:///nowhere/x/../s.sock").target == PeerURL("unix:////nowhere/./s.sock").target)
        #expect(try PeerURL("unix:///nowhere/a.sock").target != PeerURL("unix:///nowhere/b.sock").target)
        #expect(
            try PeerURL("ssh://ev@HQ.example:22/run/s.sock").target
                == PeerURL("ssh://ev@hq.example/run/./s.sock").target)
        #expect(try PeerURL("ssh://ev@hq.example:2222").target != PeerURL("ssh://ev@hq.example").target)
        #expect(try PeerURL("exec:evctl  sync-serve").target == PeerURL("exec:'evctl' sync-serve").target)
    }

    @Test(
        "a claim joins its target's session; past the slots it waits until its deadline, then gives up, and so do those who joined it"
    )
    func claims() throws {
        let sessions = OutgoingSessions(limit: 1)
        let outcome = SyncService.Outcome(
            name: "a", url: "unix:///a", report: SyncReport(), error: nil, milliseconds: 1)
        guard case .owner(let first) = sessions.claim("a", until: .now + .seconds(1)) else {
            Issue.record("the first claim runs the session")
            return
        }
        guard case .joined(let joined) = sessions.claim("a", until: .now + .seconds(1)) else {
            Issue.record("a second claim of the target joins it")
            return
        }
        #expect(sessions.claim("a", until: nil).isBusy, "the background schedule does not join")
        #expect(sessions.claim("b", until: nil).isBusy, "no slot is free")
        // Another target waits for the one slot: it gives up at its deadline, with a claim
        // that joined it meanwhile.
        let gaveUp = Atomic<Bool>(false)
        let waiter = Thread {
            let started = ContinuousClock.now
            if case .timedOut = sessions.claim("b", until: .now + .milliseconds(300)) {
                gaveUp.store(ContinuousClock.now - started >= .milliseconds(300), ordering: .relaxed)
            }
        }
        waiter.start()
        Thread.sleep(forTimeInterval: 0.1)
        guard case .joined(let joinedWaiting) = sessions.claim("b", until: .now + .seconds(5)) else {
            Issue.record("a claim of a waiting target joins it")
            return
        }
        #expect(sessions.outcome(of: joinedWaiting) == nil, "it never got a slot")
        Thread.sleep(forTimeInterval: 0.1)
        let waitedItsDeadline = gaveUp.load(ordering: .relaxed)
        #expect(waitedItsDeadline)
        #expect(!sessions.isActive("b"))
        sessions.finish("a", first, with: outcome)
        #expect(sessions.outcome(of: joined)?.milliseconds == 1)
        #expect(sessions.waitUntilIdle(timeout: 1))
    }

    @Test(
        "eight syncs with spellings of one silent socket: one session, at most half the request threads held, another client's status within 1 s"
    )
    func spellingsOfOneSilentSocket() throws {
        let root = try temporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let silent = try SilentPeer(path: root + "/peer/s.sock")
        defer { silent.stop() }
        let timeout = 4
        let daemon = try DaemonProcess(arguments: ["--sync-timeout-s", "\(timeout)", "--request-threads", "8"])
        defer { daemon.removeFiles() }
        let spellings = [
            "\(root)/peer/s.sock", "\(root)/peer/./s.sock", "/\(root)/peer/s.sock", "\(root)//peer/s.sock",
            "\(root)/peer/../peer/s.sock", "\(root)/./peer/./s.sock", "\(root)/peer/.//s.sock", "//\(root)/peer/s.sock",
        ]
        let answers = Mutex<[(reason: String?, seconds: Double)]>([])
        let group = DispatchGroup()
        let started = Date()
        for spelling in spellings {
            group.enter()
            // A thread each: the dispatch pool would run two at a time on two cores.
            Thread {
                defer { group.leave() }
                do {
                    let response = try daemon.client().request("sync", #"{"peer":"unix://\#(spelling)"}"#)
                    let reason: String?
                    if let error = response["error"] as? [String: Any] {
                        reason = (error["data"] as? [String: Any])?["reason"] as? String
                    } else {
                        let outcome = ((response["result"] as? [String: Any])?["peers"] as? [[String: Any]])?.first
                        reason = (outcome?["error"] as? [String: Any])?["reason"] as? String ?? "ok"
                    }
                    answers.withLock { $0.append((reason, Date().timeIntervalSince(started))) }
                } catch {
                    answers.withLock { $0.append(("\(error)", Date().timeIntervalSince(started))) }
                }
            }.start()
        }
        // While they hang, another client is answered at once, again and again.
        Thread.sleep(forTimeInterval: 0.5)
        for _ in 0..<3 {
            let asked = Date()
            _ = try daemon.client().call("status")
            #expect(Date().timeIntervalSince(asked) < 1, "status waited \(Date().timeIntervalSince(asked)) s")
            Thread.sleep(forTimeInterval: 0.5)
        }
        #expect(group.wait(timeout: .now() + .seconds(timeout * 3)) == .success)
        let all = answers.withLock { $0 }
        #expect(all.count == 8)
        #expect(silent.sessions == 1, "one session for the one socket, not \(silent.sessions)")
        // Half the request threads wait for the session (its owner and those who joined it);
        // the rest are told at once to retry.
        let refused = all.filter { $0.reason == "unavailable" }
        let waited = all.filter { $0.reason == "timeout" }
        #expect(refused.count == 4 && waited.count == 4, "\(all)")
        #expect(refused.allSatisfy { $0.seconds < 2 }, "\(all)")
        #expect(waited.allSatisfy { $0.seconds < Double(timeout) + 4 }, "\(waited)")
        _ = try daemon.client().call("status")
    }

    @Test("a config file with more peers than max_peers does not load; a reload that would is refused")
    func configCap() throws {
        let root = try temporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let peers = (0..<3).map { #"{"name":"p\#($0)","url":"unix:///nowhere/p\#($0).sock"}"# }.joined(separator: ",")
        let config = root + "/evstored.json"
        try #"{"max_peers":2,"peers":[\#(peers)]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config], waitForSocket: false)
        defer { daemon.removeFiles() }
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("3 peers") && daemon.stderr.contains("max_peers allows 2"), "\(daemon.stderr)")
        try #"{"max_peers":3,"peers":[\#(peers)]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let raised = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { raised.removeFiles() }
        #expect((try raised.client().call("peers.list")["peers"] as? [[String: Any]])?.count == 3)
        // A reload that lowers the limit below the file's peers changes nothing.
        try #"{"max_peers":2,"peers":[\#(peers)]}"#.write(toFile: config, atomically: true, encoding: .utf8)
        raised.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !raised.stderr.contains("was not reloaded"), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        #expect(
            raised.stderr.contains("was not reloaded") && raised.stderr.contains("max_peers allows 2"),
            "\(raised.stderr)")
        #expect((try raised.client().call("peers.list")["peers"] as? [[String: Any]])?.count == 3)
    }

    @Test("300 peers: peers.add past max_peers is too_many_peers; sync with all of them keeps the threads bounded")
    func threeHundredPeers() throws {
        let root = try temporaryRoot()
        defer { try? FileManager.default.removeItem(atPath: root) }
        // Eight of them hang, so the sync of all lasts a while; the rest are not there.
        let silent = try (0..<8).map { try SilentPeer(path: root + "/peer/s\($0).sock") }
        defer { for peer in silent { peer.stop() } }
        let daemon = try DaemonProcess(arguments: [
            "--max-peers", "300", "--sync-timeout-s", "1", "--sync-interval-s", "3600", "--backoff-base-s", "3600",
            "--backoff-cap-s", "3600",
        ])
        defer { daemon.removeFiles() }
        let pid = daemon.process.processIdentifier
        let client = try daemon.client()
        for index in 0..<300 {
            let url = index < 8 ? "unix://\(root)/peer/s\(index).sock" : "unix://\(root)/nowhere/p\(index).sock"
            _ = try client.call("peers.add", #"{"name":"p\#(index)","url":"\#(url)"}"#)
        }
        let refused = try client.failure("peers.add", #"{"name":"p300","url":"unix:///nowhere/p300.sock"}"#)
        #expect(refused.reason == "too_many_peers", "\(refused)")
        #expect(refused.message.contains("max_peers") && refused.message.contains("300"), "\(refused.message)")
        #expect((try client.call("peers.list")["peers"] as? [[String: Any]])?.count == 300)
        // Counted once the daemon has served requests: its socket accepts before every one of
        // its threads has started (slow under a sanitizer).
        let idle = threads(of: pid)

        // Sync with all of them, while the threads are counted.
        let peak = Atomic<Int>(0)
        let counting = Atomic<Bool>(true)
        let counted = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            while counting.load(ordering: .relaxed) {
                peak.store(max(peak.load(ordering: .relaxed), threads(of: pid)), ordering: .relaxed)
                Thread.sleep(forTimeInterval: 0.01)
            }
            counted.signal()
        }
        let started = Date()
        let result = try client.call("sync")
        let seconds = Date().timeIntervalSince(started)
        counting.store(false, ordering: .relaxed)
        counted.wait()
        let outcomes = result["peers"] as? [[String: Any]] ?? []
        #expect(outcomes.count == 300)
        #expect(outcomes.allSatisfy { !($0["error"] is NSNull) }, "no peer is there to sync with")
        #expect(seconds >= 1, "the silent peers held their sessions \(seconds) s")
        // At most four sessions of "sync all" and four of the background at once, each on a
        // thread, over what the idle daemon runs; a thread per peer would be 300.
        #expect(peak.load(ordering: .relaxed) <= idle + 12, "\(peak.load(ordering: .relaxed)) threads, \(idle) idle")
        #expect(silent.allSatisfy { $0.sessions >= 1 })
        _ = try client.call("status")
    }
}

extension OutgoingSessions.Claim {
    var isBusy: Bool {
        if case .busy = self { return true }
        return false
    }
}
