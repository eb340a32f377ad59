import EventStore
import Projections
import Wire

/// `dead_letters.retry` and `dead_letters.drop`: dead letters a person acts on, on the writer.
extension Methods {
    /// `{"ids":[...]}` → `{"stored":[ids],"still_invalid":[{"id","reason","message"}]}`.
    func retryDeadLetters(_ request: Request) throws -> [UInt8] {
        let ids = try deadLetterIDs(request, method: "dead_letters.retry")
        let result = try writer.perform(RetryDeadLettersJob(ids), from: -6)
        var out = JSONWriter()
        out.beginObject()
        out.key("stored")
        out.beginArray()
        for id in result.stored { out.string(id.description) }
        out.endArray()
        out.key("still_invalid")
        out.beginArray()
        for item in result.stillInvalid {
            out.beginObject()
            out.member("id", item.id.description)
            out.member("reason", item.reason)
            out.member("message", item.message)
            out.endObject()
        }
        out.endArray()
        out.endObject()
        return out.bytes
    }

    /// `{"ids":[...]}` → `{"dropped":N}`.
    func dropDeadLetters(_ request: Request) throws -> [UInt8] {
        let ids = try deadLetterIDs(request, method: "dead_letters.drop")
        var out = JSONWriter()
        out.beginObject()
        out.member("dropped", try writer.perform(DropDeadLettersJob(ids), from: -7))
        out.endObject()
        return out.bytes
    }

    /// The `ids` parameter: 1 to `EventLog.maxDeadLetterIDsPerCall` keys or event ids.
    private func deadLetterIDs(_ request: Request, method: String) throws(RPCError) -> [ULID] {
        let params = try Params(request)
        guard let elements = try params.array("ids"), !elements.isEmpty else {
            throw RPCError.invalidParams(
                "\(method) takes \"ids\": the keys or event ids of dead letters (dead_letters lists them)")
        }
        let limit = EventLog.maxDeadLetterIDsPerCall
        guard elements.count <= limit else {
            throw RPCError.invalidParams(
                "\(method) takes at most \(limit) ids per call, and was given \(elements.count): send them in several calls (evctl dead-letters \(method == "dead_letters.retry" ? "retry" : "drop") --all does)"
            )
        }
        var ids: [ULID] = []
        for element in elements {
            ids.append(try Methods.id(element, being: "an id: each is a dead letter's key or its event id"))
        }
        return ids
    }

    /// The id an element of an `ids` array holds (a JSON string of 26 characters of
    /// Crockford base32); else `invalid_params` saying it is not `what`.
    static func id(_ element: [UInt8], being what: String) throws(RPCError) -> ULID {
        var scanner = JSONScanner(element)
        guard element.first == UInt8(ascii: "\""), let text = try? scanner.readString(), let id = ULID(text) else {
            throw RPCError.invalidParams(
                "\"ids\" holds \(String(decoding: element.prefix(40), as: UTF8.self)), which is not \(what) (26 characters of Crockford base32)"
            )
        }
        return id
    }
}
