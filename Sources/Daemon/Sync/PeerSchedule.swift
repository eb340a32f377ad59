import Foundation

/// When a peer is synced next, and how its syncs have gone: a pure value, so its timings
/// are tested with an injected clock and jitter.
///
/// After a success the next sync is `sync_interval_s` later. After the n-th consecutive
/// failure it is `min(backoff_cap_s, backoff_base_s × 2^(n-1))`, times a jitter factor
/// from 0.5 to 1.5 (±50 %, so devices that failed together do not retry together). From
/// the 8th consecutive failure on the peer shows as `failing`; a failure retrying cannot
/// fix (a protocol mismatch, ssh refusing the key) shows as `terminal`. Retries go on in
/// both cases, at the backoff's pace.
struct PeerSchedule: Equatable, Sendable {
    enum State: String, Sendable {
        case ok, retrying, failing, terminal
    }

    static let failingAfter = 8

    /// Milliseconds since the epoch.
    var nextAttempt: UInt64
    var lastSuccess: UInt64?
    var lastAttempt: UInt64?
    var failures = 0
    var lastError: SyncError?

    init(nextAttempt: UInt64) {
        self.nextAttempt = nextAttempt
    }

    var state: State {
        if failures == 0 { return .ok }
        if lastError?.isTerminal == true { return .terminal }
        return failures >= PeerSchedule.failingAfter ? .failing : .retrying
    }

    /// Whether it counts under "needs attention".
    var needsAttention: Bool { state == .failing || state == .terminal }

    mutating func succeeded(at now: UInt64, interval: Double) {
        failures = 0
        lastError = nil
        lastSuccess = now
        lastAttempt = now
        nextAttempt = now + UInt64(max(0, interval) * 1000)
    }

    /// `jitter` is uniform in 0..<1.
    mutating func failed(_ error: SyncError, at now: UInt64, base: Double, cap: Double, jitter: Double) {
        failures += 1
        lastError = error
        lastAttempt = now
        let delay = PeerSchedule.backoff(failures: failures, base: base, cap: cap, jitter: jitter)
        nextAttempt = now + UInt64(delay * 1000)
    }

    /// Seconds to wait after the `failures`-th consecutive failure.
    static func backoff(failures: Int, base: Double, cap: Double, jitter: Double) -> Double {
        let exponent = Double(min(max(failures - 1, 0), 62))
        let nominal = min(cap, base * pow(2, exponent))
        return nominal * (0.5 + min(max(jitter, 0), 1))
    }
}
