import JSONRPCClient
import Projections

/// JSON text handled as bytes: parts of the daemon's replies passed through unchanged (for
/// `--json`), and request parameters written directly.
enum RawJSON {
    /// The bytes of the member `name` of the object `bytes`, as written there.
    static func member(_ name: String, of bytes: [UInt8]) -> [UInt8]? { JSONRPCConnection.member(name, of: bytes) }

    /// The elements of the array `bytes`, each as written there.
    static func elements(of bytes: [UInt8]) -> [[UInt8]]? {
        var elements: [[UInt8]] = []
        var scanner = JSONScanner(bytes)
        do {
            try scanner.readArray { (scanner) throws(JSONError) in
                let start = scanner.offset
                try scanner.skipValue()
                elements.append(Array(bytes[start..<scanner.offset]))
            }
        } catch {
            return nil
        }
        return elements
    }

    /// `[a,b,...]` from elements already encoded.
    static func array(_ elements: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "[")]
        for (index, element) in elements.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out += element
        }
        out.append(UInt8(ascii: "]"))
        return out
    }

    /// Why `text` is not one JSON value, or nil when it is.
    static func problem(with text: [UInt8]) -> String? {
        var scanner = JSONScanner(text)
        do {
            try scanner.skipValue()
            try scanner.expectEnd()
            return nil
        } catch {
            return error.description
        }
    }

    /// Compact JSON text of a value from `JSONTree.parse`, keys sorted.
    static func text(_ value: Any) -> String {
        JSONTree.encode(value).map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
    }

    /// A number of a reply as a `Double`, whether it was written as an integer or not.
    static func double(_ value: Any?) -> Double? {
        if let integer = value as? Int { return Double(integer) }
        return value as? Double
    }

    /// A value as a person reads it: a string bare, unless it would read as something else
    /// (a number, `true`, `null`, empty, edged with spaces), then quoted; anything else as JSON.
    static func display(_ value: Any) -> String {
        guard let string = value as? String else { return text(value) }
        let plain =
            !string.isEmpty && problem(with: Array(string.utf8)) != nil
            && string.first?.isWhitespace == false && string.last?.isWhitespace == false
            && !string.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
        return plain ? string : text(string)
    }
}

/// A JSON object written member by member, keys in the order given.
struct JSONObjectWriter {
    private(set) var members: [UInt8] = []

    var bytes: [UInt8] { [UInt8(ascii: "{")] + members + [UInt8(ascii: "}")] }

    private mutating func key(_ name: String) {
        if !members.isEmpty { members.append(UInt8(ascii: ",")) }
        CanonicalWriter.appendString(name, to: &members)
        members.append(UInt8(ascii: ":"))
    }

    /// Adds `name: value` when the value is there.
    mutating func add(_ name: String, _ value: String?) {
        guard let value else { return }
        key(name)
        CanonicalWriter.appendString(value, to: &members)
    }

    mutating func add(_ name: String, _ value: Int?) {
        guard let value else { return }
        key(name)
        members += Array(String(value).utf8)
    }

    mutating func add(_ name: String, _ value: Bool) {
        key(name)
        members += Array((value ? "true" : "false").utf8)
    }

    /// Adds a member whose value is JSON text already.
    mutating func add(_ name: String, json: [UInt8]) {
        key(name)
        members += json
    }
}
