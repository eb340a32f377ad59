import TestSupport
import Testing

@testable import Projections

@Suite("Fold properties")
struct FoldPropertyTests {
    @Test("any arrival order gives byte-identical state", arguments: 1...40)
    func orderIndependence(seed: UInt64) {
        let events = simulate(seed: seed, replicas: 3, steps: 120)
        let reference = Projection.fold(job, events)
        let history = Projection.statusHistory(job, events)
        var rng = SeededGenerator(seed: seed * 7919)
        for _ in 0..<5 {
            let shuffled = events.shuffled(using: &rng)
            let state = Projection.fold(job, shuffled)
            #expect(state.canonicalJSON(history: history) == reference.canonicalJSON(history: history))
            #expect(Projection.statusHistory(job, shuffled) == history)
            #expect(state.encoded() == reference.encoded())
            #expect(state.stateHash() == reference.stateHash())
        }
    }

    @Test("incremental apply in any order equals the full fold", arguments: 1...40)
    func incrementalEqualsFold(seed: UInt64) {
        let events = simulate(seed: seed, replicas: 4, steps: 150)
        let reference = Projection.fold(job, events)
        let history = Projection.statusHistory(job, events)
        var rng = SeededGenerator(seed: seed &* 104_729)
        var refolds = 0
        for _ in 0..<5 {
            var state = EntityState(entity: job)
            var applied: [Event] = []
            var appliedIDs = Set<ULID>()
            for event in events.shuffled(using: &rng) {
                let outcome = state.apply(event) { appliedIDs.contains($0) }
                applied.append(event)
                appliedIDs.insert(event.id)
                if outcome == .needsRefold {
                    refolds += 1
                    state = Projection.fold(job, applied)
                }
                // Every prefix agrees with the fold of that prefix, not only the end.
                if applied.count % 37 == 0 {
                    #expect(state.encoded() == Projection.fold(job, applied).encoded())
                }
            }
            #expect(state.encoded() == reference.encoded())
            #expect(state.canonicalJSON(history: history) == reference.canonicalJSON(history: history))
        }
        _ = refolds
    }

    @Test("proposals and decisions in any arrival order give byte-identical state", arguments: 1...30)
    func proposalsInAnyOrder(seed: UInt64) throws {
        // Two deciders in a third of the runs: two nodes claiming the authority's name.
        let events = simulate(seed: seed, replicas: 4, steps: 150, authorities: seed % 3 == 0 ? 2 : 1)
        let reference = Projection.fold(job, events)
        let history = Projection.statusHistory(job, events)
        let decisions = events.filter { if case .decide = $0.body { true } else { false } }
        let proposals = events.filter { if case .propose = $0.body { true } else { false } }
        #expect(!proposals.isEmpty && !decisions.isEmpty, "the simulation proposes and decides")
        var rng = SeededGenerator(seed: seed &* 15_485_863)
        for _ in 0..<5 {
            var state = EntityState(entity: job)
            var applied: [Event] = []
            var appliedIDs = Set<ULID>()
            for event in events.shuffled(using: &rng) {
                let outcome = state.apply(event) { appliedIDs.contains($0) }
                applied.append(event)
                appliedIDs.insert(event.id)
                if outcome == .needsRefold { state = Projection.fold(job, applied) }
                if applied.count % 29 == 0 {
                    #expect(state.encoded() == Projection.fold(job, applied).encoded())
                }
            }
            #expect(state.encoded() == reference.encoded())
            #expect(state.canonicalJSON(history: history) == reference.canonicalJSON(history: history))
        }
        #expect(try EntityState(entity: job, decoding: reference.encoded()) == reference)
        // Every proposal is pending, accepted (a status head or superseded) or rejected.
        let decided = Set(decisions.compactMap { if case .decide(let p, _, _) = $0.body { p } else { nil } })
        for proposal in proposals where !decided.contains(proposal.id) {
            #expect(reference.proposals.contains { $0.id == proposal.id })
        }
        for pending in reference.proposals { #expect(!decided.contains(pending.id)) }
    }

    @Test func aRejectedProposalIsListedUntilItsOriginProposesAgain() throws {
        let hq = ULID(high: 1, low: 1)
        let laptop = ULID(high: 1, low: 2)
        let assigned = Event(id: id(1), origin: hq, entity: job, body: .status("assigned", base: []))
        let proposal = Event(id: id(2), origin: laptop, entity: job, body: .propose("en_route", base: [id(1)]))
        let cancelled = Event(id: id(3), origin: hq, entity: job, body: .status("cancelled", base: [id(1)]))
        let rejection = Event(
            id: id(4), origin: hq, entity: job,
            body: .decide(proposal: id(2), accept: false, reason: "stale: job/42 is cancelled now"))
        let pending = Projection.fold(job, [assigned, proposal])
        #expect(pending.currentStatus?.status == "assigned")
        #expect(pending.proposals.map(\.status) == ["en_route"])
        let rejected = Projection.fold(job, [rejection, cancelled, proposal, assigned])
        #expect(rejected.currentStatus?.status == "cancelled")
        #expect(rejected.proposals.isEmpty)
        #expect(rejected.rejected.map(\.reason) == ["stale: job/42 is cancelled now"])
        let text = String(decoding: rejected.canonicalJSON(history: []), as: UTF8.self)
        #expect(text.contains(#""rejected":[{"decision":"\#(id(4))","id":"\#(id(2))""#), "\(text)")
        // Proposing again supersedes the rejection; an accepted proposal becomes current.
        let again = Event(id: id(5), origin: laptop, entity: job, body: .propose("done", base: [id(3)]))
        let accepted = Event(
            id: id(6), origin: hq, entity: job, body: .decide(proposal: id(5), accept: true, reason: nil))
        let state = Projection.fold(job, [assigned, proposal, cancelled, rejection, again, accepted])
        #expect(state.rejected.isEmpty && state.proposals.isEmpty)
        #expect(state.currentStatus?.status == "done" && state.currentStatus?.id == id(5))
        #expect(!state.hasStatusConflict)
    }

    @Test("replicas that exchanged everything agree", arguments: 1...10)
    func convergence(seed: UInt64) {
        let events = simulate(seed: seed, replicas: 3, steps: 200)
        var rng = SeededGenerator(seed: seed)
        var a = Replica(origin: ULID(high: 1, low: 1), entity: job, clockMs: 0)
        var b = Replica(origin: ULID(high: 1, low: 2), entity: job, clockMs: 0)
        for event in events.shuffled(using: &rng) { a.learn(event) }
        for event in events.shuffled(using: &rng) { b.learn(event) }
        #expect(a.state.encoded() == b.state.encoded())
        #expect(a.state == Projection.fold(job, events))
    }

    @Test("the compact encoding round-trips", arguments: 1...20)
    func encodingRoundTrip(seed: UInt64) throws {
        let state = Projection.fold(job, simulate(seed: seed, replicas: 3, steps: 100))
        let decoded = try EntityState(entity: job, decoding: state.encoded())
        #expect(decoded == state)
    }

    @Test("corrupt encodings are errors, never crashes", arguments: 1...20)
    func corruptEncoding(seed: UInt64) {
        let bytes = Projection.fold(job, simulate(seed: seed, replicas: 2, steps: 60)).encoded()
        var rng = SeededGenerator(seed: seed)
        for cut in [1, bytes.count / 3, bytes.count - 1] {
            #expect(throws: CorruptDataError.self) { try EntityState(entity: job, decoding: Array(bytes.prefix(cut))) }
        }
        for _ in 0..<50 {
            var mutated = bytes
            mutated[Int.random(in: 0..<mutated.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            // Either decodes to something or throws; must not trap.
            _ = try? EntityState(entity: job, decoding: mutated)
        }
        #expect(throws: CorruptDataError.self) { try EntityState(entity: job, decoding: bytes + [0]) }
        // A counter past Int.max where the event count belongs (after the format byte).
        let huge = [bytes[0]] + [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01] + bytes.dropFirst(2)
        #expect(throws: CorruptDataError.self) { try EntityState(entity: job, decoding: Array(huge)) }
    }
}
