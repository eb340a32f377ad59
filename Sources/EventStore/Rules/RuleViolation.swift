import Projections

/// A replicated event that breaks a rule of this node's types file. Rules never refuse a
/// replicated event (the node that made it may run another version of the file), so it is
/// stored and folded like any other, and a record of it is kept in the peers table (key
/// `rule/<event id>`), listed by `attention` and counted by `status` until
/// `rule_violations.dismiss` removes it.
public struct RuleViolation: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    public var entity: EntityKey
    /// The rule it breaks, as a local append breaking it would be told.
    public var rule: String
    /// The peer it came from (its name, as dead letters give it), nil for an import.
    public var peer: String?
    public var detectedAt: UInt64

    public static let keyPrefix = "rule/"
    /// Records kept at most; past them a violation is stored and folded, not recorded.
    public static let maxRecords = 256

    public var key: String { RuleViolation.keyPrefix + id.description }

    public init(id: ULID, origin: ULID, entity: EntityKey, rule: String, peer: String?, detectedAt: UInt64) {
        self.id = id
        self.origin = origin
        self.entity = entity
        self.rule = rule
        self.peer = peer
        self.detectedAt = detectedAt
    }

    public func encoded() -> [UInt8] {
        var record: [String: Any] = [
            "id": id.description, "origin": origin.description, "entity": entity.description, "rule": rule,
            "detected_at": Int(clamping: detectedAt),
        ]
        if let peer { record["peer"] = peer }
        return JSONTree.encode(record) ?? []
    }

    /// nil for a record that does not decode.
    public init?(decoding bytes: [UInt8]) {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any],
            let id = (object["id"] as? String).flatMap(ULID.init),
            let origin = (object["origin"] as? String).flatMap(ULID.init),
            let entity = (object["entity"] as? String).flatMap({ try? Validation.entity($0) }),
            let rule = object["rule"] as? String
        else { return nil }
        self.init(
            id: id, origin: origin, entity: entity, rule: rule, peer: object["peer"] as? String,
            detectedAt: UInt64(max(0, object["detected_at"] as? Int ?? 0)))
    }
}

extension InputEvent.Change {
    /// What a stored event asked for, without the causal context its node gave it; nil for
    /// a proposal and a decision, which the authority's decision answers rather than a rule.
    init?(_ body: EventBody) {
        switch body {
        case .edit(let fields, _): self = .edit(fields)
        case .status(let status, _): self = .status(status)
        case .add(let set, let element): self = .add(set: set, element: element)
        case .remove(let set, let element, _): self = .remove(set: set, element: element)
        case .delete: self = .delete
        case .restore: self = .restore
        case .incr(let counter, let amount): self = .incr(counter: counter, amount: amount)
        case .propose, .decide: return nil
        }
    }
}

extension WriteBatch {
    /// Records `event`, replicated and about to be folded, when it breaks a rule of the types
    /// file against the entity's state before it (at most `RuleViolation.maxRecords`).
    mutating func recordRuleViolation(of event: Event, peer: String?, txn: inout WriteTransaction) throws {
        if case .decide(let proposal, _, _) = event.body {
            try recordSecondDecision(event, on: proposal, peer: peer, txn: &txn)
            return
        }
        guard !rules.types.isEmpty, rules.types[event.entity.type] != nil, let change = InputEvent.Change(event.body)
        else { return }
        let slot = try slot(event.entity, txn: txn)
        do {
            try rules.check(
                change, of: event.entity,
                currentStatus: touched[slot].state.currentStatus?.status)
            return
        } catch {
            try put(
                RuleViolation(
                    id: event.id, origin: event.origin, entity: event.entity, rule: error.message, peer: peer,
                    detectedAt: now), txn: &txn)
        }
    }

    /// Records a decision, replicated and about to be folded, on a proposal this node holds
    /// decided already: only two nodes deciding as one authority make two. The fold counts
    /// the decision with the smaller id, on every node alike; this says that it happened.
    mutating func recordSecondDecision(_ event: Event, on proposal: ULID, peer: String?, txn: inout WriteTransaction)
        throws
    {
        let slot = try slot(event.entity, txn: txn)
        guard touched[slot].state.pendingIndex(proposal) == nil else { return }
        guard
            try WriteBatch.isHeld(
                proposal, of: event.entity, unindexed: touched[slot].unindexed, tables: log.tables, txn: txn)
        else { return }
        let authority = rules.types[event.entity.type]?.authority.map { " (\($0))" } ?? ""
        try put(
            RuleViolation(
                id: event.id, origin: event.origin, entity: event.entity,
                rule:
                    "a second decision on proposal \(proposal): two nodes decide the status of \(event.entity.type) as its authority\(authority); the decision with the smaller id counts on every node. Give one of them another node_name",
                peer: peer, detectedAt: now), txn: &txn)
    }

    /// Keeps `record`, unless `RuleViolation.maxRecords` are kept already.
    mutating func put(_ record: RuleViolation, txn: inout WriteTransaction) throws {
        let prefix = Array(RuleViolation.keyPrefix.utf8)
        let held = try txn.withCursor(log.tables.peers) { cursor -> Int in
            var count = 0
            var item = try cursor.seek(prefix)
            while let (key, _) = item, key.starts(with: prefix), count < RuleViolation.maxRecords {
                count += 1
                item = try cursor.next()
            }
            return count
        }
        guard held < RuleViolation.maxRecords else { return }
        try txn.put(log.tables.peers, Array(record.key.utf8), record.encoded())
    }
}

extension EventLog {
    /// The rule violations recorded, in id order.
    public func ruleViolations() throws(EventStoreError) -> [RuleViolation] {
        try peerEntries().filter { $0.key.hasPrefix(RuleViolation.keyPrefix) }.compactMap {
            RuleViolation(decoding: $0.value)
        }
    }
}
