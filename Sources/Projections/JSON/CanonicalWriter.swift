/// Writes canonical JSON bytes directly: the encoder on every hot path.
///
/// Canonical means: object keys in ascending order of their UTF-8 bytes (the caller
/// writes them in that order), no whitespace, and strings escaped minimally — `"` and `\`
/// and the C0 controls, with `\b \f \n \r \t` short forms and `\u00xx` (lowercase) for the
/// rest; every other character is written as raw UTF-8.
public enum CanonicalWriter {
    public static func appendString(_ value: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        // Most strings need no escaping: copy them in one go.
        let copied = value.utf8.withContiguousStorageIfAvailable { raw -> Bool in
            guard !raw.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else { return false }
            out.append(contentsOf: raw)
            return true
        }
        if copied != true {
            for byte in value.utf8 { appendEscaped(byte, to: &out) }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// Appends raw UTF-8 string content (already validated) as a canonical JSON string.
    public static func appendString(utf8 bytes: [UInt8], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        if bytes.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) {
            for byte in bytes { appendEscaped(byte, to: &out) }
        } else {
            out.append(contentsOf: bytes)
        }
        out.append(UInt8(ascii: "\""))
    }

    static func appendEscaped(_ byte: UInt8, to out: inout [UInt8]) {
        switch byte {
        case 0x22:
            out.append(0x5C)
            out.append(0x22)
        case 0x5C:
            out.append(0x5C)
            out.append(0x5C)
        case 0x08:
            out.append(0x5C)
            out.append(UInt8(ascii: "b"))
        case 0x0C:
            out.append(0x5C)
            out.append(UInt8(ascii: "f"))
        case 0x0A:
            out.append(0x5C)
            out.append(UInt8(ascii: "n"))
        case 0x0D:
            out.append(0x5C)
            out.append(UInt8(ascii: "r"))
        case 0x09:
            out.append(0x5C)
            out.append(UInt8(ascii: "t"))
        case 0..<0x20:
            let hex: [UInt8] = Array("0123456789abcdef".utf8)
            out.append(contentsOf: [0x5C, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        default: out.append(byte)
        }
    }

    /// Appends bytes already in their canonical form, such as a member's name with its
    /// quotes and colon (`"entity":`): one copy, where `appendKey` makes four appends, each
    /// checking the array's uniqueness and capacity again.
    public static func appendLiteral(_ literal: StaticString, to out: inout [UInt8]) {
        literal.withUTF8Buffer { out.append(contentsOf: $0) }
    }

    /// Appends `"key":` — the key must already be in canonical order relative to its siblings.
    public static func appendKey(_ key: StaticString, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { out.append(contentsOf: $0) }
        out.append(UInt8(ascii: "\""))
        out.append(UInt8(ascii: ":"))
    }

    public static func appendInteger(_ value: Int, to out: inout [UInt8]) {
        let magnitude = value.magnitude
        let width = digitCount(magnitude)
        // Room for the sign and the digits at once.
        out.append(addingCapacity: width + (value < 0 ? 1 : 0)) { span in
            if value < 0 { span.append(UInt8(ascii: "-")) }
            appendDigits(magnitude, width: width, to: &span)
        }
    }

    /// How many decimal digits `magnitude` has.
    public static func digitCount(_ magnitude: UInt) -> Int {
        var width = 1
        var scale = magnitude
        while scale >= 10 {
            scale /= 10
            width += 1
        }
        return width
    }

    /// Appends the `width` decimal digits of `magnitude` (`digitCount(magnitude)`), filled
    /// from the last.
    public static func appendDigits(_ magnitude: UInt, width: Int, to span: inout OutputSpan<UInt8>) {
        let start = span.count
        span.append(repeating: UInt8(ascii: "0"), count: width)
        var digits = span.mutableSpan
        var rest = magnitude
        var index = start + width
        repeat {
            index -= 1
            digits[index] = UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest % 10)
            rest /= 10
        } while index > start
    }

    public static func appendBool(_ value: Bool, to out: inout [UInt8]) {
        if value {
            out.append(contentsOf: [0x74, 0x72, 0x75, 0x65])  // true
        } else {
            out.append(contentsOf: [0x66, 0x61, 0x6C, 0x73, 0x65])  // false
        }
    }

    public static func appendNull(to out: inout [UInt8]) {
        out.append(contentsOf: [0x6E, 0x75, 0x6C, 0x6C])
    }
}
