import Projections
import TestSupport

let job = EntityKey(validated: Array("job/42".utf8))

func json(_ text: String) -> JSONBytes { try! JSONBytes(parsing: text) }

func id(_ ms: UInt64, _ low: UInt64 = 0) -> ULID { ULID(high: ms << 16, low: low) }

/// A replica of one entity that makes events the way a node does: causal context from its
/// own fold of the events it knows.
struct Replica {
    let origin: ULID
    var known: [ULID: Event] = [:]
    var state: EntityState
    var clockMs: UInt64
    var counter: UInt64 = 0
    /// Whether the entity's type has an authority; `isAuthority`: this replica is it (its
    /// status events are plain, the others' are proposals, and it decides them).
    var hasAuthority = false
    var isAuthority = false

    init(origin: ULID, entity: EntityKey, clockMs: UInt64) {
        self.origin = origin
        self.state = EntityState(entity: entity)
        self.clockMs = clockMs
    }

    mutating func nextID(_ rng: inout SeededGenerator) -> ULID {
        clockMs += UInt64.random(in: 0...3, using: &rng)
        counter += 1
        // Greater than anything known when the clock allows, like the hybrid clock.
        var id = ULID(high: clockMs << 16 | (origin.low & 0xFFFF), low: counter)
        if let top = known.keys.max(), top.timestamp <= clockMs + 50, id <= top {
            id = ULID(high: top.high, low: top.low &+ 1)
        }
        return id
    }

    mutating func learn(_ event: Event) {
        guard known[event.id] == nil else { return }
        known[event.id] = event
        let outcome = state.apply(event) { known[$0] != nil && $0 != event.id }
        if outcome == .needsRefold { state = Projection.fold(state.entity, known.values) }
    }

    /// Makes one random local event from this replica's view, or nil when the view forbids it.
    mutating func act(_ rng: inout SeededGenerator) -> Event? {
        let fields = ["address", "phone", "notes"]
        let elements = ["\"valve-3\"", "\"gasket\"", "{\"b\":1,\"a\":[2]}", "7"]
        let values = ["\"12 Main St\"", "\"14 Main St\"", "null", "3", "{\"floor\":2}"]
        let body: EventBody
        if state.isDeleted {
            guard Bool.random(using: &rng) else { return nil }
            body = .restore(base: state.liveDeletes)
        } else {
            switch Int.random(in: 0..<23, using: &rng) {
            case 20..<23:
                // Amounts at the ends of 64 bits as well: concurrent ones sum past them.
                let amount = [1, -1, 5, Int64.max, Int64.min].randomElement(using: &rng)!
                body = .incr(counter: ["parts_used", "visits"].randomElement(using: &rng)!, amount: amount)
            case 0..<7:
                var chosen = Array(fields.shuffled(using: &rng).prefix(Int.random(in: 1...2, using: &rng)))
                chosen.sort()
                let changes = chosen.map { FieldChange(name: $0, value: json(values.randomElement(using: &rng)!)) }
                let base = chosen.compactMap { name -> FieldBase? in
                    let heads = state.heads(ofField: name)
                    return heads.isEmpty ? nil : FieldBase(field: name, heads: heads)
                }
                body = .edit(fields: changes, base: base)
            case 7..<11:
                let status = ["assigned", "en_route", "on_site", "done"].randomElement(using: &rng)!
                body =
                    hasAuthority && !isAuthority
                    ? .propose(status, base: state.statusHeadIDs) : .status(status, base: state.statusHeadIDs)
            case 11..<15:
                body = .add(set: "parts", element: json(elements.randomElement(using: &rng)!))
            case 15..<18:
                let element = json(elements.randomElement(using: &rng)!)
                body = .remove(set: "parts", element: element, observed: state.liveAdds(set: "parts", element: element))
            default:
                body = .delete
            }
        }
        let event = Event(id: nextID(&rng), origin: origin, entity: state.entity, body: body)
        learn(event)
        return event
    }

    /// As the authority does on storing them: decides every pending proposal it holds,
    /// accepting one made from the current status heads (and, to have both outcomes, only
    /// moves to a status other than the current one).
    mutating func decide(_ rng: inout SeededGenerator) -> [Event] {
        guard isAuthority else { return [] }
        var made: [Event] = []
        while let pending = state.proposals.first {
            let accept =
                !state.isDeleted && pending.base == state.statusHeadIDs && pending.status != state.currentStatus?.status
            let event = Event(
                id: nextID(&rng), origin: origin, entity: state.entity,
                body: .decide(proposal: pending.id, accept: accept, reason: accept ? nil : "stale or no move"))
            learn(event)
            made.append(event)
        }
        return made
    }
}

/// Several replicas working on one entity, exchanging events now and then.
///
/// With `authorities` above 0 the entity's type has an authority: the first replicas decide
/// (more than one only as two nodes claiming one name would), the rest propose.
func simulate(seed: UInt64, replicas count: Int, steps: Int, skewedReplica: Bool = true, authorities: Int = 0)
    -> [Event]
{
    var rng = SeededGenerator(seed: seed)
    var replicas = (0..<count).map { index in
        // One replica's clock runs far ahead: ids then disagree with causal order.
        let ahead: UInt64 = skewedReplica && index == count - 1 ? 10_000_000 : 0
        var replica = Replica(
            origin: ULID(high: 0xABCD, low: UInt64(index + 1)), entity: job, clockMs: 1_000_000 + ahead)
        replica.hasAuthority = authorities > 0
        replica.isAuthority = index < authorities
        return replica
    }
    for _ in 0..<steps {
        let r = Int.random(in: 0..<count, using: &rng)
        if Int.random(in: 0..<5, using: &rng) == 0 {
            let other = Int.random(in: 0..<count, using: &rng)
            // Deliver a random subset, in random order: replication gives no causal order.
            // Sorted first: a dictionary's order differs between runs, and a seed must give
            // the same events every time.
            let known = replicas[other].known.values.sorted { $0.id < $1.id }
            for event in known.shuffled(using: &rng) where Bool.random(using: &rng) {
                replicas[r].learn(event)
            }
        } else {
            _ = replicas[r].act(&rng)
        }
        _ = replicas[r].decide(&rng)
    }
    var all: [ULID: Event] = [:]
    for replica in replicas { all.merge(replica.known) { a, _ in a } }
    return Array(all.values).sorted { $0.id < $1.id }
}
