/// XXH64 (Yann Collet's xxHash, 64-bit), for digests that must be equal across machines.
/// Not a cryptographic hash: the state digest detects divergence, it does not authenticate.
public enum XXH64 {
    static let prime1: UInt64 = 0x9E37_79B1_85EB_CA87
    static let prime2: UInt64 = 0xC2B2_AE3D_27D4_EB4F
    static let prime3: UInt64 = 0x1656_67B1_9E37_79F9
    static let prime4: UInt64 = 0x85EB_CA77_C2B2_AE63
    static let prime5: UInt64 = 0x27D4_EB2F_1656_67C5

    @inline(__always)
    static func round(_ acc: UInt64, _ input: UInt64) -> UInt64 {
        var acc = acc &+ input &* prime2
        acc = (acc << 31) | (acc >> 33)
        return acc &* prime1
    }

    @inline(__always)
    static func merge(_ acc: UInt64, _ value: UInt64) -> UInt64 {
        let acc = acc ^ round(0, value)
        return acc &* prime1 &+ prime4
    }

    /// Little-endian, spelled out: a loop over a reversed range costs a generic iterator per
    /// byte in a debug build, which made hashing a 16 MiB state take seconds.
    @inline(__always)
    static func read64(_ b: [UInt8], _ i: Int) -> UInt64 {
        read32(b, i) | read32(b, i + 4) << 32
    }

    @inline(__always)
    static func read32(_ b: [UInt8], _ i: Int) -> UInt64 {
        UInt64(b[i]) | UInt64(b[i + 1]) << 8 | UInt64(b[i + 2]) << 16 | UInt64(b[i + 3]) << 24
    }

    public static func hash(_ input: [UInt8], seed: UInt64 = 0) -> UInt64 {
        var lanes = Lanes(seed: seed)
        var i = 0
        while i + 32 <= input.count {
            lanes.consume(read64(input, i), read64(input, i + 8), read64(input, i + 16), read64(input, i + 24))
            i += 32
        }
        return finish(lanes, seed: seed, input, from: i)
    }

    /// The hashes of `input` under two seeds, equal to two calls of `hash(_:seed:)`: each
    /// 32-byte stripe is read once for both, which is most of a hash's work.
    public static func hash(_ input: [UInt8], seeds first: UInt64, _ second: UInt64) -> (UInt64, UInt64) {
        var a = Lanes(seed: first)
        var b = Lanes(seed: second)
        var i = 0
        while i + 32 <= input.count {
            let w1 = read64(input, i)
            let w2 = read64(input, i + 8)
            let w3 = read64(input, i + 16)
            let w4 = read64(input, i + 24)
            a.consume(w1, w2, w3, w4)
            b.consume(w1, w2, w3, w4)
            i += 32
        }
        return (finish(a, seed: first, input, from: i), finish(b, seed: second, input, from: i))
    }

    /// The four accumulators of the 32-byte stripes.
    struct Lanes {
        var v1: UInt64
        var v2: UInt64
        var v3: UInt64
        var v4: UInt64

        @inline(__always)
        init(seed: UInt64) {
            v1 = seed &+ prime1 &+ prime2
            v2 = seed &+ prime2
            v3 = seed
            v4 = seed &- prime1
        }

        @inline(__always)
        mutating func consume(_ w1: UInt64, _ w2: UInt64, _ w3: UInt64, _ w4: UInt64) {
            v1 = round(v1, w1)
            v2 = round(v2, w2)
            v3 = round(v3, w3)
            v4 = round(v4, w4)
        }
    }

    /// The hash from the stripes' accumulators (unused when `input` is shorter than one
    /// stripe), the bytes from `i` on, and the final avalanche.
    @inline(__always)
    static func finish(_ lanes: Lanes, seed: UInt64, _ input: [UInt8], from start: Int) -> UInt64 {
        let length = input.count
        var i = start
        var h: UInt64
        if length >= 32 {
            let (v1, v2, v3, v4) = (lanes.v1, lanes.v2, lanes.v3, lanes.v4)
            h =
                ((v1 << 1) | (v1 >> 63)) &+ ((v2 << 7) | (v2 >> 57)) &+ ((v3 << 12) | (v3 >> 52))
                &+ ((v4 << 18) | (v4 >> 46))
            h = merge(h, v1)
            h = merge(h, v2)
            h = merge(h, v3)
            h = merge(h, v4)
        } else {
            h = seed &+ prime5
        }
        h = h &+ UInt64(length)
        while i + 8 <= length {
            h ^= round(0, read64(input, i))
            h = ((h << 27) | (h >> 37)) &* prime1 &+ prime4
            i += 8
        }
        if i + 4 <= length {
            h ^= read32(input, i) &* prime1
            h = ((h << 23) | (h >> 41)) &* prime2 &+ prime3
            i += 4
        }
        while i < length {
            h ^= UInt64(input[i]) &* prime5
            h = ((h << 11) | (h >> 53)) &* prime1
            i += 1
        }
        h ^= h >> 33
        h = h &* prime2
        h ^= h >> 29
        h = h &* prime3
        h ^= h >> 32
        return h
    }
}

/// A 128-bit fingerprint of one entity's state.
public struct StateHash: Equatable, Sendable {
    public var high: UInt64
    public var low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The hash of bytes that determine a state: an entity's encoded state, or one status
    /// history entry.
    public init(hashing bytes: [UInt8]) {
        // The seeds spell "evstore1" and "evstore2".
        (high, low) = XXH64.hash(bytes, seeds: 0x6576_7374_6F72_6531, 0x6576_7374_6F72_6532)
    }
}

/// The store-wide state digest: the sum, lane by lane modulo 2^64, of every entity's
/// `StateHash`. A sum does not depend on order and updates in O(1) when one entity
/// changes (subtract its old hash, add the new one), so two stores holding the same
/// events — hence the same states — have the same digest however they got there.
public struct StateDigest: Equatable, Sendable, CustomStringConvertible {
    public private(set) var high: UInt64
    public private(set) var low: UInt64

    public init(high: UInt64 = 0, low: UInt64 = 0) {
        self.high = high
        self.low = low
    }

    public mutating func add(_ hash: StateHash) {
        high = high &+ hash.high
        low = low &+ hash.low
    }

    public mutating func remove(_ hash: StateHash) {
        high = high &- hash.high
        low = low &- hash.low
    }

    public var bytes: [UInt8] {
        var out: [UInt8] = []
        ULID(high: high, low: low).append(to: &out)
        return out
    }

    public init?(bytes: [UInt8]) {
        guard bytes.count == 16, let raw = ULID(bytes: bytes) else { return nil }
        self.init(high: raw.high, low: raw.low)
    }

    /// 32 lower-case hex digits.
    public var description: String {
        func hex(_ value: UInt64) -> String {
            let digits = String(value, radix: 16)
            return String(repeating: "0", count: 16 - digits.count) + digits
        }
        return hex(high) + hex(low)
    }
}
