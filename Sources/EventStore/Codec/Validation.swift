import Projections

/// The syntax rules of the event model, each failing with a message a person can act on.
public enum Validation {
    public static let maxTypeBytes = 64
    public static let maxIDBytes = 200
    public static let maxNameBytes = 128
    public static let maxKeyBytes = 128
    public static let maxByBytes = 128
    public static let maxStatusBytes = 128
    /// A decision's reason: a sentence or two for the person whose proposal it answers.
    public static let maxReasonBytes = 1024

    /// `TYPE/ID`: TYPE matches `[a-z][a-z0-9_-]{0,63}`; ID is 1...200 bytes of UTF-8 with no
    /// control characters (C0, DEL, C1) and may contain `/`.
    public static func entity(_ bytes: [UInt8]) throws(EventStoreError) -> EntityKey {
        try check(entity: bytes[...])
        return EntityKey(validated: bytes)
    }

    /// As `entity(_:)`, from a part of a larger text (a member read in place).
    public static func entity(_ bytes: ArraySlice<UInt8>) throws(EventStoreError) -> EntityKey {
        try check(entity: bytes)
        return EntityKey(validated: Array(bytes))
    }

    private static func check(entity bytes: ArraySlice<UInt8>) throws(EventStoreError) {
        var shown: String { String(decoding: bytes.prefix(80), as: UTF8.self) }
        guard let slash = bytes.firstIndex(of: UInt8(ascii: "/")) else {
            throw .invalid(
                "entity \"\(shown)\" has no '/': write it as TYPE/ID, for example job/01JD3Q8R5N8X6ZK2W7Y4V9B3TQ")
        }
        let type = bytes[..<slash]
        guard !type.isEmpty, type.count <= maxTypeBytes, let first = type.first,
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(first),
            type.allSatisfy({ isLowerAlnum($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") })
        else {
            throw .invalid(
                "entity type \"\(String(decoding: type.prefix(80), as: UTF8.self))\" must be 1 to 64 characters: a lower-case letter, then lower-case letters, digits, '_' or '-'"
            )
        }
        let id = bytes[(slash + 1)...]
        guard !id.isEmpty else { throw .invalid("entity \"\(shown)\" has an empty ID after the '/'") }
        guard id.count <= maxIDBytes else {
            throw .invalid("entity ID is \(id.count) bytes; at most \(maxIDBytes) are allowed")
        }
        if let problem = controlCharacterProblem(id) {
            throw .invalid("entity ID \(problem)")
        }
    }

    public static func entity(_ text: String) throws(EventStoreError) -> EntityKey {
        try entity(Array(text.utf8))
    }

    /// Field and set names: `[A-Za-z_][A-Za-z0-9_.-]{0,127}`.
    public static func name(_ bytes: some RandomAccessCollection<UInt8>, what: String) throws(EventStoreError) -> String
    {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let first = bytes.first, bytes.count <= maxNameBytes,
            isAlpha(first) || first == UInt8(ascii: "_"),
            bytes.allSatisfy({
                isAlpha($0) || isDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
                    || $0 == UInt8(ascii: "-")
            })
        else {
            let shown = String(text.prefix(80))
            throw .invalid(
                "\(what) \"\(shown)\" must be 1 to 128 characters: a letter or '_', then letters, digits, '_', '.' or '-'"
            )
        }
        return text
    }

    /// Free text up to `limit` bytes without control characters (status values, `by`, keys).
    public static func text(_ bytes: ArraySlice<UInt8>, what: String, limit: Int, allowEmpty: Bool = false)
        throws(EventStoreError) -> String
    {
        guard allowEmpty || !bytes.isEmpty else { throw .invalid("\(what) must not be empty") }
        guard bytes.count <= limit else {
            throw .invalid("\(what) is \(bytes.count) bytes; at most \(limit) are allowed")
        }
        if let problem = controlCharacterProblem(bytes) { throw .invalid("\(what) \(problem)") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Describes the first C0, DEL or C1 control character, or returns nil.
    static func controlCharacterProblem(_ bytes: ArraySlice<UInt8>) -> String? {
        // Input is valid UTF-8 already: C1 controls are U+0080...U+009F, encoded C2 80...C2 9F.
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte < 0x20 || byte == 0x7F {
                return "contains the control character U+\(hex4(UInt32(byte))) at byte \(index - bytes.startIndex)"
            }
            if byte == 0xC2, index + 1 < bytes.endIndex, (0x80...0x9F).contains(bytes[index + 1]) {
                return
                    "contains the control character U+\(hex4(UInt32(bytes[index + 1]))) at byte \(index - bytes.startIndex)"
            }
            index += 1
        }
        return nil
    }

    static func hex4(_ value: UInt32) -> String {
        let digits = String(value, radix: 16, uppercase: true)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    static func isLowerAlnum(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || isDigit(b)
    }
    static func isAlpha(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
    }
    static func isDigit(_ b: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) }
}
