import Projections

/// The ULID clock: a hybrid logical clock over wall-clock milliseconds.
///
/// A new id is greater than every id this clock has issued or observed, so ids never go
/// backwards when the wall clock does; within one millisecond the 80 low bits are
/// incremented. Ids observed from elsewhere move the clock forward only when they are at
/// most `maxSkew` ahead of the local wall clock: a peer days ahead cannot drag this node's
/// ids into its future. Which event supersedes which is never decided by these ids.
public struct HybridClock: Sendable {
    /// Set again before each write from the store's current setting (a reload may change it).
    public var maxSkewMilliseconds: UInt64
    /// The greatest id issued or observed; the next id exceeds it.
    public private(set) var last: ULID

    public init(maxSkewMilliseconds: UInt64, last: ULID = .zero) {
        self.maxSkewMilliseconds = maxSkewMilliseconds
        self.last = last
    }

    /// How far ahead of `now` the id is, in milliseconds (0 when it is not ahead).
    public static func lead(of id: ULID, now: UInt64) -> UInt64 {
        id.timestamp > now ? id.timestamp - now : 0
    }

    /// Whether the id is further ahead of `now` than the allowed skew.
    public func isBeyondSkew(_ id: ULID, now: UInt64) -> Bool {
        HybridClock.isBeyondSkew(id, now: now, skew: maxSkewMilliseconds)
    }

    public static func isBeyondSkew(_ id: ULID, now: UInt64, skew: UInt64) -> Bool {
        lead(of: id, now: now) > skew
    }

    /// Observes an id made elsewhere (or read back from the store).
    /// - Returns: how far ahead of `now` the id is, in milliseconds, when that is more than
    ///   the allowed skew and the id was therefore not observed; otherwise nil.
    @discardableResult
    public mutating func observe(_ id: ULID, now: UInt64) -> UInt64? {
        let ahead = HybridClock.lead(of: id, now: now)
        if ahead > maxSkewMilliseconds { return ahead }
        if last < id { last = id }
        return nil
    }

    /// Moves the clock to `id` whatever its lead: for an id this clock made that turned out
    /// to be taken already (an event of another origin holds it), so the next one exceeds it.
    public mutating func skip(past id: ULID) {
        if last < id { last = id }
    }

    /// Issues the next id: the current millisecond with fresh random bits when the wall
    /// clock is ahead of every id seen, otherwise the successor of the last id.
    /// - Throws: `ids_exhausted` when the last id is the greatest ULID: no id is greater,
    ///   and the clock never goes back.
    public mutating func next(now: UInt64, using generator: inout some RandomNumberGenerator) throws(EventStoreError)
        -> ULID
    {
        try next(now: now) { (UInt16.random(in: 0...UInt16.max, using: &generator), generator.next()) }
    }

    /// The same with the system's random numbers.
    public mutating func next(now: UInt64) throws(EventStoreError) -> ULID {
        // Not through `inout SystemRandomNumberGenerator`: the generator has no storage,
        // and sanitizers see every inout access to it at one shared address.
        try next(now: now) { (UInt16.random(in: 0...UInt16.max), UInt64.random(in: 0...UInt64.max)) }
    }

    mutating func next(now: UInt64, random: () -> (UInt16, UInt64)) throws(EventStoreError) -> ULID {
        // A wall clock past the end of ULID time reads as its last millisecond.
        let now = min(now, ULID.maxTimestamp)
        let id: ULID
        if now > last.timestamp {
            // Keep the top random bit clear so increments within this millisecond cannot
            // run out of room in practice.
            let (high, low) = random()
            id = ULID(timestamp: now, random: (high & 0x7FFF, low))
        } else if let successor = last.incremented() {
            id = successor
        } else if last.timestamp < ULID.maxTimestamp {
            id = ULID.lowerBound(timestamp: last.timestamp + 1)
        } else {
            throw EventStoreError(
                .idsExhausted,
                "no event id is left: this node's clock reads \(last), the greatest ULID (the last millisecond of the year 10889), and ids never go back. New events cannot be made in this store; check the system clock (`date -u`)"
            )
        }
        last = id
        return id
    }
}
