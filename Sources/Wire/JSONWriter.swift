import Projections

/// Builds a JSON text by appending members; for responses, where the shape is known and
/// most values are already JSON bytes.
package struct JSONWriter {
    package var bytes: [UInt8] = []
    /// Whether the next member or element needs a comma before it.
    private var needsComma = false

    package init(capacity: Int = 256) { bytes.reserveCapacity(capacity) }

    package mutating func beginObject() {
        separate()
        bytes.append(UInt8(ascii: "{"))
        needsComma = false
    }

    package mutating func endObject() {
        bytes.append(UInt8(ascii: "}"))
        needsComma = true
    }

    package mutating func beginArray() {
        separate()
        bytes.append(UInt8(ascii: "["))
        needsComma = false
    }

    package mutating func endArray() {
        bytes.append(UInt8(ascii: "]"))
        needsComma = true
    }

    /// A member's key; the value follows with one of the value calls.
    package mutating func key(_ name: StaticString) {
        separate()
        CanonicalWriter.appendKey(name, to: &bytes)  // with its colon
        needsComma = false
    }

    package mutating func key(_ name: String) {
        separate()
        CanonicalWriter.appendString(name, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        needsComma = false
    }

    package mutating func string(_ value: String) {
        separate()
        CanonicalWriter.appendString(value, to: &bytes)
        needsComma = true
    }

    package mutating func int(_ value: Int) {
        separate()
        CanonicalWriter.appendInteger(value, to: &bytes)
        needsComma = true
    }

    package mutating func bool(_ value: Bool) {
        separate()
        CanonicalWriter.appendBool(value, to: &bytes)
        needsComma = true
    }

    /// A number with at most three decimals (`12.5`, `0.017`); a value that is not finite,
    /// which JSON cannot hold, as `null`.
    package mutating func number(_ value: Double) {
        guard value.isFinite else { return null() }
        separate()
        let rounded = (value * 1000).rounded() / 1000
        bytes.append(contentsOf: Array((rounded == 0 ? 0 : rounded).description.utf8))
        needsComma = true
    }

    package mutating func null() {
        separate()
        CanonicalWriter.appendNull(to: &bytes)
        needsComma = true
    }

    /// A value that is already JSON text.
    package mutating func raw(_ json: [UInt8]) {
        separate()
        bytes.append(contentsOf: json)
        needsComma = true
    }

    /// A value that `write` appends (JSON already), in place rather than copied in.
    package mutating func raw<Failure: Error>(_ write: (inout [UInt8]) throws(Failure) -> Void) throws(Failure) {
        separate()
        try write(&bytes)
        needsComma = true
    }

    package mutating func stringOrNull(_ value: String?) {
        if let value { string(value) } else { null() }
    }

    // MARK: Members: a key and its value in one call

    package mutating func member(_ name: StaticString, _ value: String) {
        key(name)
        string(value)
    }

    package mutating func member(_ name: StaticString, _ value: String?) {
        key(name)
        stringOrNull(value)
    }

    package mutating func member(_ name: StaticString, _ value: Int) {
        key(name)
        int(value)
    }

    package mutating func member(_ name: StaticString, _ value: Double) {
        key(name)
        number(value)
    }

    package mutating func member(_ name: StaticString, _ value: Bool) {
        key(name)
        bool(value)
    }

    /// `{"<name>":[items...],"next":cursor-or-null}`: one page of a listing, each item
    /// written by `item`.
    package static func page<Item>(
        _ name: StaticString, _ items: some Sequence<Item>, next: String?, capacity: Int = 256,
        item: (inout JSONWriter, Item) -> Void
    ) -> [UInt8] {
        var out = JSONWriter(capacity: capacity)
        out.beginObject()
        out.key(name)
        out.beginArray()
        for element in items { item(&out, element) }
        out.endArray()
        out.member("next", next)
        out.endObject()
        return out.bytes
    }

    private mutating func separate() {
        if needsComma { bytes.append(UInt8(ascii: ",")) }
    }
}
