import Projections

/// The ULID clock: a hybrid logical clock over wall-clock milliseconds.
///
/// A new id is greater than every id this clock has issued or observed, so ids never go
/// backwards when the wall clock does; within one millisecond the 80 low bits are
/// incremented. Ids observed from elsewhere move the clock forward only when they are at
/// most `maxSkew` ahead of the local wall clock: a peer days ahead cannot drag this node's
/// ids into its future. Which event supersedes which is never decided by these ids.
public struct HybridClock: Sendable {
    public let maxSkewMilliseconds: UInt64
    /// The greatest id issued or observed; the next id exceeds it.
    public private(set) var last: ULID

    public init(maxSkewMilliseconds: UInt64, last: ULID = .zero) {
        self.maxSkewMilliseconds = maxSkewMilliseconds
        self.last = last
    }

    /// Observes an id made elsewhere (or read back from the store).
    /// - Returns: how far ahead of `now` the id is, in milliseconds, when that is more than
    ///   the allowed skew and the id was therefore not observed; otherwise nil.
    @discardableResult
    public mutating func observe(_ id: ULID, now: UInt64) -> UInt64? {
        let ahead = id.timestamp > now ? id.timestamp - now : 0
        if ahead > maxSkewMilliseconds { return ahead }
        if last < id { last = id }
        return nil
    }

    /// Issues the next id: the current millisecond with fresh random bits when the wall
    /// clock is ahead of every id seen, otherwise the successor of the last id.
    public mutating func next(now: UInt64, using generator: inout some RandomNumberGenerator) -> ULID {
        let id: ULID
        if now > last.timestamp, now <= ULID.maxTimestamp {
            // Keep the top random bit clear so increments within this millisecond cannot
            // run out of room in practice.
            let high = UInt16.random(in: 0...UInt16.max, using: &generator) & 0x7FFF
            id = ULID(timestamp: now, random: (high, generator.next()))
        } else if let successor = last.incremented() {
            id = successor
        } else {
            id = ULID.lowerBound(timestamp: last.timestamp + 1)
        }
        last = id
        return id
    }

    public mutating func next(now: UInt64) -> ULID {
        var generator = SystemRandomNumberGenerator()
        return next(now: now, using: &generator)
    }
}
