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
        next(now: now) { (UInt16.random(in: 0...UInt16.max, using: &generator), generator.next()) }
    }

    /// The same with the system's random numbers.
    public mutating func next(now: UInt64) -> ULID {
        // Not through `inout SystemRandomNumberGenerator`: the generator has no storage,
        // and sanitizers see every inout access to it at one shared address.
        next(now: now) { (UInt16.random(in: 0...UInt16.max), UInt64.random(in: 0...UInt64.max)) }
    }

    mutating func next(now: UInt64, random: () -> (UInt16, UInt64)) -> ULID {
        let id: ULID
        if now > last.timestamp, now <= ULID.maxTimestamp {
            // Keep the top random bit clear so increments within this millisecond cannot
            // run out of room in practice.
            let (high, low) = random()
            id = ULID(timestamp: now, random: (high & 0x7FFF, low))
        } else if let successor = last.incremented() {
            id = successor
        } else {
            id = ULID.lowerBound(timestamp: last.timestamp + 1)
        }
        last = id
        return id
    }
}
