@testable import Daemon
import Foundation
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// A link that flaps (an address added and removed every 1.2 s) must not keep failing peers
/// retrying without pause: a network change cuts a peer's wait at most once per
/// `backoff_base_s`, and the cuts back off as the retries do.
@Suite("A flapping link")
struct FlappingLinkTests {
    /// Ten peers that fail at every attempt, for `seconds` of a fake clock in steps of 100 ms,
    /// with a network change every `changeEvery` seconds (nil: none); the attempts made, and
    /// per peer the times (ms) at which a change cut its wait.
    func simulate(seconds: Int, changeEvery: Double?, base: Double = 2, cap: Double = 600) -> (
        attempts: Int, cuts: [[UInt64]]
    ) {
        let start: UInt64 = 1_000_000
        var schedules = (0..<10).map { _ in PeerSchedule(nextAttempt: start) }
        var cuts = Array(repeating: [UInt64](), count: schedules.count)
        var attempts = 0
        var nextChange = changeEvery.map { start + UInt64($0 * 1000) }
        let failure = SyncError(.unreachable, "no daemon answers")
        var now = start
        while now < start + UInt64(seconds) * 1000 {
            if let change = nextChange, now >= change {
                for index in schedules.indices where schedules[index].networkReturned(at: now, base: base, cap: cap) {
                    cuts[index].append(now)
                }
                nextChange = change + UInt64(changeEvery! * 1000)
            }
            for index in schedules.indices where schedules[index].nextAttempt <= now {
                attempts += 1
                schedules[index].failed(failure, at: now, base: base, cap: cap, jitter: 0.5)
            }
            now += 100
        }
        return (attempts, cuts)
    }

    @Test("a minute of changes every 1.2 s costs ten failing peers a few attempts more than a quiet minute")
    func flappingIsBounded() {
        let quiet = simulate(seconds: 60, changeEvery: nil)
        let flapping = simulate(seconds: 60, changeEvery: 1.2)
        // Quiet: at 0, 2, 6, 14 and 30 s, five attempts each. Cut at every change, as before,
        // they were about fifty each (490 in the attack against a real daemon); now ten.
        #expect(quiet.attempts == 50)
        #expect(flapping.attempts <= 2 * quiet.attempts, "\(flapping.attempts) attempts against \(quiet.attempts)")
        for cuts in flapping.cuts {
            #expect(!cuts.isEmpty, "a change cuts a failing peer's wait")
            #expect(cuts.count <= 6, "\(cuts)")
            // Never twice within backoff_base_s, and further apart each time.
            let gaps = zip(cuts.dropFirst(), cuts).map { $0 - $1 }
            #expect(gaps.allSatisfy { $0 >= 2000 }, "\(gaps)")
            #expect(gaps == gaps.sorted(), "\(gaps)")
        }
    }

    @Test("the network coming back after a quiet spell still cuts the wait at once, and a success starts the cuts over")
    func quietSpellThenChange() {
        var schedule = PeerSchedule(nextAttempt: 0)
        let failure = SyncError(.unreachable, "no daemon answers")
        var now: UInt64 = 1_000_000
        for _ in 0..<12 {
            schedule.failed(failure, at: now, base: 2, cap: 600, jitter: 0.5)
            now = schedule.nextAttempt
        }
        schedule.failed(failure, at: now, base: 2, cap: 600, jitter: 0.5)
        #expect(schedule.nextAttempt == now + 600_000, "an hour offline: the wait is at the cap")
        // The first change cuts it, and the backoff starts from the base.
        let cutAtOnce = schedule.networkReturned(at: now + 1000, base: 2, cap: 600)
        #expect(cutAtOnce)
        #expect(schedule.nextAttempt == now + 1000)
        schedule.failed(failure, at: now + 1000, base: 2, cap: 600, jitter: 0.5)
        #expect(schedule.nextAttempt == now + 3000)
        // A change a second later does not; one 2 s after the cut does, the backoff then
        // from its second step; the next needs 4 s.
        let cutTooSoon = schedule.networkReturned(at: now + 2000, base: 2, cap: 600)
        #expect(!cutTooSoon)
        let cutSecond = schedule.networkReturned(at: now + 3000, base: 2, cap: 600)
        #expect(cutSecond)
        schedule.failed(failure, at: now + 3000, base: 2, cap: 600, jitter: 0.5)
        #expect(schedule.nextAttempt == now + 7000)
        let cutTooSoonAgain = schedule.networkReturned(at: now + 6500, base: 2, cap: 600)
        #expect(!cutTooSoonAgain)
        let cutThird = schedule.networkReturned(at: now + 7000, base: 2, cap: 600)
        #expect(cutThird)
        #expect(schedule.state == .failing, "the failures still count")
        // A success: the next change after new failures cuts at once again.
        schedule.succeeded(at: now + 8000, interval: 30)
        let cutWhileOK = schedule.networkReturned(at: now + 8100, base: 2, cap: 600)
        #expect(!cutWhileOK, "an ok peer has no wait to cut")
        schedule.failed(failure, at: now + 9000, base: 2, cap: 600, jitter: 0.5)
        let cutAfterSuccess = schedule.networkReturned(at: now + 9100, base: 2, cap: 600)
        #expect(cutAfterSuccess)
    }

    /// The lines of the daemon's log that report a network change, and the peers each cut.
    func resets(_ log: String) -> [Int] {
        log.split(separator: "\n").compactMap { line -> Int? in
            guard let range = line.range(of: "the network changed: syncing ") else { return nil }
            return Int(line[range.upperBound...].prefix { $0.isNumber })
        }
    }

    func failedSessions(_ log: String) -> Int {
        log.split(separator: "\n").filter { $0.contains("sync with p") && $0.contains(" failed after ") }.count
    }

    @Test(
        "an address added and removed every 1.2 s for 12 s: ten failing peers' waits are cut at most four times each",
        .enabled(if: NetworkNamespace.usable, NetworkNamespace.unusableReason), .timeLimit(.minutes(30)))
    func flappingAddress() throws {
        let namespace = try NetworkNamespace()
        defer { namespace.delete() }
        try namespace.run(["link", "add", "v0", "type", "veth", "peer", "name", "v1"])
        try namespace.run(["link", "set", "v1", "up"])
        try namespace.run(["link", "set", "v0", "up"])
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evflap-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let peers = (0..<10).map { #"{"name":"p\#($0)","url":"unix://\#(root)/nowhere/p\#($0).sock"}"# }
        try
            #"{"peers":[\#(peers.joined(separator: ","))],"sync_interval_s":3600,"backoff_base_s":2,"backoff_cap_s":600}"#
            .write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        let node = try DaemonProcess(
            root: root, arguments: ["--config", root + "/evstored.json"], launcher: namespace.launcher)
        defer { node.removeFiles() }
        // Every peer has failed once before the link starts flapping.
        let deadline = Date().addingTimeInterval(20)
        func failing() throws -> Int {
            (try node.client().call("status")["peers"] as? [[String: Any]] ?? []).filter {
                ($0["failures"] as? Int ?? 0) > 0
            }.count
        }
        while Date() < deadline, try failing() < 10 { Thread.sleep(forTimeInterval: 0.05) }
        #expect(try failing() == 10)
        #expect(!node.stderr.contains("cannot watch the network"), "\(node.stderr)")
        let before = failedSessions(node.stderr)

        let flapping = Date()
        while Date().timeIntervalSince(flapping) < 12 {
            try namespace.run(["addr", "add", "10.9.9.1/24", "dev", "v0"])
            Thread.sleep(forTimeInterval: 0.1)
            try namespace.run(["addr", "del", "10.9.9.1/24", "dev", "v0"])
            Thread.sleep(forTimeInterval: 1.1)
        }
        Thread.sleep(forTimeInterval: 1.5)
        let log = node.stderr
        let cuts = resets(log).reduce(0, +)
        let sessions = failedSessions(log) - before
        print(
            "12 s of flapping: \(resets(log).count) network changes acted on, \(cuts) waits cut, \(sessions) sessions")
        // A change every 1.2 s cut every wait before: about ten times each, 100 in all. Now
        // at once, then 2, 4 and 8 s after the cut before: four at most in 12 s.
        #expect(cuts >= 10, "the first change cuts every failing peer's wait: \(log)")
        #expect(cuts <= 40, "\(cuts) waits cut")
        #expect(sessions <= 100, "\(sessions) sessions in 12 s for ten peers")
        _ = try node.client().call("status")
    }
}
