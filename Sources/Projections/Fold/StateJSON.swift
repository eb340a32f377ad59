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
        do {
            return try transcode(entity: entity, state: encoded, history: history, rev: rev)
        } catch {
            return nil
        }
    }

    private static func transcode(
        entity: EntityKey, state: UnsafeBufferPointer<UInt8>, history: UnsafeBufferPointer<UInt8>, rev: UInt64
    ) throws(Declined) -> [UInt8] {
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

        var out: [UInt8] = []
        // Ids grow from 16 bytes to 28 and gain their keys; set adds vanish. Four times the
        // stored bytes is room enough for the states `get` meets, so the array grows rarely.
        out.reserveCapacity(4 * (state.count + history.count) + entity.bytes.count + 160)
        out.appendLiteral(#"{"conflicts":{"fields":{"#)
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
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                out.appendString(reader.bytes, name)
                out.appendLiteral(":[")
            }
            for index in 0..<headCount {
                let id = try reader.ulid()
                let origin = try reader.reference(into: origins)
                let value = try reader.lengthPrefixed()
                guard conflicting else { continue }
                if index > 0 { out.append(UInt8(ascii: ",")) }
                out.appendLiteral(#"{"id":"#)
                id.appendJSON(to: &out)
                out.appendLiteral(#","origin":"#)
                origin.appendJSON(to: &out)
                out.appendLiteral(#","value":"#)
                out.append(reader.bytes, value)
                out.append(UInt8(ascii: "}"))
            }
            if conflicting { out.append(UInt8(ascii: "]")) }
        }

        out.appendLiteral(#"},"status":["#)
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
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.appendStatusEntry(id: id, origin: origin, status: status, in: reader.bytes)
        }
        out.appendLiteral("]},")

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
        guard reader.isAtEnd else { throw Declined() }

        out.appendLiteral(#""deleted":"#)
        out.appendLiteral(deleted ? "true" : "false")
        out.appendLiteral(#","entity":"#)
        out.appendString(entity.bytes)
        out.appendLiteral(#","events":"#)
        out.appendDecimal(UInt64(eventCount))

        out.appendLiteral(#","fields":{"#)
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
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            out.appendString(reader.bytes, name)
            out.append(UInt8(ascii: ":"))
            out.append(reader.bytes, winner)
        }

        out.appendLiteral(#"},"sets":{"#)
        reader.position = sets
        for index in 0..<setCount {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.appendString(reader.bytes, try reader.string())
            out.appendLiteral(":[")
            let elementCount = try reader.count(minimumElementSize: 2)
            if elementCount == 1 {
                out.append(reader.bytes, try reader.lengthPrefixed())
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
                    if position > 0 { out.append(UInt8(ascii: ",")) }
                    out.append(reader.bytes, element.bytes)
                }
            }
            out.append(UInt8(ascii: "]"))
        }

        out.appendLiteral(#"},"status":"#)
        if let current {
            out.appendLiteral(#"{"current":"#)
            out.appendString(reader.bytes, current.status)
            out.appendLiteral(#","history":["#)
            historyReader.position = historyEntries
            for index in 0..<historyCount {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                let id = try historyReader.ulid()
                let origin = try historyReader.reference(into: historyOrigins)
                out.appendStatusEntry(id: id, origin: origin, status: try historyReader.string(), in: history)
            }
            out.appendLiteral(#"],"id":"#)
            current.id.appendJSON(to: &out)
            out.append(UInt8(ascii: "}"))
        } else {
            out.appendLiteral("null")
        }
        out.appendLiteral(#","version":"#)
        if eventCount == 0 {
            out.appendLiteral("null")
        } else {
            RawReader(state, at: version).uncheckedULID().appendJSON(to: &out)
        }
        out.appendLiteral(#","rev":"#)
        out.appendDecimal(rev)
        out.append(UInt8(ascii: "}"))
        return out
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

extension Array where Element == UInt8 {
    fileprivate mutating func appendLiteral(_ text: StaticString) {
        text.withUTF8Buffer { append(contentsOf: $0) }
    }

    fileprivate mutating func append(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        append(contentsOf: UnsafeBufferPointer(rebasing: bytes[range]))
    }

    /// UTF-8 string content as `CanonicalWriter.appendString` writes it.
    fileprivate mutating func appendString(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        appendString(UnsafeBufferPointer(rebasing: bytes[range]))
    }

    fileprivate mutating func appendString(_ content: some Collection<UInt8>) {
        append(UInt8(ascii: "\""))
        if content.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
            for byte in content { CanonicalWriter.appendEscaped(byte, to: &self) }
        } else {
            append(contentsOf: content)
        }
        append(UInt8(ascii: "\""))
    }

    fileprivate mutating func appendStatusEntry(
        id: ULID, origin: ULID, status: Range<Int>, in bytes: UnsafeBufferPointer<UInt8>
    ) {
        appendLiteral(#"{"id":"#)
        id.appendJSON(to: &self)
        appendLiteral(#","origin":"#)
        origin.appendJSON(to: &self)
        appendLiteral(#","status":"#)
        appendString(bytes, status)
        append(UInt8(ascii: "}"))
    }

    /// Decimal digits, as `String(value)` gives them: room made, then filled from the last.
    fileprivate mutating func appendDecimal(_ value: UInt64) {
        var width = 1
        var scale = value
        while scale >= 10 {
            scale /= 10
            width += 1
        }
        let start = count
        append(contentsOf: repeatElement(UInt8(ascii: "0"), count: width))
        var rest = value
        for index in stride(from: start + width - 1, through: start, by: -1) {
            self[index] = UInt8(ascii: "0") + UInt8(rest % 10)
            rest /= 10
        }
    }
}
