/// A JSON value as plain Swift values, for the cold paths that read a document whole and
/// look into it by key (a config file, a peer's saved state, evctl's view of a reply):
/// an object is `[String: Any]`, an array `[Any]`, a string `String`, a number `Int` when
/// it is an integer that fits and `Double` otherwise, `true`/`false` a `Bool`, and `null`
/// `JSONTree.null`. The hot paths read and write bytes directly (`JSONScanner`,
/// `CanonicalWriter`); this is what `JSONSerialization` was to them, without Foundation.
public enum JSONTree {
    /// JSON's `null`.
    public struct Null: Hashable, Sendable {}
    public static let null = Null()

    /// How deep arrays and objects may nest.
    public static let maxDepth = 512

    /// The value of the JSON text `bytes` (surrounding whitespace allowed, nothing after it).
    public static func parse(_ bytes: [UInt8]) throws(JSONError) -> Any {
        var scanner = JSONScanner(bytes, maxDepth: maxDepth)
        let value = try parse(&scanner, bytes, depth: 0)
        try scanner.expectEnd()
        return value
    }

    private static func parse(_ scanner: inout JSONScanner, _ bytes: [UInt8], depth: Int) throws(JSONError) -> Any {
        guard let byte = scanner.peek() else { throw JSONError("expected a value, found the end", at: scanner.offset) }
        switch byte {
        case UInt8(ascii: "{"):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: scanner.offset) }
            var object: [String: Any] = [:]
            try scanner.readObject { (key, scanner) throws(JSONError) in
                object[String(decoding: key, as: UTF8.self)] = try parse(&scanner, bytes, depth: depth + 1)
            }
            return object
        case UInt8(ascii: "["):
            guard depth < maxDepth else { throw JSONError("nesting deeper than \(maxDepth)", at: scanner.offset) }
            var array: [Any] = []
            try scanner.readArray { (scanner) throws(JSONError) in
                array.append(try parse(&scanner, bytes, depth: depth + 1))
            }
            return array
        case UInt8(ascii: "\""):
            return try scanner.readString()
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            return try scanner.readBool()
        case UInt8(ascii: "n"):
            guard scanner.readNull() else { throw JSONError("expected a value", at: scanner.offset) }
            return null
        default:
            let start = scanner.offset
            try scanner.skipNumber()
            let text = String(decoding: bytes[start..<scanner.offset], as: UTF8.self)
            if !text.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }), let integer = Int(text) {
                return integer
            }
            guard let number = Double(text) else { throw JSONError("number out of range", at: start) }
            return number
        }
    }

    /// Compact JSON text of `value` (built of the types `parse` returns; `Int`s and
    /// `Double`s of any origin), object keys in the order of their UTF-8 bytes, strings
    /// escaped as `CanonicalWriter` does. Nil when part of it is not JSON (another type, a
    /// number that is not finite).
    public static func encode(_ value: Any) -> [UInt8]? {
        var out: [UInt8] = []
        return append(value, to: &out) ? out : nil
    }

    private static func append(_ value: Any, to out: inout [UInt8]) -> Bool {
        switch value {
        case let string as String:
            CanonicalWriter.appendString(string, to: &out)
        case let bool as Bool:
            CanonicalWriter.appendBool(bool, to: &out)
        case let integer as Int:
            CanonicalWriter.appendInteger(integer, to: &out)
        case let number as Double:
            guard number.isFinite else { return false }
            // An integral double as an integer (`3`, not `3.0`), as JSON readers expect.
            if number == number.rounded(), abs(number) < 9_007_199_254_740_992 {
                CanonicalWriter.appendInteger(Int(number), to: &out)
            } else {
                out += Array("\(number)".utf8)
            }
        case is Null:
            CanonicalWriter.appendNull(to: &out)
        case let object as [String: Any]:
            out.append(UInt8(ascii: "{"))
            for (index, key) in object.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(key, to: &out)
                out.append(UInt8(ascii: ":"))
                guard append(object[key]!, to: &out) else { return false }
            }
            out.append(UInt8(ascii: "}"))
        case let array as [Any]:
            out.append(UInt8(ascii: "["))
            for (index, element) in array.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                guard append(element, to: &out) else { return false }
            }
            out.append(UInt8(ascii: "]"))
        default:
            return false
        }
        return true
    }
}
