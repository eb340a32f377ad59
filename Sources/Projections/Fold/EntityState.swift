/// One head of a field register: an edit of that field that no other edit supersedes.
public struct FieldHead: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    /// The value set, `null` when the edit cleared the field.
    public var value: JSONBytes
}

/// A field: its heads in id order. A register exists only while it has a head.
public struct FieldRegister: Equatable, Sendable {
    public var name: String
    public var heads: [FieldHead]

    /// The head with the greatest id decides the value.
    public var winner: FieldHead { heads[heads.count - 1] }
}

/// One status event, as the history and the status heads list it.
public struct StatusEntry: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    public var status: String

    public init(id: ULID, origin: ULID, status: String) {
        self.id = id
        self.origin = origin
        self.status = status
    }

    /// `{"id":…,"origin":…,"status":…}`, as the state's JSON lists it.
    public func canonicalJSON() -> [UInt8] {
        var out: [UInt8] = []
        EntityState.appendStatusEntries([self], to: &out)
        return Array(out.dropFirst().dropLast())
    }

    /// The entry's share of the status history digest: the hash of id, origin and status.
    public func hash() -> StateHash {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32 + status.utf8.count)
        id.append(to: &bytes)
        origin.append(to: &bytes)
        bytes.append(contentsOf: status.utf8)
        return StateHash(hashing: bytes)
    }
}

/// One element of an OR-set with its live add events (those no remove has observed).
public struct SetElement: Equatable, Sendable {
    public var element: JSONBytes
    public var adds: [ULID]
}

/// An OR-set: elements with at least one live add, sorted by canonical element bytes.
public struct SetState: Equatable, Sendable {
    public var name: String
    public var elements: [SetElement]
}

/// A counter: the sum of every `incr` of it. The sum is kept exact beyond 64 bits: a local
/// append that would take it out of a signed 64-bit integer is refused, but concurrent
/// increments from several nodes may together go past it, and a sum that depended on the
/// order they arrived in would let the nodes diverge.
public struct CounterState: Equatable, Sendable {
    public var name: String
    public var sum: Int128

    public init(name: String, sum: Int128) {
        self.name = name
        self.sum = sum
    }
}

/// A status proposal no decision has answered yet (on this node's events).
public struct PendingProposal: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    public var status: String
    /// The status heads its author saw: what it supersedes once accepted.
    public var base: [ULID]
    /// Whether a status event already names it: accepted, it then becomes no head.
    public var superseded: Bool

    public init(id: ULID, origin: ULID, status: String, base: [ULID], superseded: Bool = false) {
        self.id = id
        self.origin = origin
        self.status = status
        self.base = base
        self.superseded = superseded
    }
}

/// A proposal the authority rejected, listed until a newer proposal of its origin supersedes it.
public struct RejectedProposal: Equatable, Sendable {
    public var id: ULID
    public var origin: ULID
    public var status: String
    public var reason: String
    /// The rejecting `decide` event.
    public var decision: ULID

    public init(id: ULID, origin: ULID, status: String, reason: String, decision: ULID) {
        self.id = id
        self.origin = origin
        self.status = status
        self.reason = reason
        self.decision = decision
    }
}

/// A decision whose proposal is not folded yet: it came first, through another peer or in
/// another origin's batch. Kept so the proposal, when it comes, is decided at once rather
/// than by folding the entity again.
public struct AwaitingDecision: Equatable, Sendable {
    public var id: ULID
    public var proposal: ULID
    public var accept: Bool
    public var reason: String?
    /// Whether an event other than a decision names the proposal too: then its arrival
    /// folds the entity again.
    public var alsoNamed: Bool

    public init(id: ULID, proposal: ULID, accept: Bool, reason: String?, alsoNamed: Bool) {
        self.id = id
        self.proposal = proposal
        self.accept = accept
        self.reason = reason
        self.alsoNamed = alsoNamed
    }
}

/// The folded state of one entity.
///
/// It holds exactly what is needed to fold further events in without reading the old
/// ones: register heads, the status heads, live adds per set element, live deletes, and
/// `dangling` — ids named by folded events that are not (yet) among them. Every
/// collection is kept sorted, so equal event sets give equal values and equal encodings.
///
/// The status history (every status event) grows for as long as the entity lives, so it
/// is not kept here: only its length and a digest of its entries are, and whoever
/// renders the state supplies the history (`canonicalJSON(history:)`). Folding an event
/// in costs the same however long the history is.
public struct EntityState: Equatable, Sendable {
    public let entity: EntityKey
    /// The greatest event id folded in.
    public internal(set) var version: ULID?
    public internal(set) var eventCount: Int
    /// Field registers sorted by name.
    public internal(set) var fields: [FieldRegister]
    /// The status events no other status event supersedes, in id order.
    public internal(set) var statusHeads: [StatusEntry]
    /// How many status events are folded in (the length of the history).
    public internal(set) var statusCount: Int
    /// The sum of the hashes of every status event's entry: the history, order-free.
    public internal(set) var statusHistoryDigest: StateDigest
    /// Sets sorted by name.
    public internal(set) var sets: [SetState]
    /// Delete events no restore has named, in id order.
    public internal(set) var liveDeletes: [ULID]
    /// Ids named in some folded event's causal context that are not folded here, in order.
    public internal(set) var dangling: [ULID]
    /// Counters sorted by name; one exists once an `incr` names it.
    public internal(set) var counters: [CounterState]
    /// Status proposals without a decision, in id order.
    public internal(set) var proposals: [PendingProposal]
    /// Rejected proposals no newer proposal of the same origin supersedes, in id order.
    public internal(set) var rejected: [RejectedProposal]
    /// The newest proposal of each origin that made one, sorted by origin (`id` is the
    /// proposal's, `status` its status): what tells a rejection superseded.
    public internal(set) var proposers: [StatusEntry]
    /// Decisions on proposals not folded here, by proposal then id.
    public internal(set) var awaiting: [AwaitingDecision]

    public init(entity: EntityKey) {
        self.entity = entity
        self.version = nil
        self.eventCount = 0
        self.fields = []
        self.statusHeads = []
        self.statusCount = 0
        self.statusHistoryDigest = StateDigest()
        self.sets = []
        self.liveDeletes = []
        self.dangling = []
        self.counters = []
        self.proposals = []
        self.rejected = []
        self.proposers = []
        self.awaiting = []
    }

    /// Whether the entity holds any proposal, pending or rejected (the state's encoding and
    /// JSON carry them only then).
    public var hasProposals: Bool {
        !proposals.isEmpty || !rejected.isEmpty || !proposers.isEmpty || !awaiting.isEmpty
    }

    public var isDeleted: Bool { !liveDeletes.isEmpty }
    public var exists: Bool { eventCount > 0 }

    /// The status event that is current: the head with the greatest id.
    public var currentStatus: StatusEntry? { statusHeads.last }

    /// Ids of the status heads (the `base` of a new status event).
    public var statusHeadIDs: [ULID] { statusHeads.map(\.id) }

    /// Names of fields with more than one head.
    public var conflictingFields: [String] {
        fields.filter { $0.heads.count > 1 }.map(\.name)
    }

    public var hasStatusConflict: Bool { statusHeads.count > 1 }
    public var hasConflicts: Bool { hasStatusConflict || fields.contains { $0.heads.count > 1 } }

    /// A counter's sum (nil while no `incr` names it).
    public func counter(_ name: String) -> Int128? {
        let index = counters.partitioningIndex { $0.name < name }
        return index < counters.count && counters[index].name == name ? counters[index].sum : nil
    }

    public func field(_ name: String) -> FieldRegister? {
        fields.first { $0.name == name }
    }

    /// Current heads of a field (the `base` for an edit of it).
    public func heads(ofField name: String) -> [ULID] {
        field(name)?.heads.map(\.id) ?? []
    }

    /// Live add events of an element (the `observed` for a remove of it).
    public func liveAdds(set name: String, element: JSONBytes) -> [ULID] {
        guard let set = sets.first(where: { $0.name == name }) else { return [] }
        return set.elements.first { $0.element == element }?.adds ?? []
    }

    /// Elements of a set in presentation order: by the smallest id among their live adds.
    public func elements(ofSet set: SetState) -> [JSONBytes] {
        set.elements.sorted { $0.adds[0] < $1.adds[0] }.map(\.element)
    }
}

// MARK: - Sorted-array helpers

extension Array {
    /// Index of the first element not ordered before `key` (binary search).
    func partitioningIndex(where isBefore: (Element) -> Bool) -> Int {
        var low = 0
        var high = count
        while low < high {
            let mid = (low + high) / 2
            if isBefore(self[mid]) { low = mid + 1 } else { high = mid }
        }
        return low
    }
}

extension Array where Element == ULID {
    /// Inserts keeping order; returns false when already present.
    @discardableResult
    mutating func insertSorted(_ id: ULID) -> Bool {
        if let last, last < id {
            append(id)
            return true
        }
        let index = partitioningIndex { $0 < id }
        if index < count, self[index] == id { return false }
        insert(id, at: index)
        return true
    }

    @discardableResult
    mutating func removeSorted(_ id: ULID) -> Bool {
        let index = partitioningIndex { $0 < id }
        guard index < count, self[index] == id else { return false }
        remove(at: index)
        return true
    }

    func containsSorted(_ id: ULID) -> Bool {
        let index = partitioningIndex { $0 < id }
        return index < count && self[index] == id
    }
}
