/// The two encodings of an entity's state: a compact binary one that the store keeps and
/// folds further events into, and the canonical JSON that `get` returns.
extension EntityState {
    static let formatVersion: UInt8 = 1

    /// Compact, deterministic binary encoding (varints, 16-byte ids, sorted collections).
    /// Origins repeat across heads and history entries, so each is written once, in order,
    /// and referred to by its index.
    public func encoded() -> [UInt8] {
        var origins: [ULID] = []
        for field in fields { for head in field.heads { origins.append(head.origin) } }
        for entry in statusHeads { origins.append(entry.origin) }
        // Few, with repeats: sorted, then each kept once (no set to hash them into).
        origins.sort()
        var unique: [ULID] = []
        unique.reserveCapacity(origins.count)
        for origin in origins where unique.last != origin { unique.append(origin) }
        origins = unique
        func originIndex(_ origin: ULID) -> Int { origins.partitioningIndex { $0 < origin } }

        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(EntityState.formatVersion)
        out.appendVarint(eventCount)
        (version ?? .zero).append(to: &out)
        out.appendULIDs(origins)
        out.appendVarint(fields.count)
        for field in fields {
            out.appendLengthPrefixed(field.name)
            out.appendVarint(field.heads.count)
            for head in field.heads {
                head.id.append(to: &out)
                out.appendVarint(originIndex(head.origin))
                out.appendLengthPrefixed(head.value.bytes)
            }
        }
        out.appendVarint(statusCount)
        out.append(contentsOf: statusHistoryDigest.bytes)
        out.appendVarint(statusHeads.count)
        for entry in statusHeads {
            entry.id.append(to: &out)
            out.appendVarint(originIndex(entry.origin))
            out.appendLengthPrefixed(entry.status)
        }
        out.appendVarint(sets.count)
        for set in sets {
            out.appendLengthPrefixed(set.name)
            out.appendVarint(set.elements.count)
            for element in set.elements {
                out.appendLengthPrefixed(element.element.bytes)
                out.appendULIDs(element.adds)
            }
        }
        out.appendULIDs(liveDeletes)
        out.appendULIDs(dangling)
        // Counters last and only when there are any: a state without them encodes (and
        // hashes into the digest) as it did before counters existed.
        if !counters.isEmpty || hasProposals {
            out.appendVarint(counters.count)
            for counter in counters {
                out.appendLengthPrefixed(counter.name)
                out.appendInt128(counter.sum)
            }
        }
        // Proposals after the counters (whose count, 0 or more, then comes first), and only
        // when there are any: likewise a state without them encodes as before.
        if hasProposals {
            out.appendVarint(proposals.count)
            for proposal in proposals {
                proposal.id.append(to: &out)
                proposal.origin.append(to: &out)
                out.appendLengthPrefixed(proposal.status)
                out.appendULIDs(proposal.base)
                out.append(proposal.superseded ? 1 : 0)
            }
            out.appendVarint(rejected.count)
            for entry in rejected {
                entry.id.append(to: &out)
                entry.origin.append(to: &out)
                out.appendLengthPrefixed(entry.status)
                out.appendLengthPrefixed(entry.reason)
                entry.decision.append(to: &out)
            }
            out.appendVarint(proposers.count)
            for entry in proposers {
                entry.id.append(to: &out)
                entry.origin.append(to: &out)
                out.appendLengthPrefixed(entry.status)
            }
            out.appendVarint(awaiting.count)
            for entry in awaiting {
                entry.id.append(to: &out)
                entry.proposal.append(to: &out)
                out.append((entry.accept ? 1 : 0) | (entry.alsoNamed ? 2 : 0) | (entry.reason == nil ? 0 : 4))
                if let reason = entry.reason { out.appendLengthPrefixed(reason) }
            }
        }
        return out
    }

    /// Decodes what `encoded()` wrote; corrupt or truncated bytes are an error.
    public init(entity: EntityKey, decoding bytes: [UInt8]) throws(CorruptDataError) {
        var reader = ByteReader(bytes)
        let format = try reader.byte()
        guard format == EntityState.formatVersion else {
            throw CorruptDataError(
                "projection format \(format) is not known (this version reads \(EntityState.formatVersion))")
        }
        self.init(entity: entity)
        eventCount = try reader.integer()
        let version = try reader.ulid()
        self.version = eventCount == 0 ? nil : version
        let origins = try reader.ulids()
        for _ in 0..<(try reader.count()) {
            let name = try reader.string()
            var heads: [FieldHead] = []
            for _ in 0..<(try reader.count(minimumElementSize: 18)) {
                let id = try reader.ulid()
                let origin = try reader.reference(into: origins)
                heads.append(
                    FieldHead(id: id, origin: origin, value: JSONBytes(canonical: try reader.lengthPrefixed())))
            }
            fields.append(FieldRegister(name: name, heads: heads))
        }
        statusCount = try reader.integer()
        guard let digest = StateDigest(bytes: try reader.bytes(16)) else {
            throw CorruptDataError("truncated history digest")
        }
        statusHistoryDigest = digest
        for _ in 0..<(try reader.count(minimumElementSize: 18)) {
            let id = try reader.ulid()
            let origin = try reader.reference(into: origins)
            statusHeads.append(StatusEntry(id: id, origin: origin, status: try reader.string()))
        }
        for _ in 0..<(try reader.count()) {
            let name = try reader.string()
            var elements: [SetElement] = []
            for _ in 0..<(try reader.count(minimumElementSize: 2)) {
                let element = JSONBytes(canonical: try reader.lengthPrefixed())
                elements.append(SetElement(element: element, adds: try reader.ulids()))
            }
            sets.append(SetState(name: name, elements: elements))
        }
        liveDeletes = try reader.ulids()
        dangling = try reader.ulids()
        if !reader.isAtEnd {
            let count = try reader.count(minimumElementSize: 17)
            guard count > 0 || !reader.isAtEnd else {
                throw CorruptDataError("an empty counter list is never written alone")
            }
            for _ in 0..<count {
                let name = try reader.string()
                guard counters.last.map({ $0.name < name }) ?? true else {
                    throw CorruptDataError("counters out of order")
                }
                counters.append(CounterState(name: name, sum: try reader.int128()))
            }
        }
        if !reader.isAtEnd {
            for _ in 0..<(try reader.count(minimumElementSize: 34)) {
                let id = try reader.ulid()
                let origin = try reader.ulid()
                let status = try reader.string()
                let base = try reader.ulids()
                let superseded = try reader.byte()
                guard superseded <= 1, proposals.last.map({ $0.id < id }) ?? true else {
                    throw CorruptDataError("a pending proposal out of order or malformed")
                }
                proposals.append(
                    PendingProposal(id: id, origin: origin, status: status, base: base, superseded: superseded == 1))
            }
            for _ in 0..<(try reader.count(minimumElementSize: 50)) {
                let id = try reader.ulid()
                let origin = try reader.ulid()
                let status = try reader.string()
                let reason = try reader.string()
                let decision = try reader.ulid()
                guard rejected.last.map({ $0.id < id }) ?? true else {
                    throw CorruptDataError("rejected proposals out of order")
                }
                rejected.append(
                    RejectedProposal(id: id, origin: origin, status: status, reason: reason, decision: decision))
            }
            for _ in 0..<(try reader.count(minimumElementSize: 33)) {
                let id = try reader.ulid()
                let origin = try reader.ulid()
                let entry = StatusEntry(id: id, origin: origin, status: try reader.string())
                guard proposers.last.map({ $0.origin < origin }) ?? true else {
                    throw CorruptDataError("proposers out of order")
                }
                proposers.append(entry)
            }
            for _ in 0..<(try reader.count(minimumElementSize: 33)) {
                let id = try reader.ulid()
                let proposal = try reader.ulid()
                let flags = try reader.byte()
                guard flags < 8 else { throw CorruptDataError("a waiting decision's flags are \(flags)") }
                let reason = flags & 4 != 0 ? try reader.string() : nil
                let entry = AwaitingDecision(
                    id: id, proposal: proposal, accept: flags & 1 != 0, reason: reason, alsoNamed: flags & 2 != 0)
                guard awaiting.last.map({ ($0.proposal, $0.id) < (proposal, id) }) ?? true else {
                    throw CorruptDataError("waiting decisions out of order")
                }
                awaiting.append(entry)
            }
            guard hasProposals else { throw CorruptDataError("an empty proposals section is never written") }
        }
        guard reader.isAtEnd else { throw CorruptDataError("trailing bytes after projection state") }
    }

    /// The state as `get` returns it: canonical JSON (keys sorted, no whitespace), with
    /// `history` — every status event of the entity in id order — under "status".
    ///
    /// ```
    /// {"conflicts":{"fields":{F:[{"id","origin","value"}]},"status":[{"id","origin","status"}]},
    ///  "counters":{C:SUM} (only when a counter exists),"deleted":false,"entity":"job/42","events":17,"fields":{...},"sets":{S:[...]},
    ///  "status":{"current":S,"history":[{"id","origin","status"}],"id":ID,
    ///            "proposed":[{"id","origin","status"}] (only when pending),
    ///            "rejected":[{"decision","id","origin","reason","status"}] (only when any)}
    ///   or null (no status and no proposal),"version":ID}
    /// ```
    public func canonicalJSON(history: [StatusEntry]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(512)
        out.append(UInt8(ascii: "{"))

        CanonicalWriter.appendKey("conflicts", to: &out)
        out.append(UInt8(ascii: "{"))
        CanonicalWriter.appendKey("fields", to: &out)
        out.append(UInt8(ascii: "{"))
        var first = true
        for field in fields where field.heads.count > 1 {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            CanonicalWriter.appendString(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            out.append(UInt8(ascii: "["))
            for (index, head) in field.heads.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                out.append(UInt8(ascii: "{"))
                Self.appendIDAndOrigin(head.id, head.origin, to: &out)
                out.append(UInt8(ascii: ","))
                CanonicalWriter.appendKey("value", to: &out)
                out.append(contentsOf: head.value.bytes)
                out.append(UInt8(ascii: "}"))
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: Array("},".utf8))
        CanonicalWriter.appendKey("status", to: &out)
        Self.appendStatusEntries(statusHeads.count > 1 ? statusHeads : [], to: &out)
        out.append(contentsOf: Array("},".utf8))

        if !counters.isEmpty {
            CanonicalWriter.appendKey("counters", to: &out)
            out.append(UInt8(ascii: "{"))
            for (index, counter) in counters.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(counter.name, to: &out)
                out.append(UInt8(ascii: ":"))
                out.append(contentsOf: counter.sum.description.utf8)
            }
            out.append(contentsOf: Array("},".utf8))
        }

        CanonicalWriter.appendKey("deleted", to: &out)
        CanonicalWriter.appendBool(isDeleted, to: &out)
        out.append(UInt8(ascii: ","))
        CanonicalWriter.appendKey("entity", to: &out)
        CanonicalWriter.appendString(utf8: entity.bytes, to: &out)
        out.append(UInt8(ascii: ","))
        CanonicalWriter.appendKey("events", to: &out)
        CanonicalWriter.appendInteger(eventCount, to: &out)
        out.append(UInt8(ascii: ","))

        CanonicalWriter.appendKey("fields", to: &out)
        out.append(UInt8(ascii: "{"))
        first = true
        for field in fields where !field.winner.value.isNull {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            CanonicalWriter.appendString(field.name, to: &out)
            out.append(UInt8(ascii: ":"))
            out.append(contentsOf: field.winner.value.bytes)
        }
        out.append(contentsOf: Array("},".utf8))

        CanonicalWriter.appendKey("sets", to: &out)
        out.append(UInt8(ascii: "{"))
        for (index, set) in sets.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            CanonicalWriter.appendString(set.name, to: &out)
            out.append(contentsOf: Array(":[".utf8))
            for (position, element) in elements(ofSet: set).enumerated() {
                if position > 0 { out.append(UInt8(ascii: ",")) }
                out.append(contentsOf: element.bytes)
            }
            out.append(UInt8(ascii: "]"))
        }
        out.append(contentsOf: Array("},".utf8))

        CanonicalWriter.appendKey("status", to: &out)
        if currentStatus != nil || !proposals.isEmpty || !rejected.isEmpty {
            out.append(UInt8(ascii: "{"))
            CanonicalWriter.appendKey("current", to: &out)
            if let current = currentStatus {
                CanonicalWriter.appendString(current.status, to: &out)
            } else {
                CanonicalWriter.appendNull(to: &out)
            }
            out.append(UInt8(ascii: ","))
            CanonicalWriter.appendKey("history", to: &out)
            Self.appendStatusEntries(history, to: &out)
            out.append(UInt8(ascii: ","))
            CanonicalWriter.appendKey("id", to: &out)
            if let current = currentStatus {
                current.id.appendJSON(to: &out)
            } else {
                CanonicalWriter.appendNull(to: &out)
            }
            if !proposals.isEmpty {
                out.append(UInt8(ascii: ","))
                CanonicalWriter.appendKey("proposed", to: &out)
                Self.appendStatusEntries(
                    proposals.map { StatusEntry(id: $0.id, origin: $0.origin, status: $0.status) }, to: &out)
            }
            if !rejected.isEmpty {
                out.append(UInt8(ascii: ","))
                CanonicalWriter.appendKey("rejected", to: &out)
                out.append(UInt8(ascii: "["))
                for (index, entry) in rejected.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    out.append(UInt8(ascii: "{"))
                    CanonicalWriter.appendKey("decision", to: &out)
                    entry.decision.appendJSON(to: &out)
                    out.append(UInt8(ascii: ","))
                    Self.appendIDAndOrigin(entry.id, entry.origin, to: &out)
                    out.append(UInt8(ascii: ","))
                    CanonicalWriter.appendKey("reason", to: &out)
                    CanonicalWriter.appendString(entry.reason, to: &out)
                    out.append(UInt8(ascii: ","))
                    CanonicalWriter.appendKey("status", to: &out)
                    CanonicalWriter.appendString(entry.status, to: &out)
                    out.append(UInt8(ascii: "}"))
                }
                out.append(UInt8(ascii: "]"))
            }
            out.append(UInt8(ascii: "}"))
        } else {
            CanonicalWriter.appendNull(to: &out)
        }
        out.append(UInt8(ascii: ","))
        CanonicalWriter.appendKey("version", to: &out)
        if let version { version.appendJSON(to: &out) } else { CanonicalWriter.appendNull(to: &out) }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// The entity's fingerprint for the store digest: the hash of `encoded()`, which holds
    /// the digest of the status history rather than the history. The encoding is a function
    /// of the state and the state a function of the entity's set of events, so equal event
    /// sets give equal hashes, in whatever order the events arrived.
    public func stateHash() -> StateHash {
        StateHash(hashing: encoded())
    }

    static func appendIDAndOrigin(_ id: ULID, _ origin: ULID, to out: inout [UInt8]) {
        CanonicalWriter.appendKey("id", to: &out)
        id.appendJSON(to: &out)
        out.append(UInt8(ascii: ","))
        CanonicalWriter.appendKey("origin", to: &out)
        origin.appendJSON(to: &out)
    }

    static func appendStatusEntries(_ entries: [StatusEntry], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "["))
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            appendIDAndOrigin(entry.id, entry.origin, to: &out)
            out.append(UInt8(ascii: ","))
            CanonicalWriter.appendKey("status", to: &out)
            CanonicalWriter.appendString(entry.status, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
    }
}
