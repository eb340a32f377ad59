import Projections

/// Builds a JSON text by appending members; for responses, where the shape is known and
/// most values are already JSON bytes.
struct JSONWriter {
    var bytes: [UInt8] = []
    /// Whether the next member or element needs a comma before it.
    private var needsComma = false

    init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// A member's key; the value follows with one of the value calls.
    mutating func key(_ name: StaticString) {
        separate()
        CanonicalWriter.appendKey(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    mutating func key(_ name: String) {
        separate()
        CanonicalWriter.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    mutating func string(_ value: String) {
        separate()
        CanonicalWriter.appendString(value, to: &bytes)
        needsComma = true
    }

    mutating func int(_ value: Int) {
        separate()
        CanonicalWriter.appendInteger(value, to: &bytes)
        needsComma = true
    }

    mutating func bool(_ value: Bool) {
        separate()
        CanonicalWriter.appendBool(value, to: &bytes)
        needsComma = true
    }

    mutating func null() {
        separate()
        CanonicalWriter.appendNull(to: &bytes)
        needsComma = true
    }

    /// A value that is already JSON text.
    mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    mutating func stringOrNull(_ value: String?) {
        if let value { string(value) } else { null() }
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }
}
