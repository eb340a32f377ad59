import Projections

/// Decoding of the input form and the stored form, and the canonical JSON encoding of
/// stored events. Each input is decoded once; canonical bytes are written directly.
public enum EventCodec {
    static let inputKeys = "entity, kind, status, fields, set, element, counter, amount, key, by, at, if_match, resolve"

    /// Everything an event object may carry, as read off the wire, before the kind is known.
    /// Strings are parts of the input when they have no escapes (the common case: no array
    /// of their own), else decoded; none outlives the decoding.
    struct Members {
        var entity: ArraySlice<UInt8>?
        var kind: ArraySlice<UInt8>?
        var status: ArraySlice<UInt8>?
        var fields: [FieldChange]?
        var set: ArraySlice<UInt8>?
        var element: JSONBytes?
        var counter: ArraySlice<UInt8>?
        var amount: JSONBytes?
        var key: ArraySlice<UInt8>?
        var by: ArraySlice<UInt8>?
        var at: JSONBytes?
        var ifMatch: JSONBytes?
        var resolve: Bool?
        // Stored form only.
        var id: ArraySlice<UInt8>?
        var origin: ArraySlice<UInt8>?
        /// Where the `base` and `observed` values begin in the input: checked as JSON when
        /// read, and read for their ids once the kind says what they must hold.
        var base: Int?
        var observed: Int?
        /// A status event made away from its type's authority.
        var proposal: Bool?
        /// A decision's members.
        var event: ArraySlice<UInt8>?
        var accept: Bool?
        var reason: ArraySlice<UInt8>?
        /// A stored event's members out of their canonical order, or one its payload
        /// never holds (`id`, `seq`), or `fields` out of order: its canonical payload is
        /// not its bytes.
        var outOfOrder = false
    }

    /// The members an event object may have, found by their bytes without making strings.
    enum Member: String, CaseIterable {
        case entity, kind, status, fields, set, element, counter, amount, key, by, at, id, origin, base, observed,
            resolve
        case proposal, event, accept, reason
        case seq
        case ifMatch = "if_match"

        /// The kinds and their names' bytes.
        static let kindNames: [(kind: EventKind, name: [UInt8])] = EventKind.allCases.map {
            ($0, Array($0.rawValue.utf8))
        }

        /// The kind a `kind` member's bytes name.
        static func kind(named bytes: ArraySlice<UInt8>) -> EventKind? {
            for candidate in kindNames where bytes.elementsEqual(candidate.name) { return candidate.kind }
            return nil
        }

        /// The member a key names, found without allocating: a name of up to 8 bytes, none of
        /// them 0, is one integer (`packed(_:)`), compared at once.
        static func named(_ key: ArraySlice<UInt8>) -> Member? {
            packed(key).flatMap(named(packed:))
        }

        /// The member whose name packs to `packed`.
        static func named(packed: UInt64) -> Member? {
            switch packed {
            case 0x656e_7469_7479_0000: .entity
            case 0x6b69_6e64_0000_0000: .kind
            case 0x7374_6174_7573_0000: .status
            case 0x6669_656c_6473_0000: .fields
            case 0x7365_7400_0000_0000: .set
            case 0x656c_656d_656e_7400: .element
            case 0x636f_756e_7465_7200: .counter
            case 0x616d_6f75_6e74_0000: .amount
            case 0x6b65_7900_0000_0000: .key
            case 0x6279_0000_0000_0000: .by
            case 0x6174_0000_0000_0000: .at
            case 0x6964_0000_0000_0000: .id
            case 0x6f72_6967_696e_0000: .origin
            case 0x6261_7365_0000_0000: .base
            case 0x6f62_7365_7276_6564: .observed
            case 0x7265_736f_6c76_6500: .resolve
            case 0x7072_6f70_6f73_616c: .proposal
            case 0x6576_656e_7400_0000: .event
            case 0x6163_6365_7074_0000: .accept
            case 0x7265_6173_6f6e_0000: .reason
            case 0x7365_7100_0000_0000: .seq
            case 0x6966_5f6d_6174_6368: .ifMatch
            default: nil
            }
        }

        /// A key's bytes as one integer, the first in the highest byte and any missing after
        /// the last as zeros; nil for a key over 8 bytes or holding a 0 byte, which no
        /// member's name does. Without 0 bytes, two keys of up to 8 bytes give one integer
        /// only when they are the same, and the integers are in the keys' byte order: the
        /// order of a stored payload's members.
        static func packed(_ key: ArraySlice<UInt8>) -> UInt64? {
            guard key.count <= 8 else { return nil }
            var packed: UInt64 = 0
            for byte in key {
                guard byte != 0 else { return nil }
                packed = packed << 8 | UInt64(byte)
            }
            return key.isEmpty ? 0 : packed << (8 * (8 - key.count))
        }
    }

    // MARK: - Input form

    /// Decodes and validates one event in the input form.
    public static func decodeInput(_ line: [UInt8]) throws(EventStoreError) -> InputEvent {
        var scanner = JSONScanner(line)
        let event = try decodeInput(&scanner)
        do { try scanner.expectEnd() } catch { throw .invalid("invalid JSON: \(error)") }
        return event
    }

    /// Decodes one input event at the scanner's position (an element of `append`'s `events`).
    public static func decodeInput(_ scanner: inout JSONScanner) throws(EventStoreError) -> InputEvent {
        let members = try readMembers(&scanner, stored: false)
        return try input(from: members)
    }

    /// `stored`: the event is a stored one (from disk, a peer or an import), whose values are
    /// kept as they are; only a local input's blob references are checked.
    static func input(from m: Members, stored: Bool = false) throws(EventStoreError) -> InputEvent {
        var event = InputEvent(entity: try entity(of: m), change: try change(from: m, stored: stored))
        try addDetails(from: m, to: &event)
        return event
    }

    static func entity(of m: Members) throws(EventStoreError) -> EntityKey {
        guard let entityBytes = m.entity else {
            throw .invalid("\"entity\" is required: TYPE/ID, for example job/01JD3Q8R5N8X6ZK2W7Y4V9B3TQ")
        }
        return try Validation.entity(entityBytes)
    }

    /// Sets `key`, `by`, `at`, `if_match` and `resolve` of `m`, checked, on `event` (in place:
    /// an event passed in and returned would be copied, each of its buffers retained).
    static func addDetails(from m: Members, to event: inout InputEvent) throws(EventStoreError) {
        if let key = m.key { event.key = try Validation.text(key, what: "\"key\"", limit: Validation.maxKeyBytes) }
        if let by = m.by {
            event.by = try Validation.text(by, what: "\"by\"", limit: Validation.maxByBytes, allowEmpty: true)
        }
        event.at = m.at
        if let ifMatch = m.ifMatch { event.ifMatch = try rev(ifMatch) }
        if let resolve = m.resolve {
            // A status event always names every status head, so it settles a status conflict
            // without the flag; on other kinds there is nothing for it to settle.
            guard event.change.kind == .edit else {
                throw .invalid(
                    "\"resolve\" is only allowed on an \"edit\" event, not on a \"\(event.change.kind.rawValue)\" event (a status event settles a status conflict without it)"
                )
            }
            event.resolve = resolve
        }
    }

    /// An `if_match`: the entity's rev as `get`, `list` or `append` reported it, a positive
    /// integer. A version (a ULID, what 0.4 compared with) is refused with how to move on.
    static func rev(_ value: JSONBytes) throws(EventStoreError) -> UInt64 {
        let bytes = value.bytes
        if bytes.first == UInt8(ascii: "\"") {
            throw .invalid(
                "\"if_match\" takes the entity's rev (a number, as get, list and append report it), not a version or other string: pass \"rev\" instead"
            )
        }
        guard !bytes.isEmpty, bytes.count <= 20, bytes.allSatisfy({ (0x30...0x39).contains($0) }),
            let rev = UInt64(String(decoding: bytes, as: UTF8.self)), rev > 0
        else {
            throw .invalid(
                "\"if_match\" must be the entity's rev, a positive integer (as get, list and append report it)")
        }
        return rev
    }

    static func change(from m: Members, stored: Bool = false) throws(EventStoreError) -> InputEvent.Change {
        guard let kindBytes = m.kind else {
            throw .invalid("\"kind\" is required: one of \(EventKind.names)")
        }
        guard let kind = Member.kind(named: kindBytes) else {
            throw .invalid(
                "kind \"\(String(decoding: kindBytes.prefix(40), as: UTF8.self))\" is not one of \(EventKind.names)"
            )
        }
        // Members that belong to another kind are errors, not silently ignored.
        let (status, fields, set, element, counter) =
            switch kind {
            case .edit: (false, true, false, false, false)
            case .status: (true, false, false, false, false)
            case .add, .remove: (false, false, true, true, false)
            case .delete, .restore: (false, false, false, false, false)
            case .incr: (false, false, false, false, true)
            case .decide: (false, false, false, false, false)
            }
        func notAllowed(_ name: String) -> EventStoreError {
            .invalid("\"\(name)\" is not allowed on a \"\(kind.rawValue)\" event")
        }
        if m.status != nil, !status { throw notAllowed("status") }
        if m.fields != nil, !fields { throw notAllowed("fields") }
        if m.set != nil, !set { throw notAllowed("set") }
        if m.element != nil, !element { throw notAllowed("element") }
        if m.counter != nil, !counter { throw notAllowed("counter") }
        if m.amount != nil, !counter { throw notAllowed("amount") }
        switch kind {
        case .edit:
            guard let fields = m.fields else {
                throw .invalid("an edit needs \"fields\": an object of field names to values (null clears a field)")
            }
            guard !fields.isEmpty else { throw .invalid("\"fields\" must set at least one field") }
            // A value meant as a blob reference is one: a malformed one is refused here. A
            // stored event is never refused for it (another release may have written it).
            for field in fields where !stored && BlobReference.isMarked(field.value) {
                do { _ = try BlobReference.parse(field.value) } catch {
                    throw .invalid("field \"\(field.name)\": \(error.message)")
                }
            }
            return .edit(fields)
        case .status:
            guard let status = m.status else { throw .invalid("a status event needs \"status\": a string") }
            return .status(try Validation.text(status, what: "\"status\"", limit: Validation.maxStatusBytes))
        case .add, .remove:
            guard let set = m.set else { throw .invalid("an \(kind.rawValue) event needs \"set\": the set's name") }
            let name = try Validation.name(set, what: "set name")
            guard let element = m.element else {
                throw .invalid("an \(kind.rawValue) event needs \"element\": any JSON value")
            }
            if !stored, BlobReference.isMarked(element) {
                do { _ = try BlobReference.parse(element) } catch { throw .invalid("\"element\": \(error.message)") }
            }
            return kind == .add ? .add(set: name, element: element) : .remove(set: name, element: element)
        case .delete: return .delete
        case .restore: return .restore
        case .decide:
            throw .invalid(
                "kind \"decide\" is appended only by a type's authority node, when it decides a status proposal; a client cannot send one"
            )
        case .incr:
            guard let counter = m.counter else { throw .invalid("an incr event needs \"counter\": the counter's name") }
            let name = try Validation.name(counter, what: "counter name")
            guard let amount = m.amount else {
                throw .invalid("an incr event needs \"amount\": an integer to add (negative to subtract)")
            }
            return .incr(counter: name, amount: try Self.amount(amount))
        }
    }

    /// An `incr`'s amount: an integer (no fraction, no exponent) within a signed 64-bit integer.
    static func amount(_ value: JSONBytes) throws(EventStoreError) -> Int64 {
        let bytes = value.bytes
        let digits = bytes.first == UInt8(ascii: "-") ? bytes.dropFirst() : bytes[...]
        guard !digits.isEmpty, digits.count <= 19, digits.allSatisfy({ (0x30...0x39).contains($0) }),
            digits.first != UInt8(ascii: "0") || digits.count == 1,
            let amount = Int64(String(decoding: bytes, as: UTF8.self))
        else {
            throw .invalid(
                "\"amount\" must be an integer from -9223372036854775808 to 9223372036854775807, without a fraction or exponent"
            )
        }
        return amount
    }

    static func readMembers(_ scanner: inout JSONScanner, stored: Bool) throws(EventStoreError) -> Members {
        var m = Members()
        guard scanner.peek() == UInt8(ascii: "{") else { throw .invalid("an event must be a JSON object") }
        // A stored payload's members come in their names' byte order, the order of the packed
        // names; `id` and `seq` are never in it.
        var lastName: UInt64 = 0
        do {
            try scanner.readObject { (key, s) throws(JSONError) in
                let name = Member.packed(key)
                let member = name.flatMap(Member.named(packed:))
                if stored {
                    if let name, name > lastName, member != .id, member != .seq {
                        lastName = name
                    } else {
                        m.outOfOrder = true
                    }
                }
                switch member {
                case .entity: m.entity = try stringMember(&s, "entity")
                case .kind: m.kind = try stringMember(&s, "kind")
                case .status: m.status = try stringMember(&s, "status")
                case .set: m.set = try stringMember(&s, "set")
                case .key: m.key = try stringMember(&s, "key")
                case .by: m.by = try stringMember(&s, "by")
                case .element: m.element = try canonical(&s)
                case .counter: m.counter = try stringMember(&s, "counter")
                case .amount: m.amount = try canonical(&s)
                case .at:
                    let at = try canonical(&s)
                    guard let first = at.bytes.first,
                        first == UInt8(ascii: "\"") || first == UInt8(ascii: "-") || (0x30...0x39).contains(first)
                    else {
                        throw JSONError(
                            meaning: "\"at\" must be a string or a number (the client's wall time)", at: s.offset)
                    }
                    m.at = at
                case .fields:
                    var outOfOrder = false
                    m.fields = try fieldsMember(&s, outOfOrder: &outOfOrder)
                    if outOfOrder { m.outOfOrder = true }
                case .ifMatch where !stored: m.ifMatch = try canonical(&s)
                case .resolve where !stored:
                    guard s.peek() == UInt8(ascii: "t") || s.peek() == UInt8(ascii: "f") else {
                        throw JSONError(meaning: "\"resolve\" must be true or false", at: s.offset)
                    }
                    m.resolve = try s.readBool()
                case .seq where stored:
                    // As `log` returns an event: this node's commit sequence, not part of the
                    // event. Taken and dropped, so a log export imports as it is.
                    try s.skipValue()
                case .id where stored: m.id = try stringMember(&s, "id")
                case .origin where stored: m.origin = try stringMember(&s, "origin")
                case .base where stored:
                    m.base = s.offset
                    try s.skipValue()
                case .observed where stored:
                    m.observed = s.offset
                    try s.skipValue()
                case .proposal where stored:
                    guard s.peek() == UInt8(ascii: "t") else {
                        throw JSONError(meaning: "\"proposal\" is true or absent", at: s.offset)
                    }
                    m.proposal = try s.readBool()
                case .event where stored: m.event = try stringMember(&s, "event")
                case .accept where stored:
                    guard s.peek() == UInt8(ascii: "t") || s.peek() == UInt8(ascii: "f") else {
                        throw JSONError(meaning: "\"accept\" must be true or false", at: s.offset)
                    }
                    m.accept = try s.readBool()
                case .reason where stored: m.reason = try stringMember(&s, "reason")
                default:
                    let shown = String(String(decoding: key, as: UTF8.self).prefix(40))
                    let allowed =
                        stored
                        ? "entity, kind, id, origin, base, observed, status, proposal, fields, set, element, counter, amount, event, accept, reason, key, by, at"
                        : inputKeys
                    throw JSONError(meaning: "unknown member \"\(shown)\" (an event has \(allowed))", at: s.offset)
                }
            }
        } catch {
            throw .invalid(error.isSyntax ? "invalid JSON: \(error)" : error.message)
        }
        // Moved out: a copy of the members would retain each slice's buffer, and release it twice.
        return consume m
    }

    static func stringMember(_ s: inout JSONScanner, _ name: String) throws(JSONError) -> ArraySlice<UInt8> {
        guard s.peek() == UInt8(ascii: "\"") else {
            throw JSONError(meaning: "\"\(name)\" must be a string", at: s.offset)
        }
        return try s.readStringSlice()
    }

    static func canonical(_ s: inout JSONScanner) throws(JSONError) -> JSONBytes {
        var out: [UInt8] = []
        try s.canonicalValue(into: &out)
        return JSONBytes(canonical: out)
    }

    /// `outOfOrder` is set when the fields do not come in their canonical order.
    static func fieldsMember(_ s: inout JSONScanner, outOfOrder: inout Bool) throws(JSONError) -> [FieldChange] {
        guard s.peek() == UInt8(ascii: "{") else {
            throw JSONError(meaning: "\"fields\" must be an object of field names to values", at: s.offset)
        }
        var fields: [FieldChange] = []
        try s.readObject { (name, s) throws(JSONError) in
            let valid: String
            do throws(EventStoreError) { valid = try Validation.name(name, what: "field name") } catch {
                throw JSONError(meaning: error.message, at: s.offset)
            }
            fields.append(FieldChange(name: valid, value: try canonical(&s)))
        }
        // Canonical order is by UTF-8 bytes.
        for index in fields.indices.dropFirst()
        where !fields[index - 1].name.utf8.lexicographicallyPrecedes(fields[index].name.utf8) {
            outOfOrder = true
            fields.sort { $0.name.utf8.lexicographicallyPrecedes($1.name.utf8) }
            break
        }
        return fields
    }

    // MARK: - Stored form

    /// Decodes a stored event's canonical JSON (from disk, or from a peer), validating it as
    /// strictly as an input. `id` supplies the id when the bytes omit it (on disk the id is
    /// the key).
    public static func decodeStored(_ bytes: [UInt8], id knownID: ULID? = nil) throws(EventStoreError) -> Event {
        var isPayload = false
        return try decodeStored(bytes, id: knownID, isPayload: &isPayload)
    }

    /// As `decodeStored(_:id:)`, and says whether `bytes` are the event's payload as they
    /// are: the canonical JSON without the id that `encodeStored(_:includeID:)` would write
    /// for it, so a receiver keeps them rather than encoding the event again. False for any
    /// other form of the event (whitespace, members or ids out of order, an escape or an
    /// id in another case than the canonical one, an empty list, an `id` inside): those are
    /// taken too, and stored in the canonical form.
    public static func decodeStored(_ bytes: [UInt8], id knownID: ULID?, isPayload: inout Bool)
        throws(EventStoreError) -> Event
    {
        var scanner = JSONScanner(bytes)
        let m = try readMembers(&scanner, stored: true)
        do { try scanner.expectEnd() } catch { throw .invalid("invalid JSON: \(error)") }
        var canonical = !m.outOfOrder && !scanner.rewritten
        let decision = try decision(from: m)
        let input: InputEvent
        if decision != nil {
            // A decision has no change of its own; `delete` stands in for the checks of the rest.
            var decided = InputEvent(entity: try entity(of: m), change: .delete)
            try addDetails(from: m, to: &decided)
            input = decided
        } else {
            input = try self.input(from: m, stored: true)
        }
        if m.proposal != nil, input.change.kind != .status || decision != nil {
            throw .invalid("\"proposal\" is only allowed on a status event")
        }
        let id: ULID
        if let idBytes = m.id {
            guard let parsed = ULID(utf8: idBytes) else {
                throw .invalid("\"id\" is not a ULID: \(ULID.problem(with: idBytes) ?? "invalid")")
            }
            if let knownID, knownID != parsed { throw .invalid("\"id\" \(parsed) does not match its key \(knownID)") }
            id = parsed
        } else if let knownID {
            id = knownID
        } else {
            throw .invalid("a stored event needs \"id\"")
        }
        guard let originBytes = m.origin else { throw .invalid("a stored event needs \"origin\"") }
        guard let origin = ULID(utf8: originBytes) else {
            throw .invalid("\"origin\" is not a node id (a ULID): \(ULID.problem(with: originBytes) ?? "invalid")")
        }
        if canonical {
            canonical = isCanonicalText(ofID: originBytes) && m.event.map(isCanonicalText(ofID:)) != false
            if let amount = m.amount, case .incr(_, let value) = input.change {
                canonical = canonical && amount.bytes.elementsEqual(value.description.utf8)
            }
        }
        let body: EventBody
        switch input.change {
        case _ where decision != nil:
            guard m.base == nil, m.observed == nil else { throw .invalid("a decide event has no causal context") }
            body = decision!
        case .edit(let fields):
            var base: [FieldBase] = []
            if let offset = m.base {
                var s = JSONScanner(bytes, from: offset)
                guard s.peek() == UInt8(ascii: "{") else {
                    throw .invalid("an edit's \"base\" must be an object of field names to id lists")
                }
                do {
                    try s.readObject { (name, s) throws(JSONError) in
                        let field = String(decoding: name, as: UTF8.self)
                        guard fields.contains(where: { $0.name == field }) else {
                            throw JSONError(
                                meaning: "\"base\" names field \"\(field.prefix(40))\" that the edit does not set",
                                at: s.offset)
                        }
                        if let last = base.last, last.field >= field { canonical = false }
                        let heads = try idList(&s, "base", canonical: &canonical)
                        if heads.isEmpty { canonical = false }
                        base.append(FieldBase(field: field, heads: heads))
                    }
                } catch { throw .invalid(error.isSyntax ? "invalid JSON: \(error)" : error.message) }
                if base.isEmpty { canonical = false }
                base.sort { $0.field < $1.field }
                base.removeAll { $0.heads.isEmpty }
            }
            body = .edit(fields: fields, base: base)
        case .status(let status):
            let base = try ids(at: m.base, in: bytes, "base", canonical: &canonical)
            body = m.proposal == true ? .propose(status, base: base) : .status(status, base: base)
        case .add(let set, let element):
            guard m.base == nil, m.observed == nil else { throw .invalid("an add event has no causal context") }
            body = .add(set: set, element: element)
        case .remove(let set, let element):
            guard m.base == nil else {
                throw .invalid("\"base\" is not allowed on a remove event (it has \"observed\")")
            }
            body = .remove(
                set: set, element: element,
                observed: try ids(at: m.observed, in: bytes, "observed", canonical: &canonical))
        case .delete:
            guard m.base == nil, m.observed == nil else { throw .invalid("a delete event has no causal context") }
            body = .delete
        case .restore:
            body = .restore(base: try ids(at: m.base, in: bytes, "base", canonical: &canonical))
        case .incr(let counter, let amount):
            guard m.base == nil, m.observed == nil else { throw .invalid("an incr event has no causal context") }
            body = .incr(counter: counter, amount: amount)
        }
        if case .remove = body {
        } else if m.observed != nil {
            throw .invalid("\"observed\" is only allowed on a remove event")
        }
        if input.ifMatch != nil { throw .invalid("\"if_match\" is not part of a stored event") }
        if input.resolve { throw .invalid("\"resolve\" is not part of a stored event") }
        isPayload = canonical
        return Event(
            id: id, origin: origin, entity: input.entity, body: body, key: input.key, by: input.by, at: input.at)
    }

    /// The body of a stored `decide` event, nil for another kind. A decision's members
    /// (`event`, `accept`, `reason`) on another kind are errors.
    static func decision(from m: Members) throws(EventStoreError) -> EventBody? {
        guard let kind = m.kind, Member.kind(named: kind) == .decide else {
            if m.event != nil || m.accept != nil || m.reason != nil {
                throw .invalid("\"event\", \"accept\" and \"reason\" are only allowed on a decide event")
            }
            return nil
        }
        if m.status != nil || m.fields != nil || m.set != nil || m.element != nil || m.counter != nil
            || m.amount != nil
        {
            throw .invalid("a decide event has \"event\", \"accept\" and \"reason\" only")
        }
        guard let eventBytes = m.event, let proposal = ULID(utf8: eventBytes) else {
            throw .invalid("a decide event needs \"event\": the id of the proposal it decides")
        }
        guard let accept = m.accept else { throw .invalid("a decide event needs \"accept\": true or false") }
        let reason = try m.reason.map { bytes throws(EventStoreError) in
            try Validation.text(bytes, what: "\"reason\"", limit: Validation.maxReasonBytes, allowEmpty: true)
        }
        return .decide(proposal: proposal, accept: accept, reason: reason)
    }

    /// The id list at `offset` of `input`, none when there is none. `canonical` is set to
    /// false when the list is not in its canonical form (`idList(_:_:canonical:)`), or is
    /// empty (the canonical form leaves an empty list out).
    static func ids(at offset: Int?, in input: [UInt8], _ what: String, canonical: inout Bool)
        throws(EventStoreError) -> [ULID]
    {
        guard let offset else { return [] }
        var s = JSONScanner(input, from: offset)
        do {
            let ids = try idList(&s, what, canonical: &canonical)
            if ids.isEmpty { canonical = false }
            return ids
        } catch {
            throw .invalid(error.isSyntax ? "invalid JSON: \(error)" : error.message)
        }
    }

    /// A JSON array of ULID strings, returned sorted and without duplicates. `canonical` is
    /// set to false when the ids do not come in their canonical form: in ascending order,
    /// each once, their text in upper case.
    static func idList(_ s: inout JSONScanner, _ what: String, canonical: inout Bool) throws(JSONError) -> [ULID] {
        guard s.peek() == UInt8(ascii: "[") else {
            throw JSONError(meaning: "\"\(what)\" must be an array of event ids", at: s.offset)
        }
        var ids: [ULID] = []
        var ascending = true
        try s.readArray { (s) throws(JSONError) in
            let text = try stringMember(&s, what)
            guard let id = ULID(utf8: text) else {
                throw JSONError(
                    meaning:
                        "\"\(what)\" holds \"\(String(decoding: text.prefix(40), as: UTF8.self))\", not an event id: \(ULID.problem(with: text) ?? "")",
                    at: s.offset)
            }
            if let last = ids.last, last >= id { ascending = false }
            if ascending, !isCanonicalText(ofID: text) { ascending = false }
            ids.append(id)
        }
        // Strictly ascending is sorted and each once already, as a node of this release
        // writes them.
        if ascending { return ids }
        canonical = false
        // Sorted, then each run of equal ids kept once: no set made for a list of a few.
        ids.sort()
        var kept = 0
        for index in ids.indices where kept == 0 || ids[index] != ids[kept - 1] {
            ids[kept] = ids[index]
            kept += 1
        }
        ids.removeLast(ids.count - kept)
        return ids
    }

    /// Whether an id's text (one `ULID(utf8:)` reads) is the canonical one: upper case.
    static func isCanonicalText(ofID text: ArraySlice<UInt8>) -> Bool {
        for byte in text where byte >= UInt8(ascii: "a") { return false }
        return true
    }

    /// Where `encodeStored` puts the `id` member in a payload it encoded without one: before
    /// `"key"` when the event has an idempotency key, else before `"kind"`. Found from the
    /// end: only `observed`, `origin`, `proposal`, `reason`, `set` and `status` follow `kind`,
    /// none of which holds an object, and inside a string every quote is escaped, so the last
    /// `,"kind":` is the event's own (and the last `,"key":"` before it, when there is a key).
    public static func idPosition(inPayload payload: [UInt8], hasKey: Bool) -> Int? {
        guard let kind = lastIndex(of: kindMember, in: payload, before: payload.count) else { return nil }
        guard hasKey else { return kind + 1 }
        return lastIndex(of: keyMember, in: payload, before: kind).map { $0 + 1 }
    }

    /// The id's place in a payload as `idPosition(inPayload:hasKey:)` finds it, for a payload
    /// read back without its event: whether the event has a key is read from the payload.
    /// The last `,"key":"` before `,"kind":` is the event's own key when its string ends
    /// right there; otherwise it is a member of an object before it (`fields`, `data`),
    /// which ends with a `}` before `,"kind":`, and the event has no key.
    public static func idPosition(inPayload payload: [UInt8]) -> Int? {
        guard let kind = lastIndex(of: kindMember, in: payload, before: payload.count) else { return nil }
        guard let key = lastIndex(of: keyMember, in: payload, before: kind) else { return kind + 1 }
        var index = key + keyMember.count
        while index < kind, payload[index] != UInt8(ascii: "\"") {
            index += payload[index] == UInt8(ascii: "\\") ? 2 : 1
        }
        return index + 1 == kind ? key + 1 : kind + 1
    }

    private static func lastIndex(of pattern: [UInt8], in payload: [UInt8], before end: Int) -> Int? {
        var index = end - pattern.count
        while index >= 0 {
            if payload[index] == pattern[0], payload[index..<index + pattern.count].elementsEqual(pattern) {
                return index
            }
            index -= 1
        }
        return nil
    }

    private static let kindMember = Array(#","kind":"#.utf8)
    private static let keyMember = Array(#","key":""#.utf8)

    /// The canonical JSON of a stored event: keys sorted, no whitespace. Without `id` when
    /// `includeID` is false (on disk the id is the key, and storing it twice costs bytes).
    public static func encodeStored(_ event: Event, includeID: Bool = true) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        encodeStored(event, includeID: includeID, into: &out)
        return out
    }

    /// - Returns: where the `id` member begins, or would begin when `includeID` is false,
    ///   counted from where the event's JSON begins in `out` (as `idPosition(inPayload:)`
    ///   finds it).
    @discardableResult
    public static func encodeStored(_ event: Event, includeID: Bool, into out: inout [UInt8]) -> Int {
        let start = out.count
        out.append(UInt8(ascii: "{"))
        // Keys in byte order:
        // accept amount at base by counter element entity event fields id key kind observed
        // origin proposal reason set status
        // `entity` is always there: the members before it end with their comma, those after
        // it begin with theirs, so that a member's comma and name are one literal.
        if case .decide(_, let accept, _) = event.body {
            CanonicalWriter.appendLiteral(#""accept":"#, to: &out)
            CanonicalWriter.appendBool(accept, to: &out)
            out.append(UInt8(ascii: ","))
        }
        if case .incr(_, let amount) = event.body {
            CanonicalWriter.appendLiteral(#""amount":"#, to: &out)
            out.append(contentsOf: amount.description.utf8)
            out.append(UInt8(ascii: ","))
        }
        if let at = event.at {
            CanonicalWriter.appendLiteral(#""at":"#, to: &out)
            out.append(contentsOf: at.bytes)
            out.append(UInt8(ascii: ","))
        }
        switch event.body {
        case .edit(_, let base) where !base.isEmpty:
            CanonicalWriter.appendLiteral(#""base":{"#, to: &out)
            for (index, entry) in base.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(entry.field, to: &out)
                out.append(UInt8(ascii: ":"))
                appendIDs(entry.heads, to: &out)
            }
            CanonicalWriter.appendLiteral("},", to: &out)
        case .status(_, let base) where !base.isEmpty, .propose(_, let base) where !base.isEmpty,
            .restore(let base) where !base.isEmpty:
            CanonicalWriter.appendLiteral(#""base":"#, to: &out)
            appendIDs(base, to: &out)
            out.append(UInt8(ascii: ","))
        default: break
        }
        if let by = event.by {
            CanonicalWriter.appendLiteral(#""by":"#, to: &out)
            CanonicalWriter.appendString(by, to: &out)
            out.append(UInt8(ascii: ","))
        }
        if case .incr(let counter, _) = event.body {
            CanonicalWriter.appendLiteral(#""counter":"#, to: &out)
            CanonicalWriter.appendString(counter, to: &out)
            out.append(UInt8(ascii: ","))
        }
        switch event.body {
        case .add(_, let element), .remove(_, let element, _):
            CanonicalWriter.appendLiteral(#""element":"#, to: &out)
            out.append(contentsOf: element.bytes)
            out.append(UInt8(ascii: ","))
        default: break
        }
        CanonicalWriter.appendLiteral(#""entity":"#, to: &out)
        CanonicalWriter.appendString(utf8: event.entity.bytes, to: &out)
        if case .decide(let proposal, _, _) = event.body {
            CanonicalWriter.appendLiteral(#","event":"#, to: &out)
            proposal.appendJSON(to: &out)
        }
        if case .edit(let fields, _) = event.body {
            CanonicalWriter.appendLiteral(#","fields":{"#, to: &out)
            for (index, field) in fields.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(field.name, to: &out)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: field.value.bytes)
            }
            out.append(UInt8(ascii: "}"))
        }
        // Past the comma the next member begins with: where `"id":"…",` goes.
        let idPosition = out.count + 1 - start
        if includeID {
            CanonicalWriter.appendLiteral(#","id":"#, to: &out)
            event.id.appendJSON(to: &out)
        }
        if let key = event.key {
            CanonicalWriter.appendLiteral(#","key":"#, to: &out)
            CanonicalWriter.appendString(key, to: &out)
        }
        CanonicalWriter.appendLiteral(#","kind":"#, to: &out)
        CanonicalWriter.appendString(event.body.kind.rawValue, to: &out)
        if case .remove(_, _, let observed) = event.body, !observed.isEmpty {
            CanonicalWriter.appendLiteral(#","observed":"#, to: &out)
            appendIDs(observed, to: &out)
        }
        CanonicalWriter.appendLiteral(#","origin":"#, to: &out)
        event.origin.appendJSON(to: &out)
        switch event.body {
        case .add(let set, _), .remove(let set, _, _):
            CanonicalWriter.appendLiteral(#","set":"#, to: &out)
            CanonicalWriter.appendString(set, to: &out)
        case .propose(let status, _):
            CanonicalWriter.appendLiteral(#","proposal":true,"status":"#, to: &out)
            CanonicalWriter.appendString(status, to: &out)
        case .decide(_, _, let reason?):
            CanonicalWriter.appendLiteral(#","reason":"#, to: &out)
            CanonicalWriter.appendString(reason, to: &out)
        case .status(let status, _):
            CanonicalWriter.appendLiteral(#","status":"#, to: &out)
            CanonicalWriter.appendString(status, to: &out)
        default: break
        }
        out.append(UInt8(ascii: "}"))
        return idPosition
    }

    static func appendIDs(_ ids: [ULID], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (index, id) in ids.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            id.appendJSON(to: &out)
        }
        out.append(UInt8(ascii: "]"))
    }

    /// Bytes that the `"id":"…",` member adds to an encoding without it.
    static let idMemberBytes = 6 + ULID.textLength + 2
}
