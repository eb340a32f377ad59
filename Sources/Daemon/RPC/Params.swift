import EventStore
import Projections

/// A method's named parameters, read from `params` with the names the method takes;
/// any other name is an invalid-params error that lists the right ones.
struct Params {
    let method: String
    private var values: [String: [UInt8]] = [:]

    init(_ params: Request.Params, method: String, accepts names: [String]) throws(RPCError) {
        self.method = method
        switch params {
        case .none: return
        case .invalid(let error): throw error
        case .events: throw .invalidParams("\(method) does not take events")
        case .raw(let line, let offset):
            var scanner = JSONScanner(line, from: offset)
            var unknown: String?
            var values: [String: [UInt8]] = [:]
            do {
                try scanner.readObject { (key, scanner) throws(JSONError) in
                    let name = String(decoding: key, as: UTF8.self)
                    if !names.contains(name) { unknown = unknown ?? name }
                    var value: [UInt8] = []
                    try scanner.canonicalValue(into: &value)
                    values[name] = value
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

    /// A string parameter; absent or null gives nil.
    func string(_ name: String) throws(RPCError) -> String? {
        guard let value = values[name], value != RequestParser.nullID else { return nil }
        guard value.first == UInt8(ascii: "\"") else { throw .invalidParams("\"\(name)\" must be a string") }
        var scanner = JSONScanner(value)
        do { return try scanner.readString() } catch { throw .invalidParams(error.description) }
    }

    func bool(_ name: String) throws(RPCError) -> Bool? {
        guard let value = values[name], value != RequestParser.nullID else { return nil }
        switch value {
        case Array("true".utf8): return true
        case Array("false".utf8): return false
        default: throw .invalidParams("\"\(name)\" must be true or false")
        }
    }

    func int(_ name: String, in range: ClosedRange<Int>) throws(RPCError) -> Int? {
        guard let value = values[name], value != RequestParser.nullID else { return nil }
        guard let number = Int(String(decoding: value, as: UTF8.self)), range.contains(number) else {
            throw .invalidParams("\"\(name)\" must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    func entity(_ name: String) throws(RPCError) -> EntityKey? {
        guard let text = try string(name) else { return nil }
        do { return try Validation.entity(text) } catch { throw .invalidParams("\"\(name)\": \(error.message)") }
    }

    func id(_ name: String) throws(RPCError) -> ULID? {
        guard let text = try string(name) else { return nil }
        guard let id = ULID(text) else {
            throw .invalidParams("\"\(name)\" must be an event id: 26 characters of Crockford base32")
        }
        return id
    }

    /// An entity type, `[a-z][a-z0-9_-]{0,63}`.
    func type(_ name: String) throws(RPCError) -> String? {
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
