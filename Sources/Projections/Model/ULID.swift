/// A ULID: 48 bits of Unix milliseconds, then 80 bits that order events within a
/// millisecond. Held as two big-endian halves, so comparing values compares time first;
/// its 16-byte binary form sorts the same way byte by byte (LMDB keys).
public struct ULID: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var high: UInt64
    public var low: UInt64

    public static let byteCount = 16
    public static let textLength = 26
    public static let maxTimestamp: UInt64 = (1 << 48) - 1
    public static let zero = ULID(high: 0, low: 0)
    public static let max = ULID(high: .max, low: .max)

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// The first id of a millisecond followed by `random`'s 80 low bits.
    public init(timestamp: UInt64, random: (high: UInt16, low: UInt64)) {
        precondition(timestamp <= ULID.maxTimestamp, "ULID timestamps are 48 bits")
        self.high = timestamp << 16 | UInt64(random.high)
        self.low = random.low
    }

    /// Milliseconds since the Unix epoch.
    public var timestamp: UInt64 { high >> 16 }

    /// The smallest id of the given millisecond.
    public static func lowerBound(timestamp: UInt64) -> ULID {
        ULID(high: Swift.min(timestamp, maxTimestamp) << 16, low: 0)
    }

    /// The next id in order, or nil when the 80 random bits are exhausted in this millisecond.
    public func incremented() -> ULID? {
        let (low, carry) = low.addingReportingOverflow(1)
        if !carry { return ULID(high: high, low: low) }
        guard high & 0xFFFF != 0xFFFF else { return nil }
        return ULID(high: high + 1, low: 0)
    }

    public static func < (lhs: ULID, rhs: ULID) -> Bool {
        lhs.high != rhs.high ? lhs.high < rhs.high : lhs.low < rhs.low
    }

    // MARK: Binary

    public var bytes: [UInt8] {
        var out = [UInt8](repeating: 0, count: 16)
        store(into: &out)
        return out
    }

    /// Writes the id's 16 bytes over the first 16 of `bytes`, which must have as many: a
    /// key reused from one event to the next, without an array made for each.
    public func store(into bytes: inout [UInt8]) {
        var span = bytes.mutableSpan
        var raw = span.mutableBytes
        raw.storeBytes(of: high.bigEndian, toByteOffset: 0, as: UInt64.self)
        raw.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
    }

    public func append(to out: inout [UInt8]) {
        // Two stores into room made once: this runs several times per appended event.
        out.append(addingCapacity: 16) { span in
            span.append(repeating: 0, count: 16)
            var written = span.mutableSpan
            var bytes = written.mutableBytes
            bytes.storeBytes(of: high.bigEndian, toByteOffset: 0, as: UInt64.self)
            bytes.storeBytes(of: low.bigEndian, toByteOffset: 8, as: UInt64.self)
        }
    }

    /// Reads 16 big-endian bytes starting at `offset`; nil when there are fewer.
    ///
    /// The concrete overloads matter: called from another module the generic one is not
    /// specialized, and reads each byte through a protocol witness and runtime metadata
    /// lookups, thousands of instructions per id where these take a few dozen.
    public init?(bytes: [UInt8], at offset: Int = 0) {
        guard offset >= 0, bytes.count >= offset + 16 else { return nil }
        self.init(high: ULID.bigEndian(bytes, offset), low: ULID.bigEndian(bytes, offset + 8))
    }

    public init?(bytes: ArraySlice<UInt8>, at offset: Int = 0) {
        guard offset >= 0, bytes.count >= offset + 16 else { return nil }
        let start = bytes.startIndex + offset
        self.init(high: ULID.bigEndian(bytes, start), low: ULID.bigEndian(bytes, start + 8))
    }

    private static func bigEndian<C: RandomAccessCollection<UInt8>>(_ bytes: C, _ start: C.Index) -> UInt64
    where C.Index == Int {
        var value: UInt64 = 0
        for index in start..<start + 8 { value = value << 8 | UInt64(bytes[index]) }
        return value
    }

    /// Reads 16 big-endian bytes starting at `offset`; nil when there are fewer.
    public init?(bytes: some RandomAccessCollection<UInt8>, at offset: Int = 0) {
        guard bytes.count >= offset + 16 else { return nil }
        var start = bytes.index(bytes.startIndex, offsetBy: offset)
        var high: UInt64 = 0
        var low: UInt64 = 0
        for _ in 0..<8 {
            high = high << 8 | UInt64(bytes[start])
            start = bytes.index(after: start)
        }
        for _ in 0..<8 {
            low = low << 8 | UInt64(bytes[start])
            start = bytes.index(after: start)
        }
        self.init(high: high, low: low)
    }

    // MARK: Text (Crockford base32)

    /// Symbol values for ASCII bytes, upper and lower case; 0xFF marks bytes outside the alphabet.
    static let decoding: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for value in 0..<32 {
            let symbol = symbols[value]
            table[Int(symbol)] = UInt8(value)
            if symbol >= UInt8(ascii: "A") { table[Int(symbol) + 32] = UInt8(value) }
        }
        return table
    }()

    /// The canonical 26-character upper-case form.
    public var description: String {
        var text: [UInt8] = []
        appendText(to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    public func appendText(to out: inout [UInt8]) {
        out.append(addingCapacity: ULID.textLength) { appendText(to: &$0) }
    }

    /// Appends the id as a JSON string: its text in double quotes.
    public func appendJSON(to out: inout [UInt8]) {
        out.append(addingCapacity: ULID.textLength + 2) { span in
            span.append(UInt8(ascii: "\""))
            appendText(to: &span)
            span.append(UInt8(ascii: "\""))
        }
    }

    /// The 26 symbols, first to last, each five bits of the id from the top. They carry 130
    /// bits, the top two always zero: the first symbol takes the top three bits of `high`,
    /// and the fourteenth the last bit of `high` and the first four of `low`.
    public func appendText(to span: inout OutputSpan<UInt8>) {
        // The table copied once: each read of the static would go through its accessor.
        let symbols = ULID.symbols
        span.append(symbols[Int(high &>> 61)])
        for index in 0..<12 {
            span.append(symbols[Int(high &>> (56 - 5 * index) & 31)])
        }
        span.append(symbols[Int((high &<< 4 | low &>> 60) & 31)])
        for index in 0..<12 {
            span.append(symbols[Int(low &>> (55 - 5 * index) & 31)])
        }
    }

    /// The Crockford symbols by value: digits, then the letters without I, L, O, U.
    static let symbols: InlineArray<32, UInt8> = [
        0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39,  // 0-9
        0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,  // A-H
        0x4A, 0x4B, 0x4D, 0x4E, 0x50, 0x51, 0x52, 0x53, 0x54,  // J K M N P Q R S T
        0x56, 0x57, 0x58, 0x59, 0x5A,  // V-Z
    ]

    /// Parses the 26-character form; lower case is accepted, the excluded letters
    /// I, L, O and U are not (they are not ULID symbols), and the first symbol must be ≤ 7.
    public init?(_ text: some StringProtocol) {
        self.init(utf8: Array(text.utf8))
    }

    public init?(utf8 text: [UInt8]) {
        self.init(utf8: text[...])
    }

    /// As `init?(utf8:)`, from a part of a larger text (a member read in place).
    public init?(utf8 text: ArraySlice<UInt8>) {
        guard text.count == 26 else { return nil }
        // The table read once: each read of the static would go through its accessor.
        let decoding = ULID.decoding.span
        let symbols = text.span
        var bits: UInt128 = 0
        // Every symbol's value ORed: one not in the table (0xFF) sets the high bits.
        var seen: UInt8 = 0
        for index in symbols.indices {
            let value = decoding[Int(symbols[index])]
            seen |= value
            bits = bits << 5 | UInt128(value)
        }
        // 26 symbols are 130 bits: the first must be at most 7 for the value to fit in 128.
        guard seen < 32, decoding[Int(symbols[0])] < 8 else { return nil }
        self.init(high: UInt64(truncatingIfNeeded: bits >> 64), low: UInt64(truncatingIfNeeded: bits))
    }

    /// Why `text` is not a ULID, in words a person can act on; nil when it is one.
    public static func problem(with text: [UInt8]) -> String? {
        problem(with: text[...])
    }

    public static func problem(with text: ArraySlice<UInt8>) -> String? {
        guard text.count == 26 else { return "a ULID has 26 characters, this has \(text.count)" }
        for byte in text where decoding[Int(byte)] == 0xFF {
            return "'\(String(decoding: [byte], as: UTF8.self))' is not a Crockford base32 symbol"
        }
        if ULID(utf8: text) == nil { return "the first character of a ULID must be 0-7" }
        return nil
    }
}
