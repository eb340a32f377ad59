import EventStore
import Projections

/// A method's named parameters, read from `params` with the names the method takes;
/// any other name is an invalid-params error that lists the right ones.
package struct Params {
    package let method: String
    /// Each parameter given, its name and its value as canonical JSON (a handful at most: a
    /// list searched in order costs less than hashing the names).
    private var values: [(name: ArraySlice<UInt8>, value: [UInt8])] = []

    /// Reads the parameters of `method`; those named in `verbatim` are kept as sent rather
    /// than made canonical (a large array of events is then scanned once, not rewritten).
    package init(_ params: Request.Params, method: String, accepts names: [String], verbatim: [String] = [])
        throws(RPCError)
    {
        self.method = method
        switch params {
        case .none: return
        case .invalid(let error): throw error
        case .events: throw .invalidParams("\(method) does not take events")
        case .raw(let line, let offset):
            var scanner = JSONScanner(line, from: offset)
            var unknown: String?
            var values: [(name: ArraySlice<UInt8>, value: [UInt8])] = []
            do {
                try scanner.readObject { (key, scanner) throws(JSONError) in
                    if !names.contains(where: { $0.utf8.elementsEqual(key) }) {
                        unknown = unknown ?? String(decoding: key, as: UTF8.self)
                    }
                    if verbatim.contains(where: { $0.utf8.elementsEqual(key) }) {
                        let start = scanner.offset
                        try scanner.skipValue()
                        values.append((key, Array(line[start..<scanner.offset])))
                        return
                    }
                    var value: [UInt8] = []
                    try scanner.canonicalValue(into: &value)
                    values.append((key, value))
                }
            } catch {
                throw .invalidParams(error.description)
            }
            if let unknown {
                let takes = names.isEmpty ? "no parameters" : names.map { "\"\($0)\"" }.joined(separator: ", ")
                throw .invalidParams("unknown parameter \"\(unknown)\"; \(method) takes \(takes)")
            }
            self.values = values
        }
    }

    /// The value of the parameter `name` as canonical JSON; nil when absent or null.
    private func value(_ name: String) -> [UInt8]? {
        guard let value = values.first(where: { $0.name.elementsEqual(name.utf8) })?.value,
            value != RequestParser.nullID
        else { return nil }
        return value
    }

    /// A string parameter; absent or null gives nil.
    package func string(_ name: String) throws(RPCError) -> String? {
        try stringBytes(name).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A string parameter as its UTF-8 bytes; absent or null gives nil.
    package func stringBytes(_ name: String) throws(RPCError) -> [UInt8]? {
        guard let value = value(name) else { return nil }
        guard value.first == UInt8(ascii: "\"") else { throw .invalidParams("\"\(name)\" must be a string") }
        var scanner = JSONScanner(value)
        do { return try scanner.readStringBytes() } catch { throw .invalidParams(error.description) }
    }

    /// An array parameter, each element as JSON (as sent when the parameter is `verbatim`);
    /// absent or null gives nil.
    package func array(_ name: String) throws(RPCError) -> [[UInt8]]? {
        guard let value = value(name) else { return nil }
        guard value.first == UInt8(ascii: "[") else { throw .invalidParams("\"\(name)\" must be an array") }
        var scanner = JSONScanner(value)
        var elements: [[UInt8]] = []
        do {
            try scanner.readArray { (scanner) throws(JSONError) in
                scanner.skipWhitespace()
                let start = scanner.offset
                try scanner.skipValue()
                elements.append(Array(value[start..<scanner.offset]))
            }
        } catch {
            throw .invalidParams(error.description)
        }
        return elements
    }

    package func bool(_ name: String) throws(RPCError) -> Bool? {
        guard let value = value(name) else { return nil }
        switch value {
        case Array("true".utf8): return true
        case Array("false".utf8): return false
        default: throw .invalidParams("\"\(name)\" must be true or false")
        }
    }

    package func int(_ name: String, in range: ClosedRange<Int>) throws(RPCError) -> Int? {
        guard let value = value(name) else { return nil }
        guard let number = Int(String(decoding: value, as: UTF8.self)), range.contains(number) else {
            throw .invalidParams("\"\(name)\" must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// A seq to resume after (`log`, `watch`): a non-negative integer, 0 for the start. An
    /// event id, which 0.4 took here, is refused with what to pass instead.
    package func seq(_ name: String) throws(RPCError) -> UInt64? {
        guard let value = value(name) else { return nil }
        if value.first == UInt8(ascii: "\"") {
            throw .invalidParams(
                "\"\(name)\" takes a seq (a number: the \"seq\" of the last event you saw, or 0 for the start), not an event id: feeds resume by seq, which covers events that arrive later with older ids"
            )
        }
        guard value.count <= 20, value.allSatisfy({ (0x30...0x39).contains($0) }),
            let seq = UInt64(String(decoding: value, as: UTF8.self))
        else {
            throw .invalidParams("\"\(name)\" must be a seq: an integer from 0 (the start) up")
        }
        return seq
    }

    package func entity(_ name: String) throws(RPCError) -> EntityKey? {
        guard let bytes = try stringBytes(name) else { return nil }
        do { return try Validation.entity(bytes) } catch { throw .invalidParams("\"\(name)\": \(error.message)") }
    }

    package func id(_ name: String) throws(RPCError) -> ULID? {
        guard let text = try string(name) else { return nil }
        guard let id = ULID(text) else {
            throw .invalidParams("\"\(name)\" must be an event id: 26 characters of Crockford base32")
        }
        return id
    }

    /// An entity type, `[a-z][a-z0-9_-]{0,63}`.
    package func type(_ name: String) throws(RPCError) -> String? {
        guard let text = try string(name) else { return nil }
        do {
            _ = try Validation.entity(text + "/x")
        } catch {
            throw .invalidParams("\"\(name)\" must be an entity type: [a-z][a-z0-9_-]{0,63}")
        }
        guard !text.contains("/") else { throw .invalidParams("\"\(name)\" is a type, without \"/\"") }
        return text
    }
}
