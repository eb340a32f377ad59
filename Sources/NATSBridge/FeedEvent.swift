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
    /// speaks it (the bridge then drops the connection and starts again). An event's
    /// notification as the daemon writes it is read in one pass over its bytes
    /// (`FeedEvent.readNotification`), any other line by the full scanner.
    static func parse(_ line: [UInt8]) throws(JSONError) -> FeedLine {
        if let event = FeedEvent.readNotification(line) { return .event(event) }
        return try scanned(line)
    }

    /// `parse` by the full scanner, for any line. The daemon writes `method` before
    /// `params`, so an event is read as it is met; `params` before `method` is skipped and
    /// read again once the method is known.
    static func scanned(_ line: [UInt8]) throws(JSONError) -> FeedLine {
        // Deeper than any event the daemon takes, with the notification around it.
        var scanner = JSONScanner(line, maxDepth: JSONTree.maxDepth)
        var method: Method?
        var event: FeedEvent?
        var resumeAfter: UInt64?
        var id: Int?
        var error: String?
        var paramsStart: Int?
        try scanner.readObject { (key, scanner) throws(JSONError) in
            if key.elementsEqual(Key.method) {
                method = Method(try scanner.readStringSlice())
            } else if key.elementsEqual(Key.params) {
                paramsStart = scanner.offset
                switch method {
                case .event?: event = try FeedLine.event(in: line, scanner: &scanner)
                case .overflow?: resumeAfter = try FeedLine.resumeAfter(scanner: &scanner)
                case .other?, nil: try scanner.skipValue()
                }
            } else if key.elementsEqual(Key.id) {
                var text: [UInt8] = []
                try scanner.canonicalValue(into: &text)
                id = Int(String(decoding: text, as: UTF8.self))
            } else if key.elementsEqual(Key.error) {
                let start = scanner.offset
                try scanner.skipValue()
                error = String(decoding: line[start..<scanner.offset], as: UTF8.self)
            } else {
                try scanner.skipValue()
            }
        }
        try scanner.expectEnd()
        guard let method else { return .reply(id: id, error: error) }
        guard let paramsStart else { return .other }
        switch method {
        case .event:
            if event == nil {
                var params = JSONScanner(line, from: paramsStart, maxDepth: JSONTree.maxDepth)
                event = try FeedLine.event(in: line, scanner: &params)
            }
            guard let event else { throw JSONError("an event notification without \"event\"", at: paramsStart) }
            return .event(event)
        case .overflow:
            if resumeAfter == nil {
                var params = JSONScanner(line, from: paramsStart, maxDepth: JSONTree.maxDepth)
                resumeAfter = try FeedLine.resumeAfter(scanner: &params)
            }
            guard let resumeAfter else {
                throw JSONError("watch.overflow without \"resume_after\"", at: paramsStart)
            }
            return .overflow(resumeAfter: resumeAfter)
        case .other:
            return .other
        }
    }

    /// The notifications the bridge reads.
    private enum Method {
        case event, overflow, other

        init(_ name: ArraySlice<UInt8>) {
            if name.elementsEqual(Key.event) {
                self = .event
            } else if name.elementsEqual(Key.overflow) {
                self = .overflow
            } else {
                self = .other
            }
        }
    }

    /// The event of an `event` notification's params, nil when they hold none.
    private static func event(in line: [UInt8], scanner: inout JSONScanner) throws(JSONError) -> FeedEvent? {
        var event: FeedEvent?
        try scanner.readObject { (key, scanner) throws(JSONError) in
            guard key.elementsEqual(Key.event) else { return try scanner.skipValue() }
            event = try FeedEvent.read(line, scanner: &scanner)
        }
        return event
    }

    /// The `resume_after` of a `watch.overflow` notification's params.
    private static func resumeAfter(scanner: inout JSONScanner) throws(JSONError) -> UInt64? {
        var resumeAfter: UInt64?
        try scanner.readObject { (key, scanner) throws(JSONError) in
            guard key.elementsEqual(Key.resumeAfter) else { return try scanner.skipValue() }
            var text: [UInt8] = []
            try scanner.canonicalValue(into: &text)
            resumeAfter = UInt64(String(decoding: text, as: UTF8.self))
        }
        return resumeAfter
    }
}

extension FeedEvent {
    /// Reads the stored event at the scanner (the daemon's canonical JSON with `seq` added)
    /// and keeps its canonical JSON without `seq` as the body: the members but `seq`, as
    /// the daemon wrote them (sorted, no whitespace), which is the canonical form. The
    /// body is the event's bytes with the `seq` member cut out (the daemon puts it last).
    static func read(_ line: [UInt8], scanner: inout JSONScanner) throws(JSONError) -> FeedEvent {
        let start = scanner.offset
        var seq: UInt64?
        var id: String?
        var origin: String?
        var entity: String?
        /// The `seq` member, with the comma that separates it from its neighbour.
        var seqMember: Range<Int>?
        var memberStart = start + 1
        var canonical = line[start] == UInt8(ascii: "{")
        var first = true
        try scanner.readObject { (key, scanner) throws(JSONError) in
            if line[memberStart] != UInt8(ascii: "\"") { canonical = false }
            if key.elementsEqual(Key.seq) {
                var text: [UInt8] = []
                try scanner.canonicalValue(into: &text)
                seq = UInt64(String(decoding: text, as: UTF8.self))
                // `{"seq":1,"a"...`: the comma after it; `...,"seq":1}` or `,"seq":1,`: before.
                seqMember = first ? memberStart..<(scanner.offset + 1) : (memberStart - 1)..<scanner.offset
            } else if key.elementsEqual(Key.id) {
                id = try scanner.readString()
            } else if key.elementsEqual(Key.origin) {
                origin = try scanner.readString()
            } else if key.elementsEqual(Key.entity) {
                entity = try scanner.readString()
            } else {
                try scanner.skipValue()
            }
            first = false
            memberStart = scanner.offset + 1  // past the comma
        }
        let end = scanner.offset
        guard let seq, let id, let origin, let entity, let slash = entity.firstIndex(of: "/"), let seqMember else {
            throw JSONError("an event without seq, id, origin or entity", at: start)
        }
        // The member after the last is the closing brace, where the next one would start.
        if line[end - 1] != UInt8(ascii: "}") || memberStart != end { canonical = false }
        var body: [UInt8]
        if canonical {
            body = []
            body.reserveCapacity(end - start - seqMember.count)
            body.append(contentsOf: line[start..<seqMember.lowerBound])
            body.append(contentsOf: line[min(seqMember.upperBound, end - 1)..<end])
        } else {
            // Whitespace between members: not how evstored writes, so encode it again.
            guard var object = try JSONTree.parse(Array(line[start..<end])) as? [String: Any] else {
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

extension FeedEvent {
    /// The event of a notification as evstored writes it — `{"jsonrpc":"2.0","method":
    /// "event","params":{"event":{...}}}`, no whitespace, ASCII, keys without escapes and in
    /// canonical order (`seq` last), the id, origin and entity strings without escapes —
    /// read in one pass over its bytes; nil
    /// for any other line, which `FeedLine.parse` reads with the full scanner. The pass
    /// checks what the scanner checks of such a line: the nesting, the strings (no control
    /// characters, escapes one of JSON's), the numbers' grammar and the literals; only a
    /// line outside ASCII goes the scanner's way to have its UTF-8 checked.
    static func readNotification(_ line: [UInt8]) -> FeedEvent? {
        let bytes = line.span
        let head = NotificationBytes.head
        let tail = NotificationBytes.tail
        guard bytes.count > head.count + tail.count + 1,
            EventBytes.equal(bytes, 0..<head.count, head),
            EventBytes.equal(bytes, (bytes.count - tail.count)..<bytes.count, tail)
        else { return nil }
        let start = head.count - 1
        return EventBytes.event(line, bytes.extracting(start..<(bytes.count - tail.count)), at: start)
    }
}

/// The bytes around an event in the daemon's notification.
private enum NotificationBytes {
    static let head = Array(#"{"jsonrpc":"2.0","method":"event","params":{"event":{"#.utf8)
    static let tail = Array("}}".utf8)
}

/// One pass over an event's bytes, for `FeedEvent.readNotification`. It reads them through
/// a `Span` of the event alone, by index, so every loop's bound is the span's own: no slice,
/// no copy and no reference count per value, which was most of the bridge's CPU per event.
private enum EventBytes {
    private static let quote = UInt8(ascii: "\"")
    private static let backslash = UInt8(ascii: "\\")

    /// The members the bridge reads.
    private enum Member {
        case seq, id, origin, entity, other

        /// `equal` compares the lengths first, so a key of another length costs one comparison.
        init(_ bytes: Span<UInt8>, _ key: Range<Int>) {
            if EventBytes.equal(bytes, key, Key.seq) {
                self = .seq
            } else if EventBytes.equal(bytes, key, Key.id) {
                self = .id
            } else if EventBytes.equal(bytes, key, Key.origin) {
                self = .origin
            } else if EventBytes.equal(bytes, key, Key.entity) {
                self = .entity
            } else {
                self = .other
            }
        }
    }

    /// The event whose bytes are `bytes`, which are `line`'s from `offset` on.
    static func event(_ line: [UInt8], _ bytes: Span<UInt8>, at offset: Int) -> FeedEvent? {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "{"), bytes[bytes.count - 1] == UInt8(ascii: "}") else {
            return nil
        }
        var seq: UInt64?
        var seqMember: Range<Int>?
        // The values' text, inside their quotes.
        var id: Range<Int>?
        var origin: Range<Int>?
        var entity: Range<Int>?
        var index = 1
        var first = true
        var previous: Range<Int>?
        while true {
            // A member: a key without escapes, a colon, a value.
            guard index < bytes.count, bytes[index] == quote else { return nil }
            let keyStart = index + 1
            guard let keyEnd = plainStringEnd(bytes, from: keyStart) else { return nil }
            index = keyEnd + 1
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
            let valueStart = index + 1
            guard let valueEnd = valueEnd(bytes, from: valueStart, depth: 0) else { return nil }
            let key = keyStart..<keyEnd
            let member = Member(bytes, key)
            // In canonical order, but for `seq`, which the daemon puts last: so no key
            // comes twice (the scanner refuses that).
            if member != .seq {
                if let previous, !precedes(bytes, previous, key) { return nil }
                previous = key
            }
            switch member {
            case .seq:
                guard seq == nil, let value = digits(bytes, valueStart..<valueEnd) else { return nil }
                seq = value
                // The comma after it when it is first, else the one before it.
                seqMember = first ? (keyStart - 1)..<(valueEnd + 1) : (keyStart - 2)..<valueEnd
            case .id:
                guard id == nil, let text = plainString(bytes, valueStart..<valueEnd) else { return nil }
                id = text
            case .origin:
                guard origin == nil, let text = plainString(bytes, valueStart..<valueEnd) else { return nil }
                origin = text
            case .entity:
                guard entity == nil, let text = plainString(bytes, valueStart..<valueEnd) else { return nil }
                entity = text
            case .other: break
            }
            index = valueEnd
            first = false
            guard index < bytes.count else { return nil }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}"), index == bytes.count - 1 else { return nil }
            break
        }
        guard let seq, let seqMember, let id, let origin, let entity,
            let slash = firstIndex(of: UInt8(ascii: "/"), in: bytes, entity)
        else { return nil }
        func text(_ range: Range<Int>) -> String {
            String(decoding: line[(offset + range.lowerBound)..<(offset + range.upperBound)], as: UTF8.self)
        }
        var body: [UInt8] = []
        body.reserveCapacity(bytes.count - seqMember.count)
        body.append(contentsOf: line[offset..<(offset + seqMember.lowerBound)])
        body.append(contentsOf: line[(offset + min(seqMember.upperBound, bytes.count - 1))..<(offset + bytes.count)])
        return FeedEvent(
            seq: seq, id: text(id), origin: text(origin), type: text(entity.lowerBound..<slash), body: body)
    }

    /// Whether `bytes[range]` are `expected`.
    static func equal(_ bytes: Span<UInt8>, _ range: Range<Int>, _ expected: [UInt8]) -> Bool {
        guard range.count == expected.count, range.lowerBound >= 0, range.upperBound <= bytes.count else {
            return false
        }
        let given = bytes.extracting(range)
        let wanted = expected.span
        for index in 0..<given.count where given[index] != wanted[index] { return false }
        return true
    }

    /// Whether the bytes of `first` come before those of `second`, as
    /// `lexicographicallyPrecedes` orders them.
    private static func precedes(_ bytes: Span<UInt8>, _ first: Range<Int>, _ second: Range<Int>) -> Bool {
        let common = min(first.count, second.count)
        var offset = 0
        while offset < common {
            let a = bytes[first.lowerBound + offset]
            let b = bytes[second.lowerBound + offset]
            if a != b { return a < b }
            offset += 1
        }
        return first.count < second.count
    }

    private static func firstIndex(of byte: UInt8, in bytes: Span<UInt8>, _ range: Range<Int>) -> Int? {
        var index = range.lowerBound
        while index < range.upperBound {
            if bytes[index] == byte { return index }
            index += 1
        }
        return nil
    }

    /// Where the string that starts at `from` (past its opening quote) ends, at its closing
    /// quote; nil at an escape, a control character, a byte outside ASCII or the end.
    private static func plainStringEnd(_ bytes: Span<UInt8>, from: Int) -> Int? {
        var index = from
        while index < bytes.count {
            let byte = bytes[index]
            if byte == quote { return index }
            guard byte >= 0x20, byte < 0x7F, byte != backslash else { return nil }
            index += 1
        }
        return nil
    }

    /// The text of a string value without escapes, inside its quotes.
    private static func plainString(_ bytes: Span<UInt8>, _ range: Range<Int>) -> Range<Int>? {
        guard range.count >= 2, bytes[range.lowerBound] == quote,
            plainStringEnd(bytes, from: range.lowerBound + 1) == range.upperBound - 1
        else { return nil }
        return (range.lowerBound + 1)..<(range.upperBound - 1)
    }

    /// A seq: decimal digits without a leading zero, within `UInt64`.
    private static func digits(_ bytes: Span<UInt8>, _ range: Range<Int>) -> UInt64? {
        guard !range.isEmpty, range.count <= 20, bytes[range.lowerBound] != UInt8(ascii: "0") || range.count == 1
        else { return nil }
        var value: UInt64 = 0
        for index in range {
            let byte = bytes[index]
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
            let (times, overflow) = value.multipliedReportingOverflow(by: 10)
            let (sum, carry) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
            guard !overflow, !carry else { return nil }
            value = sum
        }
        return value
    }

    /// Where the value that starts at `from` ends (just past it); nil when it is not one
    /// that this pass takes. `depth` bounds the nesting below the scanner's bound (which
    /// counts the notification's three levels around the event too).
    private static func valueEnd(_ bytes: Span<UInt8>, from: Int, depth: Int) -> Int? {
        guard from < bytes.count, depth < JSONTree.maxDepth - 4 else { return nil }
        switch bytes[from] {
        case quote: return stringEnd(bytes, from: from + 1).map { $0 + 1 }
        case UInt8(ascii: "{"):
            var index = from + 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") { return index + 1 }
            var previous: Range<Int>?
            while true {
                // Keys without escapes, in canonical order: none twice.
                guard index < bytes.count, bytes[index] == quote,
                    let keyEnd = plainStringEnd(bytes, from: index + 1),
                    keyEnd + 1 < bytes.count, bytes[keyEnd + 1] == UInt8(ascii: ":"),
                    let valueEnd = valueEnd(bytes, from: keyEnd + 2, depth: depth + 1), valueEnd < bytes.count
                else { return nil }
                let key = (index + 1)..<keyEnd
                if let previous, !precedes(bytes, previous, key) { return nil }
                previous = key
                index = valueEnd + 1
                if bytes[valueEnd] == UInt8(ascii: "}") { return index }
                guard bytes[valueEnd] == UInt8(ascii: ",") else { return nil }
            }
        case UInt8(ascii: "["):
            var index = from + 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") { return index + 1 }
            while true {
                guard let valueEnd = valueEnd(bytes, from: index, depth: depth + 1), valueEnd < bytes.count
                else { return nil }
                index = valueEnd + 1
                if bytes[valueEnd] == UInt8(ascii: "]") { return index }
                guard bytes[valueEnd] == UInt8(ascii: ",") else { return nil }
            }
        case UInt8(ascii: "t"): return literalEnd(bytes, from: from, Literal.true)
        case UInt8(ascii: "f"): return literalEnd(bytes, from: from, Literal.false)
        case UInt8(ascii: "n"): return literalEnd(bytes, from: from, Literal.null)
        default: return numberEnd(bytes, from: from)
        }
    }

    /// Where a string that starts at `from` (past its opening quote) ends, at its closing
    /// quote: escapes JSON's own, no control characters, ASCII only.
    private static func stringEnd(_ bytes: Span<UInt8>, from: Int) -> Int? {
        var index = from
        while index < bytes.count {
            let byte = bytes[index]
            if byte == quote { return index }
            guard byte >= 0x20, byte < 0x7F else { return nil }
            if byte == backslash {
                guard index + 1 < bytes.count else { return nil }
                switch bytes[index + 1] {
                case quote, backslash, UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
                    UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                    index += 2
                case UInt8(ascii: "u"):
                    guard index + 6 <= bytes.count else { return nil }
                    for at in (index + 2)..<(index + 6) where !isHex(bytes[at]) { return nil }
                    index += 6
                default: return nil
                }
                continue
            }
            index += 1
        }
        return nil
    }

    private static func isHex(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
    }

    private static func literalEnd(_ bytes: Span<UInt8>, from: Int, _ literal: [UInt8]) -> Int? {
        let range = from..<(from + literal.count)
        guard range.upperBound <= bytes.count, equal(bytes, range, literal) else { return nil }
        return range.upperBound
    }

    /// JSON's number grammar: `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`.
    private static func numberEnd(_ bytes: Span<UInt8>, from: Int) -> Int? {
        func digitsEnd(_ from: Int) -> Int {
            var at = from
            while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") { at += 1 }
            return at
        }
        var index = from
        if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { return nil }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            let after = digitsEnd(index)
            guard after > index else { return nil }
            index = after
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            let after = digitsEnd(index)
            guard after > index else { return nil }
            index = after
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            let after = digitsEnd(index)
            guard after > index else { return nil }
            index = after
        }
        return index
    }

    private enum Literal {
        static let `true` = Array("true".utf8)
        static let `false` = Array("false".utf8)
        static let null = Array("null".utf8)
    }
}

/// The names the bridge looks for, as bytes: a line's keys are compared with them as
/// they lie in it.
private enum Key {
    static let method = Array("method".utf8)
    static let params = Array("params".utf8)
    static let id = Array("id".utf8)
    static let error = Array("error".utf8)
    static let event = Array("event".utf8)
    static let overflow = Array("watch.overflow".utf8)
    static let resumeAfter = Array("resume_after".utf8)
    static let seq = Array("seq".utf8)
    static let origin = Array("origin".utf8)
    static let entity = Array("entity".utf8)
}
