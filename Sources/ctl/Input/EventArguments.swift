import Arguments
import Projections

/// Reads the words after `evctl append ENTITY` (and `evctl resolve ENTITY`) into the
/// members of an input event.
enum EventArguments {
    /// `name=text` (a string) or `name:=JSON` (any JSON value) → the name and the value's JSON text.
    static func field(_ word: String) throws(UsageError) -> (name: String, value: [UInt8]) {
        guard let equals = word.firstIndex(of: "=") else {
            throw UsageError("'\(word)' is not NAME=TEXT or NAME:=JSON")
        }
        var name = String(word[..<equals])
        let text = String(word[word.index(after: equals)...])
        let isJSON = name.hasSuffix(":")
        if isJSON { name.removeLast() }
        if let problem = problem(withFieldName: name) { throw UsageError(problem) }
        if isJSON {
            return (name, try json(text, for: name))
        }
        var value: [UInt8] = []
        CanonicalWriter.appendString(text, to: &value)
        return (name, value)
    }

    /// The value of `text` as JSON, or a usage error saying where it is wrong.
    static func json(_ text: String, for what: String) throws(UsageError) -> [UInt8] {
        let bytes = Array(text.utf8)
        if let problem = RawJSON.problem(with: bytes) {
            throw UsageError(
                "the value of \(what) is not JSON (\(problem)); write \(what)=TEXT for a string, or quote the JSON")
        }
        return bytes
    }

    /// `text` as a string element, or the JSON after a leading `:=`.
    static func element(_ word: String) throws(UsageError) -> [UInt8] {
        if word.hasPrefix(":=") { return try json(String(word.dropFirst(2)), for: "the element") }
        var value: [UInt8] = []
        CanonicalWriter.appendString(word, to: &value)
        return value
    }

    /// The `fields` object of an edit from NAME=TEXT / NAME:=JSON words.
    static func fields(_ words: [String]) throws(UsageError) -> (object: JSONObjectWriter, names: [String]) {
        var object = JSONObjectWriter()
        var names: [String] = []
        for word in words {
            let (name, value) = try field(word)
            guard !names.contains(name) else { throw UsageError("the field \(name) is given twice") }
            names.append(name)
            object.add(name, json: value)
        }
        return (object, names)
    }

    /// Why `name` cannot be a field name (`[A-Za-z_][A-Za-z0-9_.-]{0,127}`), or nil.
    static func problem(withFieldName name: String) -> String? {
        let bytes = Array(name.utf8)
        func letter(_ b: UInt8) -> Bool {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(b)
                || b == UInt8(ascii: "_")
        }
        func digit(_ b: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) }
        guard let first = bytes.first else { return "a field needs a name before its '='" }
        guard letter(first), bytes.count <= 128,
            bytes.allSatisfy({ letter($0) || digit($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") })
        else {
            return "'\(name)' is not a field name: a letter or _, then up to 127 letters, digits, _ . or -"
        }
        return nil
    }
}
