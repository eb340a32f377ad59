import EventStore
import Projections

/// Events in the input form, as a client sends them: what a node hands to a type's
/// authority is the append its client made, written again from the decoded events.
package enum InputJSON {
    /// The JSON-RPC request line of an `append` of `events` (id 1), newline included.
    package static func appendRequest(_ events: [InputEvent]) -> [UInt8] {
        var out = Array(#"{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":["#.utf8)
        for (index, event) in events.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            append(event, to: &out)
        }
        out.append(contentsOf: Array("]}}\n".utf8))
        return out
    }

    /// One event as an element of `events`: decoding it gives `event` again.
    package static func append(_ event: InputEvent, to out: inout [UInt8]) {
        func member(_ name: String) {
            out.append(UInt8(ascii: ","))
            CanonicalWriter.appendString(name, to: &out)
            out.append(UInt8(ascii: ":"))
        }
        out.append(contentsOf: Array(#"{"entity":"#.utf8))
        CanonicalWriter.appendString(event.entity.description, to: &out)
        member("kind")
        CanonicalWriter.appendString(event.change.kind.rawValue, to: &out)
        switch event.change {
        case .edit(let fields):
            member("fields")
            out.append(UInt8(ascii: "{"))
            for (index, field) in fields.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(field.name, to: &out)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: field.value.bytes)
            }
            out.append(UInt8(ascii: "}"))
        case .status(let status):
            member("status")
            CanonicalWriter.appendString(status, to: &out)
        case .add(let set, let element), .remove(let set, let element):
            member("set")
            CanonicalWriter.appendString(set, to: &out)
            member("element")
            out.append(contentsOf: element.bytes)
        case .incr(let counter, let amount):
            member("counter")
            CanonicalWriter.appendString(counter, to: &out)
            member("amount")
            out.append(contentsOf: Array(String(amount).utf8))
        case .delete, .restore:
            break
        }
        if let key = event.key {
            member("key")
            CanonicalWriter.appendString(key, to: &out)
        }
        if let by = event.by {
            member("by")
            CanonicalWriter.appendString(by, to: &out)
        }
        if let at = event.at {
            member("at")
            out.append(contentsOf: at.bytes)
        }
        if let ifMatch = event.ifMatch {
            member("if_match")
            out.append(contentsOf: Array(String(ifMatch).utf8))
        }
        if event.resolve {
            member("resolve")
            out.append(contentsOf: Array("true".utf8))
        }
        out.append(UInt8(ascii: "}"))
    }
}
