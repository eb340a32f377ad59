import Foundation
import TestSupport
import Testing
import UnixSocket

@testable import Daemon

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
}
