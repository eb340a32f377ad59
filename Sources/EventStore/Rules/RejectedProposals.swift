import Projections

/// This node's own proposals that the authority rejected and that no newer proposal of
/// this node supersedes: counted under needs attention here, their origin, and listed by
/// `attention` (every node shows them in `get` under `status.rejected`).
///
/// Kept in the peers table under `rejected/<proposal id>`, written in the transaction that
/// folds the decision (or the newer proposal that supersedes one): a record is a function
/// of the entity's state, so `rebuild` writes them again from the states.
public struct RejectedOwnProposal: Equatable, Sendable {
    public var entity: EntityKey
    public var proposal: RejectedProposal

    public static let keyPrefix = "rejected/"

    public init(entity: EntityKey, proposal: RejectedProposal) {
        self.entity = entity
        self.proposal = proposal
    }

    static func key(_ id: ULID) -> [UInt8] { Array((keyPrefix + id.description).utf8) }

    func encoded() -> [UInt8] {
        JSONTree.encode([
            "entity": entity.description, "status": proposal.status, "reason": proposal.reason,
            "decision": proposal.decision.description, "origin": proposal.origin.description,
        ]) ?? []
    }

    init?(id: ULID, decoding bytes: [UInt8]) {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any],
            let entity = (object["entity"] as? String).flatMap({ try? Validation.entity($0) }),
            let status = object["status"] as? String, let reason = object["reason"] as? String,
            let decision = (object["decision"] as? String).flatMap(ULID.init),
            let origin = (object["origin"] as? String).flatMap(ULID.init)
        else { return nil }
        self.init(
            entity: entity,
            proposal: RejectedProposal(id: id, origin: origin, status: status, reason: reason, decision: decision))
    }

    /// The rejections of `state` that `origin` proposed.
    static func of(_ state: EntityState, origin: ULID) -> [RejectedProposal] {
        state.rejected.filter { $0.origin == origin }
    }

    /// Puts and deletes records so that they say what `state` says, given what they said
    /// before (`before`, the ids recorded for the entity).
    static func update(
        _ state: EntityState, before: [ULID], origin: ULID, table: Database, txn: inout WriteTransaction
    ) throws {
        let now = of(state, origin: origin)
        guard now.map(\.id) != before else { return }
        for id in before where !now.contains(where: { $0.id == id }) { _ = try txn.delete(table, key(id)) }
        for proposal in now where !before.contains(proposal.id) {
            try txn.put(
                table, key(proposal.id), RejectedOwnProposal(entity: state.entity, proposal: proposal).encoded())
        }
    }
}

extension EventLog {
    /// This node's rejected proposals, in proposal id order.
    public func rejectedOwnProposals() throws(EventStoreError) -> [RejectedOwnProposal] {
        try reading { txn in try rejectedOwnProposals(txn: txn) }
    }

    func rejectedOwnProposals(txn: borrowing some TransactionReading & ~Copyable) throws -> [RejectedOwnProposal] {
        let prefix = Array(RejectedOwnProposal.keyPrefix.utf8)
        return try txn.withCursor(tables.peers) { cursor in
            var records: [RejectedOwnProposal] = []
            var item = try cursor.seek(prefix)
            while let (key, value) = item, key.starts(with: prefix) {
                if let id = ULID(utf8: key.dropFirst(prefix.count)),
                    let record = RejectedOwnProposal(id: id, decoding: value)
                {
                    records.append(record)
                }
                item = try cursor.next()
            }
            return records
        }
    }
}
