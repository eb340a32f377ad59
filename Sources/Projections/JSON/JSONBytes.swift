/// A JSON value held as its canonical encoding: object keys sorted by their UTF-8 bytes,
/// no insignificant whitespace, strings escaped the one way `CanonicalWriter` escapes them.
///
/// Two values are equal exactly when their canonical bytes are equal, which is how the
/// spec compares set elements. Numbers keep the lexeme they were written with.
public struct JSONBytes: Hashable, Comparable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// Wraps bytes that are already canonical. Use `JSONBytes(parsing:)` for anything else.
    public init(canonical bytes: [UInt8]) {
        self.bytes = bytes
    }

    /// Parses any JSON text and keeps its canonical encoding.
    public init(parsing text: [UInt8], maxDepth: Int = JSONScanner.defaultMaxDepth) throws(JSONError) {
        var scanner = JSONScanner(text, maxDepth: maxDepth)
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        try scanner.canonicalValue(into: &out)
        try scanner.expectEnd()
        self.bytes = out
    }

    public init(parsing text: String) throws(JSONError) {
        try self.init(parsing: Array(text.utf8))
    }

    public static let null = JSONBytes(canonical: Array("null".utf8))

    public var isNull: Bool { bytes == JSONBytes.null.bytes }

    public static func string(_ value: String) -> JSONBytes {
        var out: [UInt8] = []
        CanonicalWriter.appendString(value, to: &out)
        return JSONBytes(canonical: out)
    }

    /// The value as a Swift string when it is a JSON string.
    public var stringValue: String? {
        guard bytes.first == UInt8(ascii: "\"") else { return nil }
        var scanner = JSONScanner(bytes)
        return try? scanner.readString()
    }

    public static func < (lhs: JSONBytes, rhs: JSONBytes) -> Bool {
        lhs.bytes.lexicographicallyPrecedes(rhs.bytes)
    }

    public var description: String { String(decoding: bytes, as: UTF8.self) }
}

/// Why a text is not the JSON we accept.
public struct JSONError: Error, Equatable, Sendable, CustomStringConvertible {
    public var message: String
    /// Byte offset in the input where the problem was found.
    public var offset: Int
    /// False for errors a reader of valid JSON raised about its meaning (a wrong type, an
    /// unknown member): their message stands alone.
    public var isSyntax: Bool

    public init(_ message: String, at offset: Int) {
        self.message = message
        self.offset = offset
        self.isSyntax = true
    }

    /// An error about what valid JSON means rather than how it is written.
    public init(meaning message: String, at offset: Int) {
        self.init(message, at: offset)
        self.isSyntax = false
    }

    public var description: String { isSyntax ? "\(message) at byte \(offset)" : message }
}
