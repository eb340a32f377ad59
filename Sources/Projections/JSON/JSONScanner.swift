/// A pull parser over UTF-8 JSON text (RFC 8259), strict: no comments, no trailing commas,
/// no leading zeros, no lone surrogates, no invalid UTF-8, no raw control characters in
/// strings, duplicate object keys rejected, nesting bounded by `maxDepth`.
///
/// It never builds a tree: a caller reads the members it expects and asks for the rest as
/// canonical bytes (`canonicalValue(into:)`), so an input is decoded once.
public struct JSONScanner {
    public static let defaultMaxDepth = 64

    let input: [UInt8]
    var position: Int
    let maxDepth: Int
    /// Whether anything read so far was not in its canonical form: whitespace between
    /// tokens, an escape other than the minimal one (`CanonicalWriter`'s), or an object's
    /// keys out of order in a value read by `canonicalValue(into:)`. While it is false, the
    /// canonical bytes of what was read are the input's own bytes.
    public private(set) var rewritten = false

    public init(_ input: [UInt8], maxDepth: Int = JSONScanner.defaultMaxDepth) {
        self.input = input
        self.position = 0
        self.maxDepth = maxDepth
    }

    /// A scanner that starts at `offset` of `input` (a value inside a larger text).
    public init(_ input: [UInt8], from offset: Int, maxDepth: Int = JSONScanner.defaultMaxDepth) {
        self.input = input
        self.position = offset
        self.maxDepth = maxDepth
    }

    public var offset: Int { position }

    // MARK: - Structure

    public mutating func skipWhitespace() {
        while position < input.count {
            switch input[position] {
            case 0x20, 0x0A, 0x0D, 0x09:
                position += 1
                rewritten = true
            default: return
            }
        }
    }

    /// The next significant byte, without consuming it.
    public mutating func peek() -> UInt8? {
        skipWhitespace()
        return position < input.count ? input[position] : nil
    }

    public mutating func expectEnd() throws(JSONError) {
        skipWhitespace()
        if position != input.count {
            throw JSONError("unexpected text after the JSON value", at: position)
        }
    }

    mutating func expect(_ byte: UInt8, _ what: String) throws(JSONError) {
        skipWhitespace()
        guard position < input.count, input[position] == byte else {
            throw unexpected(expecting: what)
        }
        position += 1
    }

    func unexpected(expecting what: String) -> JSONError {
        if position >= input.count {
            return JSONError("unexpected end of input, expecting \(what)", at: position)
        }
        let byte = input[position]
        let shown =
            (0x21..<0x7F).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte 0x\(String(byte, radix: 16))"
        return JSONError("unexpected \(shown), expecting \(what)", at: position)
    }

    /// Reads an object member by member: `body` gets each key (its decoded UTF-8 bytes; a
    /// slice of the input when the key has no escapes, so reading keys allocates nothing)
    /// and must consume exactly that member's value. Duplicate keys are an error.
    public mutating func readObject(
        _ body: (_ key: ArraySlice<UInt8>, inout JSONScanner) throws(JSONError) -> Void
    ) throws(JSONError) {
        try expect(UInt8(ascii: "{"), "'{'")
        if peek() == UInt8(ascii: "}") {
            position += 1
            return
        }
        // Duplicate keys: a linear scan while objects are small (the common case), a set
        // beyond, so a hostile object with many keys costs O(n), not O(n²). The first 16
        // plain keys (ASCII, no escapes) are kept as ranges of the input: no allocation and
        // no reference counting for the objects of an event or a request. A decoded key
        // moves every key to the set, which compares decoded bytes.
        var seen = InlineArray<16, Range<Int>>(repeating: 0..<0)
        var seenCount = 0
        var seenSet: Set<ArraySlice<UInt8>>?
        while true {
            guard peek() == UInt8(ascii: "\"") else { throw unexpected(expecting: "a string key") }
            let keyStart = position
            let plain = readPlainString()
            let key: ArraySlice<UInt8>
            if let plain { key = input[plain] } else { key = try readStringBytes()[...] }
            var duplicate = false
            if seenSet == nil, let plain, seenCount < 16 {
                for index in 0..<seenCount where sameInput(seen[index], plain) {
                    duplicate = true
                    break
                }
                seen[seenCount] = plain
                seenCount += 1
            } else {
                if seenSet == nil {
                    var set = Set<ArraySlice<UInt8>>()
                    for index in 0..<seenCount { set.insert(input[seen[index]]) }
                    seenSet = set
                }
                duplicate = !seenSet!.insert(key).inserted
            }
            if duplicate {
                throw JSONError("duplicate key \"\(String(decoding: key, as: UTF8.self))\"", at: keyStart)
            }
            try expect(UInt8(ascii: ":"), "':'")
            skipWhitespace()
            try body(key, &self)
            guard let next = peek() else { throw unexpected(expecting: "',' or '}'") }
            position += 1
            if next == UInt8(ascii: "}") { return }
            if next != UInt8(ascii: ",") {
                position -= 1
                throw unexpected(expecting: "',' or '}'")
            }
        }
    }

    /// A string (the scanner is at its opening quote) as a slice of the input when it
    /// holds only plain ASCII, else decoded: a method name or version read this way costs
    /// no array of its own.
    public mutating func readStringSlice() throws(JSONError) -> ArraySlice<UInt8> {
        skipWhitespace()
        if let plain = readPlainString() { return input[plain] }
        guard position < input.count, input[position] == UInt8(ascii: "\"") else {
            throw unexpected(expecting: "a string")
        }
        return try readDecodedString()[...]
    }

    /// The content of the string at the scanner, when it is plain ASCII without escapes,
    /// as a range of the input, the scanner moved past it; else nil, the scanner left.
    mutating func readPlainString() -> Range<Int>? {
        guard let end = plainStringEnd() else { return nil }
        defer { position = end + 1 }
        return (position + 1)..<end
    }

    /// Where the plain string at the scanner ends (its closing quote), or nil. Read through
    /// a span: each byte checked against its bounds alone.
    private func plainStringEnd() -> Int? {
        let input = self.input.span
        guard position < input.count, input[position] == UInt8(ascii: "\"") else { return nil }
        var index = position + 1
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") { return index }
            if byte == UInt8(ascii: "\\") || byte >= 0x80 || byte < 0x20 { return nil }
            index += 1
        }
        return nil
    }

    /// Whether two ranges of the input hold the same bytes.
    func sameInput(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
        guard a.count == b.count else { return false }
        var offset = 0
        while offset < a.count {
            if input[a.lowerBound + offset] != input[b.lowerBound + offset] { return false }
            offset += 1
        }
        return true
    }

    /// Reads an array element by element; `body` must consume each element.
    public mutating func readArray(_ body: (inout JSONScanner) throws(JSONError) -> Void) throws(JSONError) {
        try expect(UInt8(ascii: "["), "'['")
        if peek() == UInt8(ascii: "]") {
            position += 1
            return
        }
        while true {
            skipWhitespace()
            try body(&self)
            guard let next = peek() else { throw unexpected(expecting: "',' or ']'") }
            position += 1
            if next == UInt8(ascii: "]") { return }
            if next != UInt8(ascii: ",") {
                position -= 1
                throw unexpected(expecting: "',' or ']'")
            }
        }
    }

    /// Consumes `null` when it is next and says so.
    public mutating func readNull() -> Bool {
        skipWhitespace()
        if position + 4 <= input.count, input[position] == 0x6E, input[position + 1] == 0x75,
            input[position + 2] == 0x6C, input[position + 3] == 0x6C
        {
            position += 4
            return true
        }
        return false
    }

    public mutating func readBool() throws(JSONError) -> Bool {
        skipWhitespace()
        if try literal("true") { return true }
        if try literal("false") { return false }
        throw unexpected(expecting: "true or false")
    }

    mutating func literal(_ word: StaticString) throws(JSONError) -> Bool {
        let count = word.utf8CodeUnitCount
        guard position + count <= input.count else { return false }
        let matches = word.withUTF8Buffer { word in
            for i in 0..<count where input[position + i] != word[i] { return false }
            return true
        }
        if matches { position += count }
        return matches
    }

    // MARK: - Strings

    public mutating func readString() throws(JSONError) -> String {
        String(decoding: try readStringBytes(), as: UTF8.self)
    }

    /// Reads a string and returns its content as validated UTF-8 bytes, escapes decoded.
    public mutating func readStringBytes() throws(JSONError) -> [UInt8] {
        skipWhitespace()
        guard position < input.count, input[position] == UInt8(ascii: "\"") else {
            throw unexpected(expecting: "a string")
        }
        // Fast path: no escapes, ASCII only.
        if let plain = readPlainString() { return Array(input[plain]) }
        return try readDecodedString()
    }

    /// The string at the scanner (at its opening quote), decoded: its escapes and its
    /// UTF-8 checked.
    mutating func readDecodedString() throws(JSONError) -> [UInt8] {
        position += 1
        let start = position
        var out: [UInt8] = []
        while position < input.count {
            let byte = input[position]
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                return out
            case UInt8(ascii: "\\"):
                try readEscape(into: &out)
            case 0..<0x20:
                throw JSONError(
                    "control character 0x\(String(byte, radix: 16)) in a string must be escaped", at: position)
            case 0x80...:
                try readUTF8Scalar(into: &out)
            default:
                out.append(byte)
                position += 1
            }
        }
        throw JSONError("unterminated string", at: start - 1)
    }

    mutating func readEscape(into out: inout [UInt8]) throws(JSONError) {
        let escapeStart = position
        position += 1
        guard position < input.count else { throw JSONError("unterminated escape", at: escapeStart) }
        let code = input[position]
        position += 1
        switch code {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5C)
        case UInt8(ascii: "/"):
            // Written raw in the canonical form.
            rewritten = true
            out.append(0x2F)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0C)
        case UInt8(ascii: "n"): out.append(0x0A)
        case UInt8(ascii: "r"): out.append(0x0D)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try readHex4(escapeStart)
            if (0xD800..<0xDC00).contains(scalar) {
                guard position + 1 < input.count, input[position] == UInt8(ascii: "\\"),
                    input[position + 1] == UInt8(ascii: "u")
                else { throw JSONError("lone high surrogate in \\u escape", at: escapeStart) }
                position += 2
                let low = try readHex4(escapeStart)
                guard (0xDC00..<0xE000).contains(low) else {
                    throw JSONError("high surrogate not followed by a low surrogate", at: escapeStart)
                }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xDC00..<0xE000).contains(scalar) {
                throw JSONError("lone low surrogate in \\u escape", at: escapeStart)
            }
            if !isMinimalEscape(scalar, at: escapeStart) { rewritten = true }
            guard let unicode = Unicode.Scalar(scalar) else {
                throw JSONError("invalid \\u escape", at: escapeStart)
            }
            out.append(contentsOf: UTF8.encode(unicode)!)
        default:
            throw JSONError("invalid escape '\\\(Character(Unicode.Scalar(code)))'", at: escapeStart)
        }
    }

    /// Whether the `\\u` escape of `scalar` at `escapeStart` is the one the canonical form
    /// writes: a C0 control without a short form, as `\\u00` and two lower-case hex digits.
    /// Anything else is written raw or with its short form.
    func isMinimalEscape(_ scalar: UInt32, at escapeStart: Int) -> Bool {
        switch scalar {
        case 0x08, 0x09, 0x0A, 0x0C, 0x0D: return false
        case 0..<0x20:
            let digits = input[(escapeStart + 2)..<(escapeStart + 6)]
            return digits.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
        default: return false
        }
    }

    mutating func readHex4(_ escapeStart: Int) throws(JSONError) -> UInt32 {
        guard position + 4 <= input.count else { throw JSONError("truncated \\u escape", at: escapeStart) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = input[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw JSONError("invalid hex digit in \\u escape", at: escapeStart)
            }
            value = value << 4 | UInt32(digit)
            position += 1
        }
        return value
    }

    /// Validates one multi-byte UTF-8 sequence (no overlongs, no surrogates, ≤ U+10FFFF).
    mutating func readUTF8Scalar(into out: inout [UInt8]) throws(JSONError) {
        let start = position
        let lead = input[position]
        let length: Int
        var lowerBound: UInt8 = 0x80
        var upperBound: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0:
            length = 3
            lowerBound = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED:
            length = 3
            upperBound = 0x9F
        case 0xF0:
            length = 4
            lowerBound = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4:
            length = 4
            upperBound = 0x8F
        default: throw JSONError("invalid UTF-8", at: start)
        }
        guard start + length <= input.count else { throw JSONError("truncated UTF-8 sequence", at: start) }
        let second = input[start + 1]
        guard second >= lowerBound, second <= upperBound else { throw JSONError("invalid UTF-8", at: start) }
        for i in 2..<max(2, length) where input[start + i] & 0xC0 != 0x80 {
            throw JSONError("invalid UTF-8", at: start)
        }
        out.append(contentsOf: input[start..<(start + length)])
        position += length
    }

    // MARK: - Any value, canonically

    /// Parses any JSON value and appends its canonical encoding to `out`.
    public mutating func canonicalValue(into out: inout [UInt8]) throws(JSONError) {
        try canonicalValue(into: &out, depth: 0)
    }

    mutating func canonicalValue(into out: inout [UInt8], depth: Int) throws(JSONError) {
        guard let byte = peek() else { throw unexpected(expecting: "a value") }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: position) }
            var members: [(key: [UInt8], value: [UInt8])] = []
            try readObject { (key, scanner) throws(JSONError) in
                var value: [UInt8] = []
                try scanner.canonicalValue(into: &value, depth: depth + 1)
                members.append((Array(key), value))
            }
            for index in members.indices.dropFirst()
            where !members[index - 1].key.lexicographicallyPrecedes(members[index].key) {
                rewritten = true
                break
            }
            members.sort { $0.key.lexicographicallyPrecedes($1.key) }
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(utf8: member.key, to: &out)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: member.value)
            }
            out.append(UInt8(ascii: "}"))
        case UInt8(ascii: "["):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: position) }
            out.append(UInt8(ascii: "["))
            var first = true
            try readArray { (scanner) throws(JSONError) in
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                try scanner.canonicalValue(into: &out, depth: depth + 1)
            }
            out.append(UInt8(ascii: "]"))
        case UInt8(ascii: "\""):
            // Plain ASCII without escapes or control characters is its own canonical form.
            if let plain = readPlainString() {
                out.append(contentsOf: input[(plain.lowerBound - 1)...plain.upperBound])
                return
            }
            let content = try readStringBytes()
            CanonicalWriter.appendString(utf8: content, to: &out)
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            CanonicalWriter.appendBool(try readBool(), to: &out)
        case UInt8(ascii: "n"):
            guard readNull() else { throw unexpected(expecting: "a value") }
            CanonicalWriter.appendNull(to: &out)
        default:
            let start = position
            try skipNumber()
            out.append(contentsOf: input[start..<position])
        }
    }

    /// Skips a value of any kind (validating it).
    ///
    /// It checks what `canonicalValue(into:)` checks (grammar, strings, duplicate keys,
    /// depth) and builds nothing: a request's `params`, skipped to be read later, costs a
    /// pass over its bytes rather than a canonical copy with its keys sorted.
    public mutating func skipValue() throws(JSONError) {
        try skipValue(depth: 0)
    }

    mutating func skipValue(depth: Int) throws(JSONError) {
        guard let byte = peek() else { throw unexpected(expecting: "a value") }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: position) }
            try readObject { (_, scanner) throws(JSONError) in try scanner.skipValue(depth: depth + 1) }
        case UInt8(ascii: "["):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: position) }
            try readArray { (scanner) throws(JSONError) in try scanner.skipValue(depth: depth + 1) }
        case UInt8(ascii: "\""):
            try skipString()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            _ = try readBool()
        case UInt8(ascii: "n"):
            guard readNull() else { throw unexpected(expecting: "a value") }
        default:
            try skipNumber()
        }
    }

    /// Skips a string: plain ASCII without escapes in one pass, anything else validated by
    /// reading it.
    mutating func skipString() throws(JSONError) {
        let start = position
        var index = position + 1
        while index < input.count {
            let byte = input[index]
            if byte == UInt8(ascii: "\"") {
                position = index + 1
                return
            }
            if byte == UInt8(ascii: "\\") || byte >= 0x80 || byte < 0x20 { break }
            index += 1
        }
        position = start
        _ = try readStringBytes()
    }

    /// Validates a number against the JSON grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
    mutating func skipNumber() throws(JSONError) {
        let start = position
        func digit(_ i: Int) -> Bool { i < input.count && input[i] >= 0x30 && input[i] <= 0x39 }
        if position < input.count, input[position] == UInt8(ascii: "-") { position += 1 }
        guard digit(position) else {
            position = start
            throw unexpected(expecting: "a value")
        }
        if input[position] == UInt8(ascii: "0") {
            position += 1
            if digit(position) { throw JSONError("leading zeros are not allowed in numbers", at: start) }
        } else {
            while digit(position) { position += 1 }
        }
        if position < input.count, input[position] == UInt8(ascii: ".") {
            position += 1
            guard digit(position) else { throw JSONError("a digit must follow the decimal point", at: start) }
            while digit(position) { position += 1 }
        }
        if position < input.count, input[position] == UInt8(ascii: "e") || input[position] == UInt8(ascii: "E") {
            position += 1
            if position < input.count, input[position] == UInt8(ascii: "+") || input[position] == UInt8(ascii: "-") {
                position += 1
            }
            guard digit(position) else { throw JSONError("a digit must follow the exponent", at: start) }
            while digit(position) { position += 1 }
        }
    }
}
