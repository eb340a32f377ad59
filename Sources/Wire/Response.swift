import EventStore
import Projections

/// The response lines of JSON-RPC 2.0, written straight into bytes: a result already
/// encoded, an error, and an append's result (the hot path, so without an intermediate
/// value). Each line ends with its newline.
package enum Response {
    package static func line(id: [UInt8], result: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(result.count + id.count + 32)
        begin(id: id, member: #","result":"#, into: &out)
        out.append(contentsOf: result)
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }

    package static func line(id: [UInt8], error: RPCError) -> [UInt8] {
        var out: [UInt8] = []
        begin(id: id, member: #","error":"#, into: &out)
        out.append(contentsOf: error.json())
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }

    /// `{"ids":[...],"versions":{...},"revs":{...},"appended":n}` written straight into the response line.
    package static func line(id: [UInt8], append result: Result<AppendResult, EventStoreError>) -> [UInt8] {
        line(id: id, append: result.mapError(RPCError.init))
    }

    package static func line(id: [UInt8], append result: Result<AppendResult, RPCError>) -> [UInt8] {
        switch result {
        case .failure(let error):
            return line(id: id, error: error)
        case .success(let appended):
            var out: [UInt8] = []
            out.reserveCapacity(96 + id.count + appended.ids.count * 29 + appended.versions.count * 120)
            begin(id: id, member: #","result":{"ids":["#, into: &out)
            for (index, id) in appended.ids.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                id.appendJSON(to: &out)
            }
            append(#"],"versions":"#, to: &out)
            members(appended.versions, into: &out) { version, out in version.appendJSON(to: &out) }
            append(#","revs":"#, to: &out)
            members(appended.revs, into: &out) { rev, out in CanonicalWriter.appendInteger(Int(clamping: rev), to: &out)
            }
            append(#","appended":"#, to: &out)
            CanonicalWriter.appendInteger(appended.appended, to: &out)
            append("}}\n", to: &out)
            return out
        }
    }

    /// `{"entity":value,...}` in entity order.
    private static func members<Value>(
        _ map: [EntityKey: Value], into out: inout [UInt8], value: (Value, inout [UInt8]) -> Void
    ) {
        out.append(UInt8(ascii: "{"))
        for (index, (entity, item)) in map.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            CanonicalWriter.appendString(utf8: entity.bytes, to: &out)
            out.append(UInt8(ascii: ":"))
            value(item, &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// `{"jsonrpc":"2.0","id":<id>` and then `member`.
    private static func begin(id: [UInt8], member: StaticString, into out: inout [UInt8]) {
        append(#"{"jsonrpc":"2.0","id":"#, to: &out)
        out.append(contentsOf: id)
        append(member, to: &out)
    }

    private static func append(_ text: StaticString, to out: inout [UInt8]) {
        text.withUTF8Buffer { out.append(contentsOf: $0) }
    }
}

extension Response {
    /// A response line read back — another node's answer, handed on to a client: the raw
    /// JSON of its result, or its error; nil for a line that is not a response.
    package static func read(_ line: [UInt8]) -> Result<[UInt8], RPCError>? {
        var scanner = JSONScanner(line)
        var result: [UInt8]?
        var error: RPCError?
        do {
            try scanner.readObject { (key, scanner) throws(JSONError) in
                scanner.skipWhitespace()
                let start = scanner.offset
                try scanner.skipValue()
                if key.elementsEqual("result".utf8) {
                    result = Array(line[start..<scanner.offset])
                } else if key.elementsEqual("error".utf8) {
                    error = RPCError(json: Array(line[start..<scanner.offset]))
                }
            }
            try scanner.expectEnd()
        } catch {
            return nil
        }
        switch (result, error) {
        case (let result?, nil): return .success(result)
        case (nil, let error?): return .failure(error)
        default: return nil
        }
    }
}

extension RPCError {
    /// An `error` member's value as `json()` writes it; one without a code and a message
    /// is an internal error of the node that sent it.
    init(json: [UInt8]) {
        let object = (try? JSONTree.parse(json)) as? [String: Any] ?? [:]
        let data = object["data"] as? [String: Any]
        self.init(
            code: object["code"] as? Int ?? RPCError.internalErrorCode,
            message: object["message"] as? String ?? "the other node's answer carried no message",
            reason: data?["reason"] as? String, index: data?["index"] as? Int)
    }
}
