import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// `entitiesLacking` answers a page either by decoding the few events a peer lacks or, when
/// it lacks many, by walking the entities within a budget; paged to the end, both give the
/// same entities.
@Suite("Entities a peer lacks: the bounded walk and the decoding path agree")
struct PendingListingTests {
    /// Store b holds its own jobs and sites and every event of store a (jobs of another
    /// origin, some deleted, every third edited on b too); a is returned for its origin.
    static func stores() throws -> (a: TempStore, b: TempStore) {
        let a = try TempStore()
        let b = try TempStore()
        let statuses = ["assigned", "done", "en_route"]
        var fromA: [InputEvent] = []
        for index in 0..<120 {
            fromA.append(
                try input(#"{"entity":"job/a\#(index)","kind":"status","status":"\#(statuses[index % 3])"}"#))
            if index % 10 == 4 { fromA.append(try input(#"{"entity":"job/a\#(index)","kind":"delete"}"#)) }
        }
        _ = try a.log.append(fromA)
        var fromB: [InputEvent] = []
        for index in 0..<80 {
            fromB.append(
                try input(#"{"entity":"job/b\#(index)","kind":"status","status":"\#(statuses[index % 3])"}"#))
            fromB.append(try input(#"{"entity":"site/\#(index)","kind":"edit","fields":{"n":\#(index)}}"#))
        }
        _ = try b.log.append(fromB)
        _ = try b.log.ingest(try allStoredEvents(a.log), from: "a")
        let edits = try stride(from: 0, to: 120, by: 3).filter { $0 % 10 != 4 }.map { index in
            try input(#"{"entity":"job/a\#(index)","kind":"edit","fields":{"seen":true}}"#)
        }
        _ = try b.log.append(edits)
        return (a, b)
    }

    /// Every page of `entitiesLacking`, `limit` at a time within `budget`: the entities,
    /// and whether a page held fewer than `limit` while another followed.
    static func walk(
        _ log: EventLog, _ holdings: PeerHoldings, type: String?, status: String?, includeDeleted: Bool,
        limit: Int, budget: PendingScanBudget
    ) throws -> (entities: [EntitySummary], cutShort: Bool) {
        var entities: [EntitySummary] = []
        var cutShort = false
        var after: EntityKey?
        for _ in 0..<2_000 {
            let page = try log.entitiesLacking(
                holdings, type: type, status: status, includeDeleted: includeDeleted, after: after, limit: limit,
                budget: budget)
            #expect(page.entities.count <= limit)
            entities += page.entities
            guard let next = page.next else { return (entities, cutShort) }
            if page.entities.count < limit { cutShort = true }
            after = next
        }
        Issue.record("the pages did not end")
        return (entities, cutShort)
    }

    @Test(
        "for a peer never synced, one partly synced and one with dead letters, with every filter, the walk's pages give exactly what decoding every lacking event gives"
    )
    func walkEqualsDecoding() throws {
        let (a, b) = try PendingListingTests.stores()
        let originA = try #require(try a.log.versionVector().keys.first)
        let vector = try b.log.versionVector()
        let originB = try #require(vector.keys.first { $0 != originA })
        let idsA = try b.log.eventIDs(ofOrigin: originA, limit: 10_000)
        let idsB = try b.log.eventIDs(ofOrigin: originB, limit: 10_000)
        let partly = [originA: idsA[60], originB: idsB[100]]
        let holdings = [
            PeerHoldings(),
            PeerHoldings(vector: partly),
            PeerHoldings(vector: vector, deadLettered: [idsA[7], idsB[33], idsB[150]]),
            PeerHoldings(vector: vector),
        ]
        let filters: [(type: String?, status: String?, includeDeleted: Bool)] = [
            (nil, nil, false), ("job", nil, false), (nil, "done", false), (nil, nil, true), ("site", nil, true),
        ]
        let decodeAll = PendingScanBudget(decodedEvents: 1 << 30)
        let tiny = PendingScanBudget(decodedEvents: 0, entities: 7, indexEntries: 11)
        var cutShort = false
        for (index, peer) in holdings.enumerated() {
            for filter in filters {
                let exact = try b.log.entitiesLacking(
                    peer, type: filter.type, status: filter.status, includeDeleted: filter.includeDeleted,
                    limit: 10_000, budget: decodeAll)
                #expect(exact.next == nil)
                if index == 0 {
                    // Never synced: it lacks every entity the filter keeps.
                    let all = try b.log.entities(
                        type: filter.type, status: filter.status, includeDeleted: filter.includeDeleted,
                        limit: 10_000)
                    #expect(exact.entities == all.entities, "\(filter)")
                }
                if index == 3 { #expect(exact.entities.isEmpty, "up to date: \(filter)") }
                for limit in [1, 4] {
                    let walked = try PendingListingTests.walk(
                        b.log, peer, type: filter.type, status: filter.status,
                        includeDeleted: filter.includeDeleted, limit: limit, budget: tiny)
                    #expect(
                        walked.entities.map(\.entity) == exact.entities.map(\.entity),
                        "peer \(index), \(filter), limit \(limit)")
                    #expect(walked.entities == exact.entities)
                    cutShort = cutShort || walked.cutShort
                }
                let defaults = try PendingListingTests.walk(
                    b.log, peer, type: filter.type, status: filter.status, includeDeleted: filter.includeDeleted,
                    limit: 3, budget: PendingScanBudget())
                #expect(defaults.entities == exact.entities, "peer \(index), \(filter), default budget")
            }
        }
        #expect(cutShort, "some page of the tiny budget ended short of its limit with a next")

        // An `after` that sorts before the type's first entity starts at that type.
        let sites = try b.log.entitiesLacking(PeerHoldings(), type: "site", limit: 10_000, budget: decodeAll)
        #expect(sites.entities.count == 80)
        let walkedFromEarlier = try b.log.entitiesLacking(
            PeerHoldings(), type: "site", after: entity("job/a1"), limit: 5, budget: PendingScanBudget(decodedEvents: 0)
        )
        #expect(walkedFromEarlier.entities == Array(sites.entities.prefix(5)))
        let listedFromEarlier = try b.log.entities(type: "site", after: entity("job/a1"), limit: 5)
        #expect(listedFromEarlier.entities == Array(sites.entities.prefix(5)))
        #expect(try b.log.entities(limit: 10_000).entities.count > 200)
    }
}
