@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import Testing
@testable import Writer

/// Events under the daemon's own origin that arrive from elsewhere, far ahead of its clock:
/// by `import` and by a scripted peer's sync session, with an event of another origin where
/// a dragged clock would go next. The daemon refuses them and keeps appending near its
/// wall clock, also after a restart.
@Suite("Own-origin events from elsewhere")
struct OwnOriginAttackTests {
    /// An append's id; it must be near the wall clock.
    func appendNearNow(_ client: RPCClient, _ entity: String) throws -> ULID {
        let before = UInt64(Date().timeIntervalSince1970 * 1000)
        let result = try client.call(
            "append", eventsParams([#"{"entity":"\#(entity)","kind":"status","status":"assigned"}"#]))
        let text = try #require((result["ids"] as? [String])?.first)
        let id = try #require(ULID(text))
        let after = UInt64(Date().timeIntervalSince1970 * 1000)
        // Generous: ids stay on this wall clock, not 8,000 years ahead.
        #expect(id.timestamp + 60_000 >= before && id.timestamp <= after + 60_000, "\(id)")
        return id
    }

    func skewedOrigins(_ client: RPCClient) throws -> [String: Int] {
        let clock = try #require(try client.call("status")["clock"] as? [String: Any])
        return clock["skewed_origins"] as? [String: Int] ?? [:]
    }

    @Test("ULID.max under the daemon's origin is refused by import and dead-lettered from sync; appends go on")
    func ownOriginAtTheEndOfTime() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        var client = try daemon.client()
        let node = try #require((try client.call("status")["node"] as? [String: Any])?["id"] as? String)
        let first = try appendNearNow(client, "job/1")
        let poison = #"{"entity":"job/poison","id":"\#(ULID.max)","kind":"status","origin":"\#(node)","status":"x"}"#

        // By import: the whole request is refused, and nothing of it is stored.
        let refused = try client.failure("import", eventsParams([poison]))
        #expect(refused.reason == "invalid_event" && refused.code == -32005)
        #expect(refused.message.hasPrefix("event 0 (\(ULID.max)): foreign_own_origin: "), "\(refused.message)")
        #expect(try client.call("status")["events"] as? Int == 1)

        // By sync: a dead letter; beside it, an event of the peer's origin at the id a clock
        // dragged to the end would make next, which is stored like any far-ahead event.
        let taken = ULID.lowerBound(timestamp: ULID.maxTimestamp)
        let peer = try ScriptedPeer(handshake: true) { peer, channel in
            try peer.answerHello(channel)
            let other = #"{"entity":"job/taken","kind":"status","origin":"\#(peer.node)","status":"x"}"#
            let ownJSON = #"{"entity":"job/poison","kind":"status","origin":"\#(node)","status":"x"}"#
            let frame = Frame(
                kind: .batch,
                payload: try BatchCodec.encode(
                    [
                        ReplicatedEvent(id: .max, json: Array(ownJSON.utf8)),
                        ReplicatedEvent(id: taken, json: Array(other.utf8)),
                    ], compressor: Compressor()))
            try channel.write(frame)
            _ = try channel.read()
            try channel.write(Frame(kind: .done, payload: Messages.encode(Messages.Done(sent: 2, reconciled: 0))))
        }
        let result = try client.call("sync", #"{"peer":"\#(peer.url)"}"#)
        peer.finish()
        let outcome = try #require((result["peers"] as? [[String: Any]])?.first)
        #expect(outcome["error"] is NSNull, "\(outcome)")
        #expect(outcome["received"] as? Int == 1 && outcome["dead_letters"] as? Int == 1, "\(outcome)")
        let letters = try #require(try client.call("dead_letters")["dead_letters"] as? [[String: Any]])
        #expect(letters.count == 1)
        #expect(letters.first?["id"] as? String == ULID.max.description)
        #expect(letters.first?["origin"] as? String == node)
        #expect((letters.first?["reason"] as? String)?.hasPrefix("foreign_own_origin: ") == true, "\(letters)")

        // Appends go on near the wall clock, and the leads are reported for both origins.
        var last = first
        for round in 0..<3 {
            let id = try appendNearNow(client, "job/a\(round)")
            #expect(id > last)
            last = id
        }
        let skewed = try skewedOrigins(client)
        #expect((skewed[node] ?? 0) > 1_000_000_000_000, "\(skewed)")
        #expect((skewed[peer.node.description] ?? 0) > 1_000_000_000_000, "\(skewed)")

        // And after a restart.
        #expect(try daemon.stop() == 0)
        let restarted = try DaemonProcess(root: daemon.root)
        defer { restarted.removeFiles() }
        client = try restarted.client()
        for round in 0..<3 {
            let id = try appendNearNow(client, "job/b\(round)")
            #expect(id > last)
            last = id
        }
        let status = try client.call("status")
        #expect(status["events"] as? Int == 1 + 1 + 6)
        #expect((status["needs_attention"] as? [String: Any])?["dead_letters"] as? Int == 1)
        #expect((try skewedOrigins(client)[node] ?? 0) > 1_000_000_000_000)
    }
}
