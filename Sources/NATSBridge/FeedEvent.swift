import Projections

/// One event of the daemon's feed, as the bridge publishes it.
struct FeedEvent: Sendable {
    /// This node's commit sequence number for it.
    var seq: UInt64
    /// The event id: the message's `Nats-Msg-Id`, the same on every node.
    var id: String
    /// The node that made it.
    var origin: String
    /// The entity's type, the last token of the subject.
    var type: String
    /// The event's canonical JSON, without the node-local `seq`: the message body, byte for
    /// byte what any node holding the event would publish.
    var body: [UInt8]
}

/// What one line of a `watch` connection says.
enum FeedLine {
    case event(FeedEvent)
    /// The daemon ended the watch (`watch.overflow`): resume after `resumeAfter`.
    case overflow(resumeAfter: UInt64)
    /// A reply to a request (`{"watching":true}`, or an error).
    case reply(id: Int?, error: String?)
    /// A notification the bridge does not use.
    case other
}

extension FeedLine {
    /// Reads one line the daemon sent. Throws for anything that is not JSON-RPC as evstored
    /// speaks it (the bridge then drops the connection and starts again).
    static func parse(_ line: [UInt8]) throws(JSONError) -> FeedLine {
        // Deeper than any event the daemon takes, with the notification around it.
        var scanner = JSONScanner(line, maxDepth: JSONTree.maxDepth)
        var method: ArraySlice<UInt8>?
        var event: FeedEvent?
        var resumeAfter: UInt64?
        var id: Int?
        var error: String?
        var paramsRange: Range<Int>?
        try scanner.readObject { (key, scanner) throws(JSONError) in
            switch String(decoding: key, as: UTF8.self) {
            case "method": method = try scanner.readStringSlice()
            case "params":
                let start = scanner.offset
                try scanner.skipValue()
                paramsRange = start..<scanner.offset
            case "id":
                var text: [UInt8] = []
                try scanner.canonicalValue(into: &text)
                id = Int(String(decoding: text, as: UTF8.self))
            case "error":
                let start = scanner.offset
                try scanner.skipValue()
                error = String(decoding: line[start..<scanner.offset], as: UTF8.self)
            default: try scanner.skipValue()
            }
        }
        try scanner.expectEnd()
        guard let method else { return .reply(id: id, error: error) }
        guard let paramsRange else { return .other }
        switch String(decoding: method, as: UTF8.self) {
        case "event":
            var params = JSONScanner(line, from: paramsRange.lowerBound, maxDepth: JSONTree.maxDepth)
            try params.readObject { (key, scanner) throws(JSONError) in
                guard key.elementsEqual("event".utf8) else { return try scanner.skipValue() }
                event = try FeedEvent.read(line, scanner: &scanner)
            }
            guard let event else {
                throw JSONError("an event notification without \"event\"", at: paramsRange.lowerBound)
            }
            return .event(event)
        case "watch.overflow":
            var params = JSONScanner(line, from: paramsRange.lowerBound, maxDepth: JSONTree.maxDepth)
            try params.readObject { (key, scanner) throws(JSONError) in
                guard key.elementsEqual("resume_after".utf8) else { return try scanner.skipValue() }
                var text: [UInt8] = []
                try scanner.canonicalValue(into: &text)
                resumeAfter = UInt64(String(decoding: text, as: UTF8.self))
            }
            guard let resumeAfter else {
                throw JSONError("watch.overflow without \"resume_after\"", at: paramsRange.lowerBound)
            }
            return .overflow(resumeAfter: resumeAfter)
        default:
            return .other
        }
    }
}

extension FeedEvent {
    /// Reads the stored event at the scanner (the daemon's canonical JSON with `seq` added)
    /// and keeps its canonical JSON without `seq` as the body: the members but `seq`, as
    /// the daemon wrote them (sorted, no whitespace), which is the canonical form.
    static func read(_ line: [UInt8], scanner: inout JSONScanner) throws(JSONError) -> FeedEvent {
        let start = scanner.offset
        var seq: UInt64?
        var id: String?
        var origin: String?
        var entity: String?
        var body: [UInt8] = [UInt8(ascii: "{")]
        var memberStart = start + 1
        var canonical = true
        try scanner.readObject { (key, scanner) throws(JSONError) in
            if line[memberStart] != UInt8(ascii: "\"") { canonical = false }
            switch String(decoding: key, as: UTF8.self) {
            case "seq":
                var text: [UInt8] = []
                try scanner.canonicalValue(into: &text)
                seq = UInt64(String(decoding: text, as: UTF8.self))
            case "id": id = try scanner.readString()
            case "origin": origin = try scanner.readString()
            case "entity": entity = try scanner.readString()
            default: try scanner.skipValue()
            }
            if !key.elementsEqual("seq".utf8) {
                if body.count > 1 { body.append(UInt8(ascii: ",")) }
                body.append(contentsOf: line[memberStart..<scanner.offset])
            }
            memberStart = scanner.offset + 1  // past the comma
        }
        body.append(UInt8(ascii: "}"))
        guard let seq, let id, let origin, let entity, let slash = entity.firstIndex(of: "/") else {
            throw JSONError("an event without seq, id, origin or entity", at: start)
        }
        if !canonical {
            // Whitespace between members: not how evstored writes, so encode it again.
            guard var object = try JSONTree.parse(Array(line[start..<scanner.offset])) as? [String: Any] else {
                throw JSONError("an event that is not an object", at: start)
            }
            object["seq"] = nil
            guard let encoded = JSONTree.encode(object) else {
                throw JSONError("an event that cannot be encoded", at: start)
            }
            body = encoded
        }
        return FeedEvent(seq: seq, id: id, origin: origin, type: String(entity[..<slash]), body: body)
    }
}
