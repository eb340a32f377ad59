/// Little helpers for the compact binary encodings (projection state, index values):
/// LEB128 varints and length-prefixed byte strings.
extension Array where Element == UInt8 {
    public mutating func appendVarint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        append(UInt8(rest))
    }

    public mutating func appendVarint(_ value: Int) {
        appendVarint(UInt64(value))
    }

    public mutating func appendLengthPrefixed(_ bytes: some Collection<UInt8>) {
        appendVarint(bytes.count)
        append(contentsOf: bytes)
    }

    public mutating func appendLengthPrefixed(_ string: String) {
        appendLengthPrefixed(string.utf8)
    }

    /// 16 bytes, big-endian two's complement.
    public mutating func appendInt128(_ value: Int128) {
        let bits = UInt128(bitPattern: value)
        for shift in stride(from: 120, through: 0, by: -8) { append(UInt8(truncatingIfNeeded: bits >> UInt128(shift))) }
    }
}

/// Corrupt or truncated binary data: decoding never trusts a declared length.
public struct CorruptDataError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// Reads what the `Array<UInt8>` helpers wrote, checking every length against what is left.
public struct ByteReader {
    let bytes: [UInt8]
    public private(set) var position: Int

    public init(_ bytes: [UInt8], at position: Int = 0) {
        self.bytes = bytes
        self.position = position
    }

    public var isAtEnd: Bool { position == bytes.count }
    public var remaining: Int { bytes.count - position }

    public mutating func byte() throws(CorruptDataError) -> UInt8 {
        guard position < bytes.count else { throw CorruptDataError("truncated data") }
        defer { position += 1 }
        return bytes[position]
    }

    public mutating func varint() throws(CorruptDataError) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try self.byte()
            guard shift < 64 else { throw CorruptDataError("varint too long") }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
    }

    /// A varint that must fit an `Int` (a counter): a corrupt one is an error, not a trap.
    public mutating func integer() throws(CorruptDataError) -> Int {
        guard let value = Int(exactly: try varint()) else { throw CorruptDataError("counter out of range") }
        return value
    }

    /// A count or length, bounded by what is left to read so a corrupt count cannot make
    /// the caller reserve gigabytes.
    public mutating func count(minimumElementSize: Int = 1) throws(CorruptDataError) -> Int {
        let value = try varint()
        guard value <= UInt64(remaining / Swift.max(1, minimumElementSize)) else {
            throw CorruptDataError("declared count \(value) exceeds the data")
        }
        return Int(value)
    }

    public mutating func bytes(_ count: Int) throws(CorruptDataError) -> [UInt8] {
        guard count >= 0, count <= remaining else { throw CorruptDataError("truncated data") }
        defer { position += count }
        return Array(bytes[position..<(position + count)])
    }

    public mutating func lengthPrefixed() throws(CorruptDataError) -> [UInt8] {
        try bytes(try count())
    }

    public mutating func string() throws(CorruptDataError) -> String {
        let count = try count()
        guard count <= remaining else { throw CorruptDataError("truncated data") }
        defer { position += count }
        guard let text = validatedUTF8(bytes[position..<(position + count)]) else {
            throw CorruptDataError("invalid UTF-8")
        }
        return text
    }

    public mutating func ulid() throws(CorruptDataError) -> ULID {
        guard let id = ULID(bytes: bytes, at: position) else { throw CorruptDataError("truncated id") }
        position += 16
        return id
    }

    /// A varint index into `table`, checked against its bounds.
    public mutating func reference<T>(into table: [T]) throws(CorruptDataError) -> T {
        let index = try varint()
        guard index < UInt64(table.count) else { throw CorruptDataError("index \(index) out of range") }
        return table[Int(index)]
    }

    /// What `appendInt128` wrote.
    public mutating func int128() throws(CorruptDataError) -> Int128 {
        guard remaining >= 16 else { throw CorruptDataError("truncated counter") }
        var bits: UInt128 = 0
        for index in position..<(position + 16) { bits = bits << 8 | UInt128(bytes[index]) }
        position += 16
        return Int128(bitPattern: bits)
    }

    public mutating func ulids() throws(CorruptDataError) -> [ULID] {
        let n = try count(minimumElementSize: 16)
        var out: [ULID] = []
        out.reserveCapacity(n)
        for _ in 0..<n { out.append(try ulid()) }
        return out
    }
}

extension Array where Element == UInt8 {
    public mutating func appendULIDs(_ ids: [ULID]) {
        appendVarint(ids.count)
        for id in ids { id.append(to: &self) }
    }
}

/// The text of UTF-8 bytes, nil when they are not valid UTF-8.
///
/// ASCII, which most stored strings are, is checked with a plain loop and decoded
/// directly; the standard library's validating initializer is generic, and not
/// specialized here, so it costs hundreds of instructions in metadata lookups per call.
public func validatedUTF8(_ bytes: ArraySlice<UInt8>) -> String? {
    var ascii = true
    for byte in bytes where byte >= 0x80 {
        ascii = false
        break
    }
    return ascii ? String(decoding: bytes, as: UTF8.self) : String(validating: bytes, as: UTF8.self)
}
