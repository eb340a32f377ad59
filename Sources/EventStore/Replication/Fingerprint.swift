import Projections

/// A summary of a set of event ids that two nodes compare instead of the ids themselves:
/// the count and the sum, modulo 2^128, of a 128-bit mix of each id.
///
/// A sum is order-free and splits over ranges (the fingerprint of a union of disjoint
/// ranges is the sum of theirs), which is what range-based set reconciliation needs.
/// Mixing first spreads every id over all 128 bits, so sets that differ collide only by
/// chance (about 2^-128), not because ULIDs share their time prefix.
public struct Fingerprint: Hashable, Sendable, CustomStringConvertible {
    public private(set) var count: Int
    public private(set) var high: UInt64
    public private(set) var low: UInt64

    public init() {
        count = 0
        high = 0
        low = 0
    }

    public init(count: Int, high: UInt64, low: UInt64) {
        self.count = count
        self.high = high
        self.low = low
    }

    public mutating func add(_ id: ULID) {
        let (x, y) = Fingerprint.mix(id.high, id.low)
        self = adding(Fingerprint(count: 1, high: x, low: y))
    }

    /// The fingerprint of the union of two disjoint sets.
    public func adding(_ other: Fingerprint) -> Fingerprint {
        let (sum, carry) = low.addingReportingOverflow(other.low)
        return Fingerprint(count: count + other.count, high: high &+ other.high &+ (carry ? 1 : 0), low: sum)
    }

    /// The fingerprint of this set without `other`, a subset of it.
    public func subtracting(_ other: Fingerprint) -> Fingerprint {
        let (difference, borrow) = low.subtractingReportingOverflow(other.low)
        return Fingerprint(
            count: count - other.count, high: high &- other.high &- (borrow ? 1 : 0), low: difference)
    }

    /// The two 64-bit halves of an id's mix: x = splitmix64(a ^ splitmix64(b)),
    /// y = splitmix64(b ^ x), with a and b the id's big-endian halves.
    static func mix(_ a: UInt64, _ b: UInt64) -> (UInt64, UInt64) {
        let x = splitmix64(a ^ splitmix64(b))
        return (x, splitmix64(b ^ x))
    }

    /// The finalizer of SplitMix64 (Steele, Lea, Flood 2014).
    static func splitmix64(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// The sum as 32 lowercase hex digits (high half first).
    public var hash: String {
        func hex(_ value: UInt64) -> String {
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        return hex(high) + hex(low)
    }

    /// Parses `count` and the 32 hex digits of `hash`.
    public init?(count: Int, hash: String) {
        guard count >= 0, hash.utf8.count == 32, let high = UInt64(hash.prefix(16), radix: 16),
            let low = UInt64(hash.suffix(16), radix: 16)
        else { return nil }
        self.init(count: count, high: high, low: low)
    }

    public var description: String { "\(count)/\(hash)" }
}

extension Fingerprint {
    /// The fingerprint of `ids`.
    public init(_ ids: some Sequence<ULID>) {
        self.init()
        for id in ids { add(id) }
    }
}

/// All of one origin's ids as a snapshot held them: how many, the greatest, their
/// fingerprint.
struct OriginSummary: Sendable {
    var count: Int
    var last: ULID
    var fingerprint: Fingerprint
}
