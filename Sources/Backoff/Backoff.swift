/// Exponential backoff with jitter, the one both the daemon's peer schedule and the NATS
/// bridge's sessions wait by: after the n-th failure in a row, `base × 2^(n-1)` seconds,
/// never more than `cap`, times a factor from 0.5 to 1.5 (so peers that failed together do
/// not retry together), and never more than `cap` after it either.
public struct Backoff: Sendable, Equatable {
    /// Seconds after the first failure, before the jitter.
    public var base: Double
    /// The longest wait, seconds.
    public var cap: Double

    public init(base: Double, cap: Double) {
        self.base = base
        self.cap = cap
    }

    /// Seconds to wait after the `failures`-th failure in a row; `jitter` from 0 to 1 picks
    /// the factor (0: 0.5, 1: 1.5).
    public func delay(afterFailures failures: Int, jitter: Double) -> Double {
        let doubling = Double(sign: .plus, exponent: min(max(failures - 1, 0), 62), significand: 1)
        let nominal = min(cap, base * doubling)
        return min(cap, nominal * (0.5 + min(max(jitter, 0), 1)))
    }

    /// As `delay(afterFailures:jitter:)` with a random jitter.
    public func delay(afterFailures failures: Int) -> Double {
        delay(afterFailures: failures, jitter: Double.random(in: 0...1))
    }
}
