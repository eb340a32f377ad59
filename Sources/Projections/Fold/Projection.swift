/// The fold: from an entity's events to its state. Pure — no I/O, no clocks.
///
/// The state is a function of the SET of events; arrival order never matters:
/// - a register (each field; the status) has heads: its events that no other event of the
///   same register names in its `base`; the head with the greatest id gives the value,
///   more than one head is a conflict;
/// - a set element is present while one of its add events is named by no remove's
///   `observed` (add wins);
/// - the entity is deleted while a delete event is named by no restore's `base`
///   (delete wins over concurrent edits, which are still folded);
/// - a counter is the sum of its `incr` amounts (addition does not care for order);
/// - `version` is the greatest id; the status history is every status event in id order,
///   proposals included;
/// - a proposal (a status event made away from its type's authority) is a status event only
///   once a `decide` accepts it: until then it is pending, and a rejected one is listed with
///   its reason until a newer proposal of the same origin supersedes it. Of two decisions on
///   one proposal (only two nodes claiming the authority's name make them), the one with the
///   smaller id counts.
public enum Projection {
    /// The status history of a set of events: every status event of `entity`, in id order.
    public static func statusHistory(_ entity: EntityKey, _ events: some Sequence<Event>) -> [StatusEntry] {
        var entries: [ULID: StatusEntry] = [:]
        for event in events where event.entity == entity {
            switch event.body {
            case .status(let status, _), .propose(let status, _):
                entries[event.id] = StatusEntry(id: event.id, origin: event.origin, status: status)
            default: break
            }
        }
        return entries.values.sorted { $0.id < $1.id }
    }

    /// The state as `get` returns it, from a set of events: the fold, rendered with its history.
    public static func canonicalJSON(_ entity: EntityKey, _ events: [Event]) -> [UInt8] {
        fold(entity, events).canonicalJSON(history: statusHistory(entity, events))
    }

    /// Folds a whole set of events (in any order) of one entity. Duplicates are ignored.
    public static func fold(_ entity: EntityKey, _ events: some Sequence<Event>) -> EntityState {
        var state = EntityState(entity: entity)
        var byID: [ULID: Event] = [:]
        for event in events where event.entity == entity { byID[event.id] = event }
        let ordered = byID.values.sorted { $0.id < $1.id }

        // Each proposal's decision: the decide event with the smallest id that names it.
        var decisions: [ULID: (id: ULID, accept: Bool, reason: String?)] = [:]
        // What events other than decisions name, for decisions whose proposal is missing.
        var namedOtherwise = Set<ULID>()
        for event in ordered {
            if case .decide(let proposal, let accept, let reason) = event.body {
                if decisions[proposal] == nil { decisions[proposal] = (event.id, accept, reason) }
            } else {
                namedOtherwise.formUnion(event.body.namedIDs)
            }
        }
        for event in ordered {
            if case .decide(let proposal, let accept, let reason) = event.body, byID[proposal] == nil {
                state.awaiting.append(
                    AwaitingDecision(
                        id: event.id, proposal: proposal, accept: accept, reason: reason,
                        alsoNamed: namedOtherwise.contains(proposal)))
            }
        }
        state.awaiting.sort { $0.proposal == $1.proposal ? $0.id < $1.id : $0.proposal < $1.proposal }
        // What each register's events are named by.
        var namedByField: [String: Set<ULID>] = [:]
        var namedByStatus = Set<ULID>()
        var observed = Set<ULID>()
        var restored = Set<ULID>()
        var named = Set<ULID>()
        for event in ordered {
            switch event.body {
            case .edit(_, let base):
                for entry in base { namedByField[entry.field, default: []].formUnion(entry.heads) }
            case .status(_, let base): namedByStatus.formUnion(base)
            case .propose(_, let base) where decisions[event.id]?.accept == true: namedByStatus.formUnion(base)
            case .remove(_, _, let ids): observed.formUnion(ids)
            case .restore(let base): restored.formUnion(base)
            case .add, .delete, .incr, .propose, .decide: break
            }
            named.formUnion(event.body.namedIDs)
        }

        var fields: [String: [FieldHead]] = [:]
        var sets: [String: [JSONBytes: [ULID]]] = [:]
        var counters: [String: Int128] = [:]
        var proposers: [ULID: StatusEntry] = [:]
        var rejected: [RejectedProposal] = []
        for event in ordered {
            state.eventCount += 1
            state.version = event.id
            switch event.body {
            case .edit(let changes, _):
                for change in changes where !(namedByField[change.name]?.contains(event.id) ?? false) {
                    fields[change.name, default: []].append(
                        FieldHead(id: event.id, origin: event.origin, value: change.value))
                }
            case .status(let status, _):
                let entry = StatusEntry(id: event.id, origin: event.origin, status: status)
                state.statusCount += 1
                state.statusHistoryDigest.add(entry.hash())
                if !namedByStatus.contains(event.id) { state.statusHeads.append(entry) }
            case .propose(let status, let base):
                let entry = StatusEntry(id: event.id, origin: event.origin, status: status)
                state.statusCount += 1
                state.statusHistoryDigest.add(entry.hash())
                proposers[event.origin] = entry
                switch decisions[event.id] {
                case nil:
                    state.proposals.append(
                        PendingProposal(
                            id: event.id, origin: event.origin, status: status, base: base,
                            superseded: namedByStatus.contains(event.id)))
                case let decision? where decision.accept:
                    if !namedByStatus.contains(event.id) { state.statusHeads.append(entry) }
                case let decision?:
                    rejected.append(
                        RejectedProposal(
                            id: event.id, origin: event.origin, status: status, reason: decision.reason ?? "",
                            decision: decision.id))
                }
            case .add(let set, let element):
                if !observed.contains(event.id) { sets[set, default: [:]][element, default: []].append(event.id) }
            case .delete:
                if !restored.contains(event.id) { state.liveDeletes.append(event.id) }
            case .incr(let counter, let amount):
                counters[counter, default: 0] += Int128(amount)
            case .remove, .restore, .decide:
                break
            }
        }
        // A rejection stays listed while its proposal is its origin's newest.
        state.rejected = rejected.filter { proposers[$0.origin]?.id == $0.id }
        state.proposers = proposers.values.sorted { $0.origin < $1.origin }
        // `ordered` is in id order, so every list built above is already sorted.
        state.fields = fields.map { FieldRegister(name: $0.key, heads: $0.value) }.sorted { $0.name < $1.name }
        state.sets = sets.map { name, elements in
            SetState(
                name: name,
                elements: elements.map { SetElement(element: $0.key, adds: $0.value) }.sorted {
                    $0.element < $1.element
                })
        }.sorted { $0.name < $1.name }
        state.dangling = named.subtracting(byID.keys).sorted()
        state.counters = counters.map { CounterState(name: $0.key, sum: $0.value) }.sorted { $0.name < $1.name }
        return state
    }
}

/// What `EntityState.apply` did.
public enum ApplyOutcome: Equatable, Sendable {
    case applied
    /// The event is already named by a folded one (it arrived after an event that
    /// supersedes it): fold the entity again from all its events.
    case needsRefold
}

extension EntityState {
    /// Folds one more event in, giving the same state as `Projection.fold` over the set
    /// with that event added.
    ///
    /// - Parameters:
    ///   - event: an event of this entity that is not folded in yet.
    ///   - isFolded: whether an id is among this entity's folded events; asked only about
    ///     ids the event names that are not current heads (rare: replicated events whose
    ///     context is older than ours, or events naming ids we never received).
    /// - Returns: `.needsRefold`, leaving the state untouched, when a folded event already
    ///   names this one.
    public mutating func apply(_ event: Event, isFolded: (ULID) -> Bool) -> ApplyOutcome {
        precondition(event.entity == entity, "event of \(event.entity) applied to \(entity)")
        // A proposal that only its one decision named so far is decided at once; anything
        // else a folded event names already needs the whole fold.
        var decision: AwaitingDecision?
        if dangling.containsSorted(event.id) {
            let waiting = awaiting.filter { $0.proposal == event.id }
            guard case .propose = event.body, waiting.count == 1, !waiting[0].alsoNamed else { return .needsRefold }
            decision = waiting[0]
        }
        // A decision on a proposal folded but no longer pending: a second decision, which
        // counts only when its id is the smaller one. Rare; the whole fold settles it.
        if case .decide(let proposal, _, _) = event.body, pendingIndex(proposal) == nil, isFolded(proposal) {
            return .needsRefold
        }

        if let decision {
            dangling.removeSorted(event.id)
            awaiting.removeAll { $0.proposal == decision.proposal }
        }
        eventCount += 1
        if version.map({ $0 < event.id }) ?? true { version = event.id }

        // Insert the event first, then remove what it names: an event naming itself
        // (only a hostile peer makes one) ends up superseded, as in the full fold.
        var unmatched: [ULID] = []
        switch event.body {
        case .edit(let changes, let base):
            for change in changes {
                insertHead(FieldHead(id: event.id, origin: event.origin, value: change.value), field: change.name)
            }
            for entry in base {
                for id in entry.heads where !removeHead(id, field: entry.field) { unmatched.append(id) }
            }
        case .status(let status, let base):
            let entry = StatusEntry(id: event.id, origin: event.origin, status: status)
            statusCount += 1
            statusHistoryDigest.add(entry.hash())
            statusHeads.insert(entry, at: statusHeads.partitioningIndex { $0.id < event.id })
            supersede(base, unmatched: &unmatched)
        case .propose(let status, let base):
            let entry = StatusEntry(id: event.id, origin: event.origin, status: status)
            statusCount += 1
            statusHistoryDigest.add(entry.hash())
            noteProposal(entry)
            // Pending: no decision names it (one would have left it dangling), and no status
            // event yet (which would too).
            proposals.insert(
                PendingProposal(id: event.id, origin: event.origin, status: status, base: base),
                at: proposals.partitioningIndex { $0.id < event.id })
            for id in base where !statusHeads.contains(where: { $0.id == id }) && pendingIndex(id) == nil {
                unmatched.append(id)
            }
            if let decision, let index = pendingIndex(event.id) {
                decide(
                    index, decision: decision.id, accept: decision.accept, reason: decision.reason,
                    unmatched: &unmatched)
            }
        case .decide(let proposal, let accept, let reason):
            if let index = pendingIndex(proposal) {
                decide(index, decision: event.id, accept: accept, reason: reason, unmatched: &unmatched)
            } else {
                // Not folded (checked above): it stays dangling, and the decision waits for it.
                let alsoNamed = dangling.containsSorted(proposal) && !awaiting.contains { $0.proposal == proposal }
                let entry = AwaitingDecision(
                    id: event.id, proposal: proposal, accept: accept, reason: reason, alsoNamed: alsoNamed)
                awaiting.insert(
                    entry,
                    at: awaiting.partitioningIndex {
                        $0.proposal == proposal ? $0.id < event.id : $0.proposal < proposal
                    })
                unmatched.append(proposal)
            }
        case .add(let set, let element):
            insertAdd(event.id, set: set, element: element)
        case .remove(let set, let element, let observed):
            for id in observed where !removeAdd(id, preferring: set, element: element) { unmatched.append(id) }
        case .delete:
            liveDeletes.insertSorted(event.id)
        case .restore(let base):
            for id in base where !liveDeletes.removeSorted(id) { unmatched.append(id) }
        case .incr(let counter, let amount):
            add(amount, toCounter: counter)
        }
        let isDecision = event.body.kind == .decide
        for id in unmatched where id != event.id && !isFolded(id) {
            dangling.insertSorted(id)
            // A proposal that a decision waits for, named by another kind of event too.
            if !isDecision {
                for index in awaiting.indices where awaiting[index].proposal == id { awaiting[index].alsoNamed = true }
            }
        }
        return .applied
    }

    /// Decides the pending proposal at `index`: accepted, it becomes a status event (a head
    /// unless one names it already); rejected, it is listed while it is its origin's newest.
    mutating func decide(_ index: Int, decision: ULID, accept: Bool, reason: String?, unmatched: inout [ULID]) {
        let pending = proposals.remove(at: index)
        if accept {
            if !pending.superseded {
                statusHeads.insert(
                    StatusEntry(id: pending.id, origin: pending.origin, status: pending.status),
                    at: statusHeads.partitioningIndex { $0.id < pending.id })
            }
            supersede(pending.base, unmatched: &unmatched)
        } else if latestProposal(of: pending.origin) == pending.id {
            rejected.insert(
                RejectedProposal(
                    id: pending.id, origin: pending.origin, status: pending.status, reason: reason ?? "",
                    decision: decision),
                at: rejected.partitioningIndex { $0.id < pending.id })
        }
    }

    /// Removes the status heads `base` names; a pending proposal it names is marked, so it
    /// becomes no head when accepted. What it names that is neither goes to `unmatched`.
    mutating func supersede(_ base: [ULID], unmatched: inout [ULID]) {
        for id in base {
            if let index = statusHeads.firstIndex(where: { $0.id == id }) {
                statusHeads.remove(at: index)
            } else if let index = pendingIndex(id) {
                proposals[index].superseded = true
            } else {
                unmatched.append(id)
            }
        }
    }

    public func pendingIndex(_ id: ULID) -> Int? {
        let index = proposals.partitioningIndex { $0.id < id }
        return index < proposals.count && proposals[index].id == id ? index : nil
    }

    func latestProposal(of origin: ULID) -> ULID? {
        let index = proposers.partitioningIndex { $0.origin < origin }
        return index < proposers.count && proposers[index].origin == origin ? proposers[index].id : nil
    }

    /// Records a proposal as its origin's newest when it is, dropping the rejections it supersedes.
    mutating func noteProposal(_ entry: StatusEntry) {
        let index = proposers.partitioningIndex { $0.origin < entry.origin }
        if index < proposers.count, proposers[index].origin == entry.origin {
            guard proposers[index].id < entry.id else { return }
            proposers[index] = entry
        } else {
            proposers.insert(entry, at: index)
        }
        rejected.removeAll { $0.origin == entry.origin && $0.id < entry.id }
    }

    mutating func add(_ amount: Int64, toCounter name: String) {
        let index = counters.partitioningIndex { $0.name < name }
        if index < counters.count, counters[index].name == name {
            counters[index].sum += Int128(amount)
        } else {
            counters.insert(CounterState(name: name, sum: Int128(amount)), at: index)
        }
    }

    mutating func insertHead(_ head: FieldHead, field name: String) {
        let index = fields.partitioningIndex { $0.name < name }
        if index < fields.count, fields[index].name == name {
            let at = fields[index].heads.partitioningIndex { $0.id < head.id }
            fields[index].heads.insert(head, at: at)
        } else {
            fields.insert(FieldRegister(name: name, heads: [head]), at: index)
        }
    }

    mutating func removeHead(_ id: ULID, field name: String) -> Bool {
        let index = fields.partitioningIndex { $0.name < name }
        guard index < fields.count, fields[index].name == name else { return false }
        guard let at = fields[index].heads.firstIndex(where: { $0.id == id }) else { return false }
        fields[index].heads.remove(at: at)
        if fields[index].heads.isEmpty { fields.remove(at: index) }
        return true
    }

    mutating func insertAdd(_ id: ULID, set name: String, element: JSONBytes) {
        let setIndex = sets.partitioningIndex { $0.name < name }
        if setIndex == sets.count || sets[setIndex].name != name {
            sets.insert(SetState(name: name, elements: []), at: setIndex)
        }
        let elementIndex = sets[setIndex].elements.partitioningIndex { $0.element < element }
        if elementIndex < sets[setIndex].elements.count, sets[setIndex].elements[elementIndex].element == element {
            sets[setIndex].elements[elementIndex].adds.insertSorted(id)
        } else {
            sets[setIndex].elements.insert(SetElement(element: element, adds: [id]), at: elementIndex)
        }
    }

    /// Removes a live add by id, looking first where the remove says it is.
    mutating func removeAdd(_ id: ULID, preferring name: String, element: JSONBytes) -> Bool {
        let setIndex = sets.partitioningIndex { $0.name < name }
        if setIndex < sets.count, sets[setIndex].name == name {
            let elementIndex = sets[setIndex].elements.partitioningIndex { $0.element < element }
            if elementIndex < sets[setIndex].elements.count, sets[setIndex].elements[elementIndex].element == element,
                removeAdd(id, setIndex: setIndex, elementIndex: elementIndex)
            {
                return true
            }
        }
        // A remove may name any add of the entity; look everywhere else.
        for s in sets.indices {
            for e in sets[s].elements.indices where sets[s].elements[e].adds.containsSorted(id) {
                return removeAdd(id, setIndex: s, elementIndex: e)
            }
        }
        return false
    }

    mutating func removeAdd(_ id: ULID, setIndex: Int, elementIndex: Int) -> Bool {
        guard sets[setIndex].elements[elementIndex].adds.removeSorted(id) else { return false }
        if sets[setIndex].elements[elementIndex].adds.isEmpty {
            sets[setIndex].elements.remove(at: elementIndex)
            if sets[setIndex].elements.isEmpty { sets.remove(at: setIndex) }
        }
        return true
    }
}
