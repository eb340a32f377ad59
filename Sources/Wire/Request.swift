// Wire: the JSON-RPC wire — requests parsed from lines, answers and events encoded, error
// codes; it knows the store's types and nothing of sockets, threads or methods' work.

import EventStore
import Projections

/// One JSON-RPC 2.0 request, decoded from a line.
package struct Request: Sendable {
    /// The id as JSON text (a string, a number or null), echoed in the response; nil for a
    /// notification, which gets no response.
    package var id: [UInt8]?
    package var method: String
    package var params: Params

    package enum Params: Sendable {
        /// No `params` member.
        case none
        /// `params` starts at this offset of the line: each method reads its own.
        case raw(line: [UInt8], offset: Int)
        /// `append`'s events, decoded while the line was parsed (the hot path: once).
        case events([InputEvent])
        /// `params` is present but cannot be what the method takes.
        case invalid(RPCError)
    }

    package var isNotification: Bool { id == nil }
}

/// What a line holds: one request or a batch, each element a request or the error to
/// answer it with.
package enum ParsedLine: Sendable {
    case single(Element)
    case batch([Element])
    /// The line is not JSON, or an empty batch: one error answers it (id null).
    case failed(RPCError)

    package enum Element: Sendable {
        case request(Request)
        /// Not a valid request object: answered with this error and the id when one
        /// could be read, else null.
        case invalid(id: [UInt8], RPCError)
    }
}

package enum RequestParser {
    package static let nullID = Array("null".utf8)
    /// The method whose events are decoded as the line is parsed (the method table names
    /// it by this).
    package static let appendMethod = "append"

    /// Parses a line of the socket protocol. A batch of more than `maxBatch` requests is
    /// refused as a whole, before any of them is decoded.
    package static func parse(_ line: [UInt8], maxBatch: Int = .max) -> ParsedLine {
        var scanner = JSONScanner(line)
        switch scanner.peek() {
        case UInt8(ascii: "["):
            var offsets: [Int] = []
            var count = 0
            do {
                try scanner.readArray { (scanner) throws(JSONError) in
                    scanner.skipWhitespace()
                    count += 1
                    if count <= maxBatch { offsets.append(scanner.offset) }
                    try scanner.skipValue()
                }
                try scanner.expectEnd()
            } catch {
                return .failed(.parseError(error.description))
            }
            if offsets.isEmpty { return .failed(.invalidRequest("an empty batch: send at least one request")) }
            if count > maxBatch {
                return .failed(
                    .invalidRequest(
                        "a batch of \(count) requests is over the limit of \(maxBatch) (max_batch_requests); split it into smaller batches",
                        reason: "too_large"))
            }
            return .batch(offsets.map { element(line, at: $0).element })
        case UInt8(ascii: "{"):
            // Validate the rest after the object only when the object itself parsed.
            let (element, end) = element(line, at: scanner.offset)
            if case .invalid(_, let error) = element, error.code == RPCError.parseErrorCode { return .failed(error) }
            var rest = JSONScanner(line, from: end)
            do { try rest.expectEnd() } catch { return .failed(.parseError(error.description)) }
            return .single(element)
        case nil:
            return .failed(.parseError("an empty line"))
        default:
            do {
                try scanner.skipValue()
                try scanner.expectEnd()
            } catch {
                return .failed(.parseError(error.description))
            }
            return .failed(.invalidRequest("a request is a JSON object (or an array of them for a batch)"))
        }
    }

    /// Decodes the request object at `offset`.
    package static func element(_ line: [UInt8], at offset: Int) -> (element: ParsedLine.Element, end: Int) {
        var end = offset
        let element = element(line, at: offset, end: &end)
        return (element, end)
    }

    package static func element(_ line: [UInt8], at offset: Int, end: inout Int) -> ParsedLine.Element {
        var scanner = JSONScanner(line, from: offset)
        var versionIsValid = false
        var method: String?
        var id: [UInt8]?
        var idError: String?
        var params: Request.Params = .none
        var isObject = true
        do {
            guard scanner.peek() == UInt8(ascii: "{") else {
                isObject = false
                try scanner.skipValue()
                return .invalid(id: nullID, .invalidRequest("a request is a JSON object"))
            }
            try scanner.readObject { (key, scanner) throws(JSONError) in
                // Compared as bytes: a String per key would be validated as UTF-8 each time.
                if key.elementsEqual("jsonrpc".utf8) {
                    // Compared in place: the only version there is needs no string of its own.
                    if scanner.peek() == UInt8(ascii: "\"") {
                        versionIsValid = try scanner.readStringSlice().elementsEqual("2.0".utf8)
                    } else {
                        try scanner.skipValue()
                    }
                } else if key.elementsEqual("method".utf8) {
                    if scanner.peek() == UInt8(ascii: "\"") {
                        // A short name is a small string, made from the line without an array.
                        method = String(decoding: try scanner.readStringSlice(), as: UTF8.self)
                    } else {
                        try scanner.skipValue()
                        method = ""
                    }
                } else if key.elementsEqual("id".utf8) {
                    var value: [UInt8] = []
                    let first = scanner.peek()
                    try scanner.canonicalValue(into: &value)
                    switch first ?? 0 {
                    case UInt8(ascii: "\""), UInt8(ascii: "n"), UInt8(ascii: "-"),
                        UInt8(ascii: "0")...UInt8(ascii: "9"):
                        id = value
                    default:
                        idError = "\"id\" must be a string, a number or null"
                    }
                } else if key.elementsEqual("params".utf8) {
                    params = try readParams(&scanner, line: line, method: method)
                } else {
                    try scanner.skipValue()
                }
            }
            end = scanner.offset
        } catch {
            if !isObject { return .invalid(id: nullID, .invalidRequest("a request is a JSON object")) }
            return .invalid(id: nullID, .parseError(error.description))
        }
        // The method may come after params: decode append's events now if so.
        if method == RequestParser.appendMethod, case .raw(_, let offset) = params {
            var again = JSONScanner(line, from: offset)
            params = decodeEvents(&again, line: line)
        }
        let echo = idError == nil ? (id ?? nullID) : nullID
        if let idError { return .invalid(id: echo, .invalidRequest(idError)) }
        guard versionIsValid else {
            return .invalid(id: echo, .invalidRequest("\"jsonrpc\" must be \"2.0\""))
        }
        guard let method, !method.isEmpty else {
            return .invalid(id: echo, .invalidRequest("\"method\" must be a non-empty string"))
        }
        return .request(Request(id: id, method: method, params: params))
    }

    /// Reads `params` (the scanner is at its value), leaving the scanner after it.
    package static func readParams(_ scanner: inout JSONScanner, line: [UInt8], method: String?) throws(JSONError)
        -> Request.Params
    {
        let start = scanner.offset
        switch scanner.peek() {
        case UInt8(ascii: "{"):
            if method == RequestParser.appendMethod {
                let decoded = decodeEvents(&scanner, line: line)
                // After a failed decode the scanner is mid-value: skip the value from its start.
                if case .invalid = decoded {
                    scanner = JSONScanner(line, from: start)
                    try scanner.skipValue()
                }
                return decoded
            }
            try scanner.skipValue()
            return .raw(line: line, offset: start)
        case UInt8(ascii: "["):
            try scanner.skipValue()
            return .invalid(.invalidParams("params must be an object of named parameters"))
        default:
            try scanner.skipValue()
            return .invalid(.invalidRequest("\"params\" must be an object or an array"))
        }
    }

    /// Decodes `{"events":[input event, ...]}` at the scanner.
    package static func decodeEvents(_ scanner: inout JSONScanner, line: [UInt8]) -> Request.Params {
        let start = scanner.offset
        var events: [InputEvent] = []
        var seenEvents = false
        var failure: RPCError?
        do throws(JSONError) {
            try scanner.readObject { (key, scanner) throws(JSONError) in
                guard key.elementsEqual("events".utf8) else {
                    failure =
                        failure
                        ?? .invalidParams(
                            "unknown parameter \"\(String(decoding: key, as: UTF8.self))\"; append takes \"events\"")
                    try scanner.skipValue()
                    return
                }
                seenEvents = true
                guard scanner.peek() == UInt8(ascii: "[") else {
                    failure = failure ?? .invalidParams("\"events\" must be an array of events")
                    try scanner.skipValue()
                    return
                }
                try scanner.readArray { (scanner) throws(JSONError) in
                    if failure != nil {
                        try scanner.skipValue()
                        return
                    }
                    let elementStart = scanner.offset
                    do throws(EventStoreError) {
                        events.append(try EventCodec.decodeInput(&scanner))
                    } catch {
                        // A syntax error inside the event is the line's, not the event's.
                        var check = JSONScanner(line, from: elementStart)
                        try check.skipValue()
                        failure = RPCError(error.at(index: events.count))
                        scanner = check
                    }
                }
            }
        } catch {
            // Syntax: let the caller's scan report it as a parse error.
            var check = JSONScanner(line, from: start)
            if (try? check.skipValue()) == nil { return .invalid(.parseError(error.description)) }
            return .invalid(.invalidParams(error.description))
        }
        if let failure { return .invalid(failure) }
        guard seenEvents else { return .invalid(.invalidParams("append takes \"events\": an array of events")) }
        return .events(events)
    }
}
