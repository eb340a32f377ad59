@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Server
import StoreTestSupport
import TestSupport
import Testing
@testable import Writer

/// Stores whose wall clocks disagree by days, synced in this process: causal context
/// decides, local ids stay monotonic and on their own clock, and each side reports the
/// other's offset.
@Suite("Clock skew between nodes")
struct ClockSkewTests {
    static let day: UInt64 = 86_400_000
    let now = UInt64(Date().timeIntervalSince1970 * 1000)

    private func store(at clock: UInt64) throws -> TempStore {
        var options = StoreOptions()
        options.wallClock = { clock }
        return try TempStore(options: options)
    }

    private func append(_ store: TempStore, _ line: String) throws -> ULID {
        try store.log.append([try EventCodec.decodeInput(Array(line.utf8))]).ids[0]
    }

    private func state(_ store: TempStore, _ entity: String) throws -> [String: Any] {
        let bytes = try #require(try store.log.canonicalState(of: EntityKey(validated: Array(entity.utf8))))
        return try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test("a peer days behind: its later edit wins by causal context, and its offset is reported")
    func peerDaysBehind() throws {
        let hq = try store(at: now)
        let van = try store(at: now - 3 * Self.day)
        defer {
            hq.remove()
            van.remove()
        }
        let first = try append(hq, #"{"entity":"job/1","kind":"edit","fields":{"address":"12 Main St"}}"#)
        try syncPair(van.log, hq.log)
        // The van saw hq's edit; its own edit names it, though its id is three days older.
        let second = try append(van, #"{"entity":"job/1","kind":"edit","fields":{"address":"14 Main St"}}"#)
        #expect(second < first)
        #expect(second.timestamp < now - 2 * Self.day, "the van's ids stay on its own clock")
        try syncPair(van.log, hq.log)
        for node in [hq, van] {
            let job = try state(node, "job/1")
            #expect((job["fields"] as? [String: Any])?["address"] as? String == "14 Main St")
            #expect(((job["conflicts"] as? [String: Any])?["fields"] as? [String: Any])?.isEmpty != false)
        }

        // Edits that did not see each other conflict on both nodes, whatever the clocks.
        _ = try append(hq, #"{"entity":"job/2","kind":"edit","fields":{"tech":"ana"}}"#)
        _ = try append(van, #"{"entity":"job/2","kind":"edit","fields":{"tech":"bo"}}"#)
        try syncPair(hq.log, van.log)
        #expect(
            try hq.log.canonicalState(of: EntityKey(validated: Array("job/2".utf8))).map {
                withoutRev(String(decoding: $0, as: UTF8.self))
            }
                == van.log.canonicalState(of: EntityKey(validated: Array("job/2".utf8))).map {
                    withoutRev(String(decoding: $0, as: UTF8.self))
                })
        let conflict = try #require(
            ((try state(hq, "job/2")["conflicts"] as? [String: Any])?["fields"] as? [String: Any])?["tech"]
                as? [[String: Any]])
        #expect(Set(conflict.compactMap { $0["value"] as? String }) == ["ana", "bo"])

        // Each side measured the other's clock in the hellos; both are far beyond the bound.
        let behind = try #require(hq.log.measuredClockOffsets[van.log.nodeID])
        let ahead = try #require(van.log.measuredClockOffsets[hq.log.nodeID])
        #expect(abs(behind + 3 * Int64(Self.day)) < 1000)
        #expect(abs(ahead - 3 * Int64(Self.day)) < 1000)
        #expect(try #require(hq.log.skewedOrigins(idLeads: [:])[van.log.nodeID]) < -2 * Int64(Self.day))
        #expect(try #require(van.log.skewedOrigins(idLeads: [:])[hq.log.nodeID]) > 2 * Int64(Self.day))
    }

    @Test("a peer days ahead does not drag local ids, and a close peer is not listed as skewed")
    func peerDaysAheadAndOneClose() throws {
        let hq = try store(at: now)
        let fast = try store(at: now + 2 * Self.day)
        let close = try store(at: now + 5_000)
        defer {
            for node in [hq, fast, close] { node.remove() }
        }
        let future = try append(fast, #"{"entity":"job/3","kind":"status","status":"assigned"}"#)
        try syncPair(hq.log, fast.log)
        try syncPair(hq.log, close.log)
        let local = try append(hq, #"{"entity":"job/3","kind":"status","status":"done"}"#)
        #expect(local < future, "hq's id stays on hq's clock")
        #expect(local.timestamp < now + 3_600_000)
        let job = try state(hq, "job/3")
        #expect((job["status"] as? [String: Any])?["current"] as? String == "done", "causal context decides")

        let skewed = hq.log.skewedOrigins(idLeads: try hq.log.statistics().skewedOrigins)
        #expect(try #require(skewed[fast.log.nodeID]) > Int64(Self.day))
        #expect(skewed[close.log.nodeID] == nil)
        #expect(abs(try #require(hq.log.measuredClockOffsets[close.log.nodeID]) - 5_000) < 1000)
    }
}
