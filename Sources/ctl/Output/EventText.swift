/// A stored event as one line for a person: seq (when it has one), id, entity, kind, what
/// changed, who.
enum EventText {
    static func line(_ event: [String: Any]) -> String {
        let kind = event["kind"] as? String ?? "?"
        var words = [event["id"] as? String ?? "?", event["entity"] as? String ?? "?", kind]
        if let seq = event["seq"] as? Int { words.insert(String(seq), at: 0) }
        switch kind {
        case "status":
            words.append(event["status"].map(argument) ?? "?")
        case "edit":
            let fields = event["fields"] as? [String: Any] ?? [:]
            words += fields.keys.sorted().map { name in
                let value = fields[name]!
                return value is String ? "\(name)=\(argument(value))" : "\(name):=\(RawJSON.text(value))"
            }
        case "add", "remove":
            words.append(event["set"] as? String ?? "?")
            if let element = event["element"] {
                words.append(element is String ? argument(element) : ":=" + RawJSON.text(element))
            }
        default:
            break
        }
        if let by = event["by"] as? String { words.append("(by \(by))") }
        return words.joined(separator: "  ")
    }

    /// A string as it would be typed after `=`: bare when it is one plain word, else quoted.
    static func argument(_ value: Any) -> String {
        guard let string = value as? String else { return RawJSON.text(value) }
        let plain =
            !string.isEmpty
            && !string.unicodeScalars.contains {
                $0.properties.isWhitespace || $0 == "\"" || $0 == "\\" || $0 == "'" || $0.value < 0x20
            }
            && !string.hasPrefix(":=")
        return plain ? string : RawJSON.text(string)
    }
}
