import Foundation
import Projections
import StoreTestSupport
import Testing

@testable import EventStore

/// A type with an authority: status events made elsewhere are proposals, and the authority
/// decides each one in the transaction that stores it; the decisions replicate back.
@Suite("Authority decisions")
struct AuthorityTests {
    static let types = Array(
        #"""
        {"job": {"status": {"initial": ["assigned"],
                            "transitions": {"assigned": ["en_route", "cancelled"], "en_route": ["on_site"]}},
                 "authority": "hq"}}
        """#.utf8)

    /// The authority, "hq", and a laptop, each with the types file.
    static func nodes() throws -> (hq: TempStore, laptop: TempStore) {
        let hq = try TempStore()
        let laptop = try TempStore()
        var rules = try TypeRules(parsing: types)
        rules.localNode = "hq"
        hq.log.typeRules = rules
        rules.localNode = "laptop"
        laptop.log.typeRules = rules
        return (hq, laptop)
    }

    static func status(_ entity: String, _ status: String) throws -> InputEvent {
        InputEvent(entity: try Validation.entity(entity), change: .status(status))
    }

    /// Each store takes every event of the other.
    static func exchange(_ a: TempStore, _ b: TempStore) throws {
        _ = try b.log.ingest(try allStoredEvents(a.log), from: "a")
        _ = try a.log.ingest(try allStoredEvents(b.log), from: "b")
        _ = try b.log.ingest(try allStoredEvents(a.log), from: "a")
    }

    static func decisions(_ log: EventLog) throws -> [Event] {
        try log.events(after: nil, limit: 1000).events.filter { $0.body.kind == .decide }
    }

    @Test func aStaleProposalIsRejectedAndTheAuthoritysStatusStands() throws {
        let (hq, laptop) = try Self.nodes()
        _ = try hq.log.append([Self.status("job/1", "assigned")])
        try Self.exchange(hq, laptop)
        // Offline from each other: the laptop proposes en_route, HQ cancels the job.
        _ = try laptop.log.append([Self.status("job/1", "en_route")])
        let proposed = try #require(try laptop.log.state(of: entity("job/1")))
        #expect(proposed.currentStatus?.status == "assigned", "a proposal leaves the current status as decided")
        #expect(proposed.proposals.map(\.status) == ["en_route"])
        _ = try hq.log.append([Self.status("job/1", "cancelled")])

        try Self.exchange(hq, laptop)
        for store in [hq, laptop] {
            let state = try #require(try store.log.state(of: entity("job/1")))
            #expect(state.currentStatus?.status == "cancelled")
            #expect(state.proposals.isEmpty)
            #expect(state.rejected.map(\.status) == ["en_route"])
            #expect(state.rejected.first?.reason.hasPrefix("stale: job/1 is cancelled now") == true)
        }
        let text = try #require(try stateJSON(laptop.log, "job/1"))
        #expect(text.contains(#""rejected":[{"decision":"#), "\(text)")
        let decisions = try Self.decisions(hq.log)
        #expect(decisions.count == 1 && decisions[0].origin == hq.log.nodeID)
        #expect(try hq.log.statistics().digest == laptop.log.statistics().digest)
        // Counted on the proposing node only, until it proposes again.
        #expect(try laptop.log.rejectedOwnProposals().map(\.proposal.status) == ["en_route"])
        #expect(try hq.log.rejectedOwnProposals().isEmpty)
        #expect(try laptop.log.rebuild(verify: true).mismatched.isEmpty)
        _ = try laptop.log.rebuild(verify: false)
        #expect(try laptop.log.rejectedOwnProposals().count == 1, "a rebuild writes the records again")
        laptop.log.typeRules = TypeRules(types: [:], localNode: "laptop")
        var lenient = try TypeRules(parsing: Array(#"{"job": {"authority": "hq"}}"#.utf8))
        lenient.localNode = "laptop"
        laptop.log.typeRules = lenient
        _ = try laptop.log.append([Self.status("job/1", "assigned")])
        #expect(try laptop.log.rejectedOwnProposals().isEmpty)
        try Self.exchange(hq, laptop)
        #expect(try laptop.log.state(of: entity("job/1"))?.rejected.map(\.status) == ["assigned"])
        #expect(try laptop.log.rejectedOwnProposals().count == 1)
    }

    @Test func aLegalProposalIsAcceptedAndBecomesCurrentEverywhere() throws {
        let (hq, laptop) = try Self.nodes()
        _ = try hq.log.append([Self.status("job/2", "assigned")])
        try Self.exchange(hq, laptop)
        let appended = try laptop.log.append([Self.status("job/2", "en_route")])
        try Self.exchange(hq, laptop)
        for store in [hq, laptop] {
            let state = try #require(try store.log.state(of: entity("job/2")))
            #expect(state.currentStatus?.status == "en_route")
            #expect(state.currentStatus?.id == appended.ids.first)
            #expect(state.proposals.isEmpty && state.rejected.isEmpty && !state.hasStatusConflict)
        }
        // Delivered again, through another peer: no second decision.
        _ = try hq.log.ingest(try allStoredEvents(laptop.log), from: "another")
        #expect(try Self.decisions(hq.log).count == 1)
        // The next proposal builds on the accepted one.
        _ = try laptop.log.append([Self.status("job/2", "on_site")])
        try Self.exchange(hq, laptop)
        #expect(try laptop.log.state(of: entity("job/2"))?.currentStatus?.status == "on_site")
        #expect(try hq.log.statistics().digest == laptop.log.statistics().digest)
    }

    @Test func anIllegalMoveIsRejectedWithTheRuleThatForbidsIt() throws {
        let (hq, laptop) = try Self.nodes()
        _ = try hq.log.append([Self.status("job/3", "assigned")])
        try Self.exchange(hq, laptop)
        // The laptop's own file refuses the move before anything is stored...
        #expect(throws: EventStoreError.self) { try laptop.log.append([Self.status("job/3", "on_site")]) }
        // ...and a laptop whose file lacks the rule proposes it; the authority rejects it.
        laptop.log.typeRules = TypeRules(types: [:], localNode: "laptop")
        var lenient = try TypeRules(parsing: Array(#"{"job": {"authority": "hq"}}"#.utf8))
        lenient.localNode = "laptop"
        laptop.log.typeRules = lenient
        _ = try laptop.log.append([Self.status("job/3", "on_site")])
        try Self.exchange(hq, laptop)
        let state = try #require(try laptop.log.state(of: entity("job/3")))
        #expect(state.currentStatus?.status == "assigned")
        let reason = try #require(state.rejected.first?.reason)
        #expect(reason.contains("cannot move from assigned to on_site"), "\(reason)")
        #expect(reason.contains("job.status.transitions.assigned"), "\(reason)")
    }

    @Test func theAuthoritysOwnStatusEventsAreNoProposalsAndClientsCannotDecide() throws {
        let (hq, _) = try Self.nodes()
        _ = try hq.log.append([Self.status("job/4", "assigned")])
        let state = try #require(try hq.log.state(of: entity("job/4")))
        #expect(state.currentStatus?.status == "assigned" && state.proposals.isEmpty)
        #expect(throws: EventStoreError.self) {
            try EventCodec.decodeInput(Array(#"{"entity":"job/4","kind":"decide","event":"x","accept":true}"#.utf8))
        }
        do {
            _ = try EventCodec.decodeInput(Array(#"{"entity":"job/4","kind":"decide"}"#.utf8))
            Issue.record("a client's decide was accepted")
        } catch {
            #expect(error.message.contains("only by a type's authority"), "\(error.message)")
        }
    }

    @Test func storedProposalsAndDecisionsRoundTrip() throws {
        let origin = ULID(high: 7, low: 7)
        let events = [
            Event(
                id: ULID(high: 9 << 16, low: 1), origin: origin, entity: try Validation.entity("job/5"),
                body: .propose("en_route", base: [ULID(high: 8 << 16, low: 1)]), by: "tech"),
            Event(
                id: ULID(high: 9 << 16, low: 2), origin: origin, entity: try Validation.entity("job/5"),
                body: .decide(proposal: ULID(high: 9 << 16, low: 1), accept: false, reason: "stale: \"quoted\"")),
            Event(
                id: ULID(high: 9 << 16, low: 3), origin: origin, entity: try Validation.entity("job/5"),
                body: .decide(proposal: ULID(high: 9 << 16, low: 1), accept: true, reason: nil), key: "k"),
        ]
        for event in events {
            let bytes = EventCodec.encodeStored(event)
            #expect(try EventCodec.decodeStored(bytes) == event, "\(String(decoding: bytes, as: UTF8.self))")
            let withoutID = EventCodec.encodeStored(event, includeID: false)
            let position = try #require(EventCodec.idPosition(inPayload: withoutID, hasKey: event.key != nil))
            // The encoder says where the id goes, with or without it, after what came before.
            var after: [UInt8] = Array("[1,".utf8)
            #expect(EventCodec.encodeStored(event, includeID: false, into: &after) == position)
            #expect(EventCodec.encodeStored(event, includeID: true, into: &after) == position)
            var spliced = withoutID
            spliced.insert(contentsOf: Array(#""id":"\#(event.id)","#.utf8), at: position)
            #expect(spliced == bytes)
        }
        for bad in [
            #"{"entity":"job/5","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","kind":"edit","fields":{"a":1},"origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","proposal":true}"#,
            #"{"entity":"job/5","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","kind":"decide","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#,
            #"{"accept":true,"entity":"job/5","event":"nope","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","kind":"decide","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"}"#,
            #"{"entity":"job/5","id":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","kind":"status","status":"a","origin":"01JD3Q8R5N8X6ZK2W7Y4V9B3TQ","proposal":false}"#,
        ] {
            #expect(throws: EventStoreError.self, "\(bad)") { try EventCodec.decodeStored(Array(bad.utf8)) }
        }
    }
    @Test func twoNodesClaimingTheAuthoritysNameAreDetectedAndStillConverge() throws {
        let (hq, laptop) = try Self.nodes()
        let impostor = try TempStore()
        var rules = try TypeRules(parsing: Self.types)
        rules.localNode = "hq"
        impostor.log.typeRules = rules
        _ = try hq.log.append([Self.status("job/6", "assigned")])
        try Self.exchange(hq, laptop)
        try Self.exchange(hq, impostor)
        _ = try laptop.log.append([Self.status("job/6", "en_route")])
        // The impostor moved the job on before the proposal reached it: it rejects, HQ accepts.
        _ = try impostor.log.append([Self.status("job/6", "cancelled")])
        _ = try hq.log.ingest(try allStoredEvents(laptop.log), from: "laptop")
        _ = try impostor.log.ingest(try allStoredEvents(laptop.log), from: "laptop")
        #expect(try Self.decisions(hq.log).count == 1)
        #expect(try Self.decisions(impostor.log).count == 1)
        for _ in 0..<2 {
            try Self.exchange(hq, impostor)
            try Self.exchange(hq, laptop)
        }
        let digests = try [hq, laptop, impostor].map { try $0.log.statistics().digest }
        #expect(digests.allSatisfy { $0 == digests[0] }, "the three converge")
        // Every node that took a second decision lists it; the smaller id counts everywhere.
        for store in [hq, impostor] {
            let violations = try store.log.ruleViolations()
            #expect(violations.contains { $0.rule.contains("a second decision on proposal") }, "\(violations)")
        }
        let decisions = try Self.decisions(hq.log).sorted { $0.id < $1.id }
        #expect(decisions.count == 2)
        guard case .decide(_, let accept, _) = decisions[0].body else { return }
        let state = try #require(try laptop.log.state(of: entity("job/6")))
        #expect(state.rejected.isEmpty == accept)

        // A new node takes the proposal and both decisions in one batch, in the order hq
        // stored them: the second decision finds the proposal stored by the same batch, not
        // yet in the entity index, and the fold and the record come out as on the others.
        let fresh = try TempStore()
        var freshRules = try TypeRules(parsing: Self.types)
        freshRules.localNode = "new"
        fresh.log.typeRules = freshRules
        _ = try fresh.log.ingest(try allStoredEvents(hq.log), from: "hq")
        #expect(try fresh.log.statistics().digest == digests[0])
        #expect(try fresh.log.ruleViolations().contains { $0.rule.contains("a second decision on proposal") })
        try fresh.check()
    }
    @Test func proposalsHeldBeforeANodeBecameTheirAuthorityAreDecidedThen() throws {
        let (hq, laptop) = try Self.nodes()
        // HQ runs without the authority in its file yet: it holds proposals undecided.
        hq.log.typeRules = TypeRules(types: [:], localNode: "hq")
        _ = try hq.log.append([Self.status("job/7", "assigned"), Self.status("job/8", "assigned")])
        try Self.exchange(hq, laptop)
        _ = try laptop.log.append([Self.status("job/7", "en_route"), Self.status("job/8", "cancelled")])
        try Self.exchange(hq, laptop)
        // Meanwhile HQ moved job/8 on: that proposal is stale when it comes to be decided.
        _ = try hq.log.append([Self.status("job/8", "en_route")])
        #expect(try Self.decisions(hq.log).isEmpty)
        #expect(try hq.log.state(of: entity("job/7"))?.proposals.count == 1)

        var rules = try TypeRules(parsing: Self.types)
        rules.localNode = "hq"
        hq.log.typeRules = rules
        let first = try hq.log.perform(DecidePendingJob(limit: 1))
        #expect(first.decided == 1 && first.more)
        let rest = try hq.log.perform(DecidePendingJob())
        #expect(rest.decided == 1 && !rest.more)
        #expect(try hq.log.perform(DecidePendingJob()).decided == 0, "each is decided once")
        try Self.exchange(hq, laptop)
        #expect(try laptop.log.state(of: entity("job/7"))?.currentStatus?.status == "en_route")
        #expect(try laptop.log.state(of: entity("job/8"))?.rejected.first?.reason.hasPrefix("stale") == true)
        #expect(try hq.log.statistics().digest == laptop.log.statistics().digest)
    }
}
