import Backoff
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// When a peer is synced next, and how its syncs have gone: a pure value, so its timings
/// are tested with an injected clock and jitter.
///
/// After a success the next sync is `sync_interval_s` later. After the n-th consecutive
/// failure it is `backoff_base_s × 2^(n-1)` times a jitter factor from 0.5 to 1.5 (±50 %,
/// so devices that failed together do not retry together), and never more than
/// `backoff_cap_s`: the cap bounds the wait itself, not the wait before jitter. From
/// the 8th consecutive failure on the peer shows as `failing`; a failure retrying cannot
/// fix (a protocol mismatch, ssh refusing the key) shows as `terminal`. Retries go on in
/// both cases, at the backoff's pace.
package struct PeerSchedule: Equatable, Sendable {
    package enum State: String, Sendable {
        case ok, retrying, failing, terminal
    }

    package static let failingAfter = 8

    /// Milliseconds since the epoch.
    package var nextAttempt: UInt64
    package var lastSuccess: UInt64?
    package var lastAttempt: UInt64?
    package var failures = 0
    package var lastError: SyncError?
    /// The failures the backoff counts: those since the last success or since the network
    /// last came back, whichever is later.
    package var backoffFailures = 0
    /// When the current run of failures began (the first of them); nil while `ok`.
    package var failingSince: UInt64?
    /// The network changes that cut the wait since the last success, and when the last one
    /// did: a link that flaps must not keep the peer retrying without pause.
    package var networkCuts = 0
    package var lastNetworkCut: UInt64?

    package init(nextAttempt: UInt64) {
        self.nextAttempt = nextAttempt
    }

    package var state: State {
        if failures == 0 { return .ok }
        if lastError?.isTerminal == true { return .terminal }
        return failures >= PeerSchedule.failingAfter ? .failing : .retrying
    }

    /// Whether it counts under "needs attention".
    package var needsAttention: Bool { state == .failing || state == .terminal }

    package mutating func succeeded(at now: UInt64, interval: Double) {
        failures = 0
        backoffFailures = 0
        lastError = nil
        failingSince = nil
        networkCuts = 0
        lastNetworkCut = nil
        lastSuccess = now
        lastAttempt = now
        nextAttempt = now + UInt64(max(0, interval) * 1000)
    }

    /// `jitter` is uniform in 0..<1.
    package mutating func failed(_ error: SyncError, at now: UInt64, base: Double, cap: Double, jitter: Double) {
        failures += 1
        if failures == 1 { failingSince = now }
        lastError = error
        lastAttempt = now
        backoffFailures += 1
        let delay = PeerSchedule.backoff(failures: backoffFailures, base: base, cap: cap, jitter: jitter)
        nextAttempt = now + UInt64(delay * 1000)
    }

    /// Seconds to wait after the `failures`-th consecutive failure (`Backoff`).
    package static func backoff(failures: Int, base: Double, cap: Double, jitter: Double) -> Double {
        Backoff(base: base, cap: cap).delay(afterFailures: failures, jitter: jitter)
    }

    /// The network may have come back: the next attempt is now, and the backoff starts
    /// over from `backoff_base_s` should it fail again. The failures so far still count
    /// toward `failing`, and the last error stays until a session succeeds.
    ///
    /// The cuts themselves back off, so a flapping link (an address that comes and goes
    /// every second) cannot keep a failing peer retrying without pause: the first change
    /// after a success cuts the wait at once; each later one only once `backoff_base_s ×
    /// 2^(k-1)` (at most `backoff_cap_s`) have passed since the k-th cut, and it starts the
    /// backoff over from that k-th step rather than from the base. So a peer's wait is cut
    /// at most once per `backoff_base_s`, and a minute of flapping costs it a handful of
    /// attempts more than a quiet minute does. Whether the wait was cut.
    @discardableResult
    package mutating func networkReturned(at now: UInt64, base: Double, cap: Double) -> Bool {
        guard failures > 0 else { return false }
        if let last = lastNetworkCut {
            let spacing = PeerSchedule.backoff(failures: networkCuts, base: base, cap: cap, jitter: 0.5)
            guard now < last || Double(now - last) >= spacing * 1000 else { return false }
        }
        nextAttempt = min(nextAttempt, now)
        backoffFailures = min(backoffFailures, networkCuts)
        networkCuts += 1
        lastNetworkCut = now
        return true
    }
}
