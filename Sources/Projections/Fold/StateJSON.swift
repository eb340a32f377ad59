/// `get`'s answer written straight from the stored bytes of a state.
///
/// Decoding the state into an `EntityState` (a register per field, arrays of heads, ids,
/// strings) only to write it out again as JSON cost most of a `get`: allocations and
/// their release were a third of it. This walks the compact encoding that `encoded()`
/// wrote and writes the same canonical JSON as `canonicalJSON(history:)` into one
/// pre-sized array, building nothing in between.
///
/// It is the fast path, not the definition: whatever it does not read as expected it
/// declines (nil), and the caller renders the decoded state instead, which also reports
/// corrupt bytes. So it must decline at least wherever decoding would throw, and must
/// otherwise write exactly what `canonicalJSON(history:)` writes, which the tests check
/// against states folded from random events.
extension EntityState {
    /// The canonical JSON of the state `encoded` holds, with the status history
    /// `history` under "status" and `,"rev":REV` as the last member — or nil when the
    /// bytes are not read here (the caller decodes them instead).
    ///
    /// `history` is a history as the store keeps it beside a state: a varint count of
    /// origins and their 16 bytes each, sorted, then a varint count of entries, each an id
    /// (16 bytes), a varint index of its origin and a length-prefixed status, in id order;
    /// nothing may follow it.
    public static func canonicalJSON(
        entity: EntityKey, encoded: UnsafeBufferPointer<UInt8>, history: UnsafeBufferPointer<UInt8>, rev: UInt64
    ) -> [UInt8]? {
        let stored = encoded.count + history.count
        // Ids grow from 16 bytes to 28 and gain their keys, set adds vanish: four times the
        // stored bytes holds the states `get` meets. Twelve times holds any (a string
        // escaped to six times its bytes, written twice), the one retry when the first
        // guess fell short.
        for multiple in stride(from: 4, through: 12, by: 8) {
            do {
                return try Array(unsafeUninitializedCapacity: multiple * stored + 6 * entity.bytes.count + 256) {
                    buffer, initialized in
                    var out = Output(buffer)
                    try transcode(entity: entity, state: encoded, history: history, rev: rev, into: &out)
                    initialized = out.count
                }
            } catch is Output.Full {
                continue
            } catch {
                return nil
            }
        }
        return nil
    }

    private static func transcode(
        entity: EntityKey, state: UnsafeBufferPointer<UInt8>, history: UnsafeBufferPointer<UInt8>, rev: UInt64,
        into out: inout Output
    ) throws {
        // The history is checked whole first: decoding reads it even when there is no
        // status to put it under.
        var historyReader = RawReader(history)
        let historyOrigins = try historyReader.table()
        let historyCount = try historyReader.count(minimumElementSize: 18)
        let historyEntries = historyReader.position
        for _ in 0..<historyCount { try historyReader.skipStatusEntry(origins: historyOrigins) }
        guard historyReader.isAtEnd else { throw Declined() }

        var reader = RawReader(state)
        guard try reader.byte() == formatVersion else { throw Declined() }
        let eventCount = try reader.integer()
        let version = try reader.skip(16)
        let origins = try reader.table()

        try out.literal(#"{"conflicts":{"fields":{"#)
        let fieldCount = try reader.count()
        let fields = reader.position
        var first = true
        for _ in 0..<fieldCount {
            let name = try reader.string()
            let headCount = try reader.count(minimumElementSize: 18)
            // A register exists only while it has a head; decoding would not render one without.
            guard headCount > 0 else { throw Declined() }
            let conflicting = headCount > 1
            if conflicting {
                if !first { try out.byte(UInt8(ascii: ",")) }
                first = false
                try out.string(reader.bytes, name)
                try out.literal(":[")
            }
            for index in 0..<headCount {
                let id = try reader.ulid()
                let origin = try reader.reference(into: origins)
                let value = try reader.lengthPrefixed()
                guard conflicting else { continue }
                if index > 0 { try out.byte(UInt8(ascii: ",")) }
                try out.literal(#"{"id":"#)
                try out.id(id)
                try out.literal(#","origin":"#)
                try out.id(origin)
                try out.literal(#","value":"#)
                try out.bytes(reader.bytes, value)
                try out.byte(UInt8(ascii: "}"))
            }
            if conflicting { try out.byte(UInt8(ascii: "]")) }
        }

        try out.literal(#"},"status":["#)
        _ = try reader.integer()  // the status count
        _ = try reader.skip(16)  // the history digest
        let statusCount = try reader.count(minimumElementSize: 18)
        var current: (id: ULID, status: Range<Int>)?
        for index in 0..<statusCount {
            let id = try reader.ulid()
            let origin = try reader.reference(into: origins)
            let status = try reader.string()
            current = (id, status)
            guard statusCount > 1 else { continue }
            if index > 0 { try out.byte(UInt8(ascii: ",")) }
            try out.statusEntry(id: id, origin: origin, status: status, in: reader.bytes)
        }
        try out.literal("]},")

        let setCount = try reader.count()
        let sets = reader.position
        for _ in 0..<setCount {
            _ = try reader.string()
            for _ in 0..<(try reader.count(minimumElementSize: 2)) {
                _ = try reader.lengthPrefixed()
                // An element is live by its adds; presentation orders by the first.
                guard try reader.ulidCount() > 0 else { throw Declined() }
            }
        }
        let deleted = try reader.ulidCount() > 0
        _ = try reader.ulidCount()  // dangling
        // Counters, when there are any: names in order, each with a 16-byte sum.
        if !reader.isAtEnd {
            let counterCount = try reader.count(minimumElementSize: 17)
            guard counterCount > 0 else { throw Declined() }
            try out.literal(#""counters":{"#)
            var previous: Range<Int>?
            for index in 0..<counterCount {
                let name = try reader.string()
                // Decoding orders names as strings; for ASCII that is byte order, and names
                // are ASCII (a field name's alphabet): anything else is left to decoding.
                guard reader.bytes[name].allSatisfy({ $0 < 0x80 }) else { throw Declined() }
                if let previous {
                    guard reader.bytes[previous].lexicographicallyPrecedes(reader.bytes[name]) else { throw Declined() }
                }
                previous = name
                let sum = try reader.skip(16)
                var bits: UInt128 = 0
                for at in sum..<(sum + 16) { bits = bits << 8 | UInt128(reader.bytes[at]) }
                if index > 0 { try out.byte(UInt8(ascii: ",")) }
                try out.string(reader.bytes, name)
                try out.byte(UInt8(ascii: ":"))
                for digit in Int128(bitPattern: bits).description.utf8 { try out.byte(digit) }
            }
            try out.literal("},")
        }
        guard reader.isAtEnd else { throw Declined() }

        try out.literal(#""deleted":"#)
        try out.literal(deleted ? "true" : "false")
        try out.literal(#","entity":"#)
        try entity.bytes.withUnsafeBufferPointer { bytes throws in try out.string(bytes, 0..<bytes.count) }
        try out.literal(#","events":"#)
        try out.decimal(UInt64(eventCount))

        try out.literal(#","fields":{"#)
        reader.position = fields
        first = true
        for _ in 0..<fieldCount {
            let name = try reader.string()
            let headCount = try reader.count(minimumElementSize: 18)
            var winner = 0..<0
            for _ in 0..<headCount {
                _ = try reader.skip(16)
                _ = try reader.varint()
                winner = try reader.lengthPrefixed()
            }
            guard !reader.isNull(winner) else { continue }
            if !first { try out.byte(UInt8(ascii: ",")) }
            first = false
            try out.string(reader.bytes, name)
            try out.byte(UInt8(ascii: ":"))
            try out.bytes(reader.bytes, winner)
        }

        try out.literal(#"},"sets":{"#)
        reader.position = sets
        for index in 0..<setCount {
            if index > 0 { try out.byte(UInt8(ascii: ",")) }
            try out.string(reader.bytes, try reader.string())
            try out.literal(":[")
            let elementCount = try reader.count(minimumElementSize: 2)
            if elementCount == 1 {
                try out.bytes(reader.bytes, try reader.lengthPrefixed())
                _ = try reader.ulidCount()
            } else {
                // Stored by element bytes, shown by first add: sorted exactly as
                // `elements(ofSet:)` sorts, so elements that share a first add keep its order.
                var elements: [(first: ULID, bytes: Range<Int>)] = []
                elements.reserveCapacity(elementCount)
                for _ in 0..<elementCount {
                    let element = try reader.lengthPrefixed()
                    let adds = try reader.table()
                    elements.append((RawReader(reader.bytes, at: adds.start).uncheckedULID(), element))
                }
                for (position, element) in elements.sorted(by: { $0.first < $1.first }).enumerated() {
                    if position > 0 { try out.byte(UInt8(ascii: ",")) }
                    try out.bytes(reader.bytes, element.bytes)
                }
            }
            try out.byte(UInt8(ascii: "]"))
        }

        try out.literal(#"},"status":"#)
        if let current {
            try out.literal(#"{"current":"#)
            try out.string(reader.bytes, current.status)
            try out.literal(#","history":["#)
            historyReader.position = historyEntries
            for index in 0..<historyCount {
                if index > 0 { try out.byte(UInt8(ascii: ",")) }
                let id = try historyReader.ulid()
                let origin = try historyReader.reference(into: historyOrigins)
                try out.statusEntry(id: id, origin: origin, status: try historyReader.string(), in: history)
            }
            try out.literal(#"],"id":"#)
            try out.id(current.id)
            try out.byte(UInt8(ascii: "}"))
        } else {
            try out.literal("null")
        }
        try out.literal(#","version":"#)
        if eventCount == 0 {
            try out.literal("null")
        } else {
            try out.id(RawReader(state, at: version).uncheckedULID())
        }
        try out.literal(#","rev":"#)
        try out.decimal(rev)
        try out.byte(UInt8(ascii: "}"))
    }
}

/// The fast path does not read these bytes; the caller decodes them instead.
private struct Declined: Error {}

/// Reads the compact encoding in place, as `ByteReader` does (the same varints and
/// bounds) but without copying: strings and values come back as ranges of `bytes`, and
/// an origin table as where it starts and how many it holds.
private struct RawReader {
    let bytes: UnsafeBufferPointer<UInt8>
    var position: Int

    init(_ bytes: UnsafeBufferPointer<UInt8>, at position: Int = 0) {
        self.bytes = bytes
        self.position = position
    }

    var isAtEnd: Bool { position == bytes.count }
    var remaining: Int { bytes.count - position }

    mutating func byte() throws(Declined) -> UInt8 {
        guard position < bytes.count else { throw Declined() }
        defer { position += 1 }
        return bytes[position]
    }

    /// As `ByteReader.varint()` reads it, bits past 64 dropped alike.
    mutating func varint() throws(Declined) -> UInt64 {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try self.byte()
            guard shift < 64 else { throw Declined() }
            value |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return value }
            shift += 7
        }
    }

    mutating func integer() throws(Declined) -> Int {
        guard let value = Int(exactly: try varint()) else { throw Declined() }
        return value
    }

    mutating func count(minimumElementSize: Int = 1) throws(Declined) -> Int {
        let value = try varint()
        guard value <= UInt64(remaining / minimumElementSize) else { throw Declined() }
        return Int(value)
    }

    /// Steps over `count` bytes and returns where they started.
    mutating func skip(_ count: Int) throws(Declined) -> Int {
        guard count >= 0, count <= remaining else { throw Declined() }
        defer { position += count }
        return position
    }

    mutating func lengthPrefixed() throws(Declined) -> Range<Int> {
        let start = try skip(try count())
        return start..<position
    }

    /// A length-prefixed string, which must be UTF-8 as decoding requires.
    mutating func string() throws(Declined) -> Range<Int> {
        let range = try lengthPrefixed()
        var ascii = true
        for index in range where bytes[index] >= 0x80 {
            ascii = false
            break
        }
        if !ascii, String(validating: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self) == nil {
            throw Declined()
        }
        return range
    }

    mutating func ulid() throws(Declined) -> ULID {
        guard remaining >= 16 else { throw Declined() }
        defer { position += 16 }
        return uncheckedULID()
    }

    /// The id at `position`, which the caller has bounds-checked.
    func uncheckedULID() -> ULID {
        let raw = UnsafeRawPointer(bytes.baseAddress! + position)
        return ULID(
            high: UInt64(bigEndian: raw.loadUnaligned(as: UInt64.self)),
            low: UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: 8, as: UInt64.self)))
    }

    /// A count of ids and the ids stepped over: how many there were.
    mutating func ulidCount() throws(Declined) -> Int {
        let count = try count(minimumElementSize: 16)
        _ = try skip(16 * count)
        return count
    }

    /// An id table (a count, then the ids): where its ids start and how many there are.
    mutating func table() throws(Declined) -> (start: Int, count: Int) {
        let count = try count(minimumElementSize: 16)
        return (try skip(16 * count), count)
    }

    /// The id a varint index names in `table`, checked against its bounds.
    mutating func reference(into table: (start: Int, count: Int)) throws(Declined) -> ULID {
        let index = try varint()
        guard index < UInt64(table.count) else { throw Declined() }
        return RawReader(bytes, at: table.start + 16 * Int(index)).uncheckedULID()
    }

    mutating func skipStatusEntry(origins: (start: Int, count: Int)) throws(Declined) {
        _ = try ulid()
        _ = try reference(into: origins)
        _ = try string()
    }

    func isNull(_ range: Range<Int>) -> Bool {
        range.count == 4 && bytes[range.lowerBound] == 0x6E && bytes[range.lowerBound + 1] == 0x75
            && bytes[range.lowerBound + 2] == 0x6C && bytes[range.lowerBound + 3] == 0x6C
    }
}

/// The answer being written: bytes put straight into the array's storage, each write
/// checked against the room left. Out of room is `Full`, and the caller tries again with
/// more.
private struct Output {
    struct Full: Error {}

    let base: UnsafeMutablePointer<UInt8>
    let capacity: Int
    private(set) var count = 0

    init(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        base = buffer.baseAddress!
        capacity = buffer.count
    }

    mutating func byte(_ byte: UInt8) throws(Full) {
        guard count < capacity else { throw Full() }
        base[count] = byte
        count += 1
    }

    mutating func bytes(_ source: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) throws(Full) {
        guard range.count <= capacity - count else { throw Full() }
        guard !range.isEmpty else { return }
        (base + count).update(from: source.baseAddress! + range.lowerBound, count: range.count)
        count += range.count
    }

    mutating func literal(_ text: StaticString) throws(Full) {
        let length = text.utf8CodeUnitCount
        guard length <= capacity - count else { throw Full() }
        text.withUTF8Buffer { (base + count).update(from: $0.baseAddress!, count: length) }
        count += length
    }

    /// UTF-8 string content as `CanonicalWriter.appendString` writes it: in quotes, `"`,
    /// `\` and the C0 controls escaped.
    mutating func string(_ source: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) throws(Full) {
        try byte(UInt8(ascii: "\""))
        var plain = true
        for index in range where source[index] < 0x20 || source[index] == 0x22 || source[index] == 0x5C {
            plain = false
            break
        }
        if plain {
            try bytes(source, range)
        } else {
            for index in range { try escaped(source[index]) }
        }
        try byte(UInt8(ascii: "\""))
    }

    /// One byte of string content, as `CanonicalWriter.appendEscaped` writes it.
    private mutating func escaped(_ value: UInt8) throws(Full) {
        let short: UInt8? =
            switch value {
            case 0x22: 0x22
            case 0x5C: 0x5C
            case 0x08: UInt8(ascii: "b")
            case 0x0C: UInt8(ascii: "f")
            case 0x0A: UInt8(ascii: "n")
            case 0x0D: UInt8(ascii: "r")
            case 0x09: UInt8(ascii: "t")
            default: nil
            }
        if let short {
            try byte(0x5C)
            try byte(short)
        } else if value < 0x20 {
            try literal("\\u00")
            try byte(Output.hex[Int(value >> 4)])
            try byte(Output.hex[Int(value & 0xF)])
        } else {
            try byte(value)
        }
    }

    private static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// An id as a JSON string: its 26 Crockford symbols in quotes.
    mutating func id(_ id: ULID) throws(Full) {
        guard capacity - count >= 28 else { throw Full() }
        let out = base + count
        out[0] = UInt8(ascii: "\"")
        out[27] = UInt8(ascii: "\"")
        // Five bits at a time from the low end (a 128-bit shift), the last symbol first;
        // the 26 symbols carry 130 bits, the top two always zero.
        var high = id.high
        var low = id.low
        let symbols = ULID.symbols
        for index in stride(from: 26, through: 1, by: -1) {
            out[index] = symbols[Int(low & 31)]
            low = low >> 5 | high << 59
            high >>= 5
        }
        count += 28
    }

    mutating func statusEntry(id: ULID, origin: ULID, status: Range<Int>, in bytes: UnsafeBufferPointer<UInt8>)
        throws(Full)
    {
        try literal(#"{"id":"#)
        try self.id(id)
        try literal(#","origin":"#)
        try self.id(origin)
        try literal(#","status":"#)
        try string(bytes, status)
        try byte(UInt8(ascii: "}"))
    }

    /// Decimal digits, as `String(value)` gives them.
    mutating func decimal(_ value: UInt64) throws(Full) {
        var width = 1
        var scale = value
        while scale >= 10 {
            scale /= 10
            width += 1
        }
        guard width <= capacity - count else { throw Full() }
        var rest = value
        for index in stride(from: count + width - 1, through: count, by: -1) {
            base[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
        count += width
    }
}
